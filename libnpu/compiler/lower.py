"""Lowering: an int8 IR graph -> chip task descriptors -> a loadable; and
:func:`compile_model`, the compiler's one entry point (model file -> loadable).

A walk over the ops in topological order; each op becomes its descriptor by
:func:`libnpu.compiler.descriptors.lower_op`, the memory plan giving every operand's
(region, offset). Per-channel multipliers, LUTs and CONCATENATION's tables are appended to
the weights region.

Dependencies list, for each task, the earlier tasks it must follow: the producers of
its inputs and every earlier task touching bytes it overwrites (the arena reuses
memory), so a scheduler may run independent tasks in any order. A stateful graph's
write-backs (``ASSIGN_VARIABLE``, ``compiler.ops.variables``) come last, so they follow
every task that reads a state's old value.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dynamic_outputs import DYNAMIC_OUTPUTS, decode_dynamic_outputs
from ..loadable import HostStep, Loadable, Task
from .blas_threads import one_blas_thread
from .descriptors import Lowering, LoweringError, lower_op
from .frontend import check_int8, load_model, to_int8_graph
from .frozen_inputs import FrozenInputs, freeze_model_inputs
from .host_outputs import host_writes_float_outputs
from .input_shapes import InputShapes, fix_input_shapes
from .ir import Graph, IRError, Op, Tensor
from .layer_faults import MAX_LAYER_FAULTS, LayerFault, fault_sources
from .memplan import MemoryPlan, plan_memory
from .placement import CPU, import_with_fallback, plan_placement
from .progress import Progress, stage
from .small_islands import MIN_NPU_PARTITION, SMALL_ISLANDS, small_island_sources
from .source_index import SOURCE_OPS, op_sources, task_source_meta
from .tiling import split_layers

__all__ = ["LoweringError", "lower", "compile_model"]


def _extents(plan: MemoryPlan, names: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for n in names:
        p = plan.placements[n]
        out.append((p.region, p.offset, p.offset + max(p.nbytes, 1)))
    return out


class _Touched:
    """The extents (region, start, end) every earlier task read or wrote, to find the tasks
    a new task's writes must follow. In numpy: checked pair by pair in Python, a 30-step
    bidirectional LSTM's 1250 tasks took 14.6 s of a 23 s compile."""

    def __init__(self) -> None:
        self._rows = np.empty((64, 4), np.int64)      # region, start, end, task
        self._n = 0

    def add(self, task: int, extents: list[tuple[int, int, int]]) -> None:
        if self._n + len(extents) > len(self._rows):
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
            return self.add(task, extents)
        for r, s, e in extents:
            self._rows[self._n] = (r, s, e, task)
            self._n += 1

    def overlapping(self, extents: list[tuple[int, int, int]]) -> set[int]:
        """The tasks that touched any byte of ``extents``."""
        rows = self._rows[:self._n]
        found: set[int] = set()
        for r, s, e in extents:
            hit = (rows[:, 0] == r) & (rows[:, 1] < e) & (s < rows[:, 2])
            found.update(int(t) for t in np.unique(rows[hit, 3]))
        return found


class _Ancestors:
    """Each task's ancestors (a bit per earlier task), to keep of a new task's dependencies
    only those no other one already implies. Every earlier task touching bytes a task
    overwrites is a dependency, most of them reached through another: an unrolled GRU's
    7,224 tasks named 2.9 M (400 each), 16 MB of DEPENDS descriptors the chip decoded in
    Python on every first run of the job on a multi-core device (5-6 s of CPU, past the 5 s
    default timeout). The order Kahn's algorithm gives, the ready times and so the chip's
    placement and cycles are those of the full list (a task's ancestors end before it).
    The bitsets grow as tasks squared over 16 bytes: 3.3 MB and 0.14 s for those 7,224 tasks
    (a 50,000-task job would hold 156 MB while it is lowered)."""

    def __init__(self) -> None:
        self._bits: list[int] = []

    def direct(self, deps: set[int]) -> list[int]:
        """The next task's dependencies ``deps`` less those an other one implies; records them."""
        kept: list[int] = []
        covered = 0
        for d in sorted(deps, reverse=True):       # a later task may follow an earlier one, never the reverse
            if not covered >> d & 1:
                kept.append(d)
                covered |= self._bits[d] | 1 << d
        self._bits.append(covered)
        return sorted(kept)


def lower(graph: Graph, *, metadata: dict[str, Any] | None = None, tiles: int = 1) -> Loadable:
    """Compile an int8 graph (see :func:`frontend.check_int8`) into a loadable; ``tiles`` > 1
    splits its large convolutions into that many independent tasks (:mod:`.tiling`).

    A graph with no operators or no outputs, or whose operators all lower to nothing,
    is refused: its loadable would run no task and report success."""
    graph.check_runnable()
    check_int8(graph)
    graph = _copy_crossed_states(host_writes_float_outputs(graph))
    sources = op_sources(graph.metadata)
    plan = plan_memory(graph)
    _, index = plan.descriptors(graph)
    low = Lowering(graph, plan)
    tasks: list[Task] = []
    host_steps: list[HostStep] = []
    producer: dict[str, int] = {}
    touched, ancestors = _Touched(), _Ancestors()
    # After the last op, each changed state's new value is copied into its STATE region.
    write_backs = [Op("ASSIGN_VARIABLE", [s.output], [s.input], name=f"{s.name}/assign")
                   for s in graph.states if s.output != s.input]
    for op in [*graph.ops, *write_backs]:
        if op.type == "HOST":
            host_steps.append(_host_step(op, len(tasks), index))
            continue
        task = lower_op(low, op)
        ins = [i for i in op.inputs if i and not graph.tensors[i].is_constant]
        if task is None:  # aliased RESHAPE: the output is ready when the input is
            if ins[0] in producer:
                producer[op.outputs[0]] = producer[ins[0]]
            continue
        opcode, payload, relocs = task
        reads, writes = _extents(plan, ins), _extents(plan, op.outputs)
        deps = {producer[i] for i in ins if i in producer}
        deps |= touched.overlapping(writes)
        tasks.append(Task(op.name, op.type, opcode, payload,
                          deps=ancestors.direct(deps), tensors=[index[n] for n in op.inputs + op.outputs if n],
                          macs=graph.op_macs(op),
                          bytes_moved=sum(graph.tensors[n].nbytes for n in op.inputs + op.outputs if n),
                          meta=task_source_meta(sources, op), relocs=relocs))
        touched.add(len(tasks) - 1, reads + writes)
        for o in op.outputs:
            producer[o] = len(tasks) - 1
    if not tasks and not host_steps:
        raise LoweringError(f"{graph.name}: no operator lowers to a chip task (all are aliased reshapes)")
    meta = dict(graph.metadata, **(metadata or {}))
    meta.pop(SOURCE_OPS, None)          # each task names its own source operator (task.meta)
    meta.update(arena_bytes=plan.arena_size, weights_bytes=plan.weights_size, macs=graph.macs())
    dynamic = meta.pop(DYNAMIC_OUTPUTS, {})    # carried by the output descriptors (libnpu.dynamic_outputs)
    loadable = plan.to_loadable(graph, tasks, {k: v for k, v in meta.items() if _jsonable(v)}, host_steps)
    decode_dynamic_outputs(dynamic, loadable.outputs())
    return split_layers(loadable, tiles)


def _host_step(op: Op, after_task: int, index: Mapping[str, int]) -> HostStep:
    """A HOST op as the loadable stores it: the host runs it once ``after_task`` tasks are done
    (dependencies across it are kept by the runtime, which runs the partitions in order)."""
    call = op.attrs["host"]
    return HostStep(op.name, call.kind, call.op, call.model, after_task,
                    [index[n] for n in op.inputs], [index[n] for n in op.outputs], call.source, call.reason)


def _copy_crossed_states(graph: Graph) -> Graph:
    """Copies where a state's old value must outlive its write-back: the new value of
    another state (``a, b = b, a``: the write-backs run one after another, the second
    would read the first's new value) and a graph output (read after the job). A copy is
    an ordinary op, so it runs before every write-back."""
    old_values = {s.input for s in graph.states}
    crossed = [s for s in graph.states if s.output in old_values and s.output != s.input]
    if not crossed and not old_values & set(graph.outputs):
        return graph
    graph = graph.copy()

    def copy_of(name: str, label: str) -> str:
        source = graph.tensors[name]
        copy = graph.add_tensor(Tensor(graph.unique_name(label), source.shape, source.dtype, source.quant))
        graph.add_op(Op("RESHAPE", [name], [copy.name], dict(new_shape=source.shape), name=copy.name))
        return copy.name

    for state in graph.states:
        if state.output in old_values and state.output != state.input:
            state.output = copy_of(state.output, f"{state.name}/new")
    for state in graph.states:
        if state.input in graph.outputs:     # the output keeps its name; the state takes another
            old, t = state.input, graph.tensors[state.input]
            state.input = graph.add_tensor(Tensor(graph.unique_name(f"{old}/state"), t.shape, t.dtype, t.quant)).name
            state.output = state.input if state.output == old else state.output
            for op in graph.ops:
                op.inputs = [state.input if i == old else i for i in op.inputs]
            graph.add_op(Op("RESHAPE", [state.input], [old], dict(new_shape=t.shape), name=old))
    return graph


def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))


@one_blas_thread()
def compile_model(model: str | os.PathLike | bytes | Graph,
                  dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None, *,
                  kind: str | None = None, progress: Progress | None = None,
                  ops: Collection[str] | None = None, strict: bool = False,
                  input_shapes: InputShapes = None, freeze_inputs: FrozenInputs = None, tiles: int = 1,
                  **quantize_options: Any) -> Loadable:
    """Model file (path/bytes) or graph -> int8 graph (quantized if needed) -> loadable.

    The compiler's one entry point: ``progress`` hears every stage (:mod:`libnpu.compiler.progress`).
    Operators the chip cannot run (:mod:`libnpu.compiler.placement`; ``ops`` an allow-list of
    the names the chip may run) become host steps; ``strict`` refuses that
    (:class:`~libnpu.compiler.placement.FallbackRefusedError` listing them all). A layer whose
    quantization fails inside the whole model (:mod:`libnpu.compiler.layer_faults`) runs on the
    CPU too, its reason the real cause (metadata ``"layer_faults"``), unless ``strict``.
    ``input_shapes`` fixes the model's free input dimensions (:mod:`libnpu.compiler.input_shapes`);
    the notes on defaults taken are the loadable's metadata ``"notes"``. ``freeze_inputs``
    (``{"sr": 16000}``) makes those ONNX inputs constants first (:mod:`libnpu.compiler.frozen_inputs`).
    ``tiles``: the cores one inference is planned for (:mod:`libnpu.compiler.tiling`).
    numpy's BLAS runs on one thread meanwhile (:mod:`libnpu.compiler.blas_threads`)."""
    dataset = list(dataset) if dataset is not None else None
    notes: list[str] = []
    if not isinstance(model, Graph):      # static shapes from here on: every stage sees the same model
        model, kind = freeze_model_inputs(model, kind, freeze_inputs)
        model, kind, notes = fix_input_shapes(model, kind, input_shapes)
    elif freeze_inputs:
        raise IRError("freeze_inputs: the graph is imported already; freeze them in the model file")
    elif input_shapes is not None:
        raise IRError("input_shapes: the graph is imported already; give them to its import")
    meta = {"notes": notes} if notes else None
    faults: dict[int, str] = {}        # source op -> why quantizing it failed (layer_faults)
    min_partition = _min_partition(quantize_options.get("min_npu_partition", MIN_NPU_PARTITION))
    quantize_options["min_npu_partition"] = min_partition     # and the CPU front end's (escalation)
    if isinstance(model, Graph):
        graph = model
    elif ops is None:
        try:    # the whole model on the chip, as it always compiled; placement only when that fails
            graph = to_int8_graph(model, dataset, kind=kind, progress=progress, **quantize_options)
            with stage(progress, "lower"):
                return lower(graph, metadata=meta, tiles=tiles)
        except IRError as refused:
            with stage(progress, "import"):
                graph = _placed_graph(model, kind, ops, strict, refused, dataset, faults, min_partition)
    else:
        with stage(progress, "import"):
            graph = _placed_graph(model, kind, ops, strict, None, dataset, faults, min_partition)
    while True:
        try:
            graph = to_int8_graph(graph, dataset, progress=progress, **quantize_options)
            break
        except LayerFault as fault:    # one more layer for the CPU, if the model is a file to place again
            if isinstance(model, Graph):
                raise
            with stage(progress, "import"):
                graph = _placed_graph(model, kind, ops, strict, fault, dataset, faults, min_partition)
    if faults:      # said by npu compile: a layer the user may have expected on the chip
        meta = dict(meta or {}, layer_faults=[f"{op} (op {i}) runs on the CPU: {reason}"
                                              for i, op, _, reason in graph.metadata["placement"] if i in faults])
    with stage(progress, "lower"):
        return lower(graph, metadata=meta, tiles=tiles)


def _min_partition(value: Any) -> int:
    """The ``min_npu_partition`` option, checked: a whole number of multiply-adds, >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise IRError(f"min_npu_partition must be a whole number of multiply-adds >= 0 (0: off), not {value!r}")
    return int(value)


def _placed_graph(model: str | os.PathLike | bytes, kind: str | None, ops: Collection[str] | None,
                  strict: bool, refused: IRError | None, dataset: list | None = None,
                  faults: dict[int, str] | None = None, min_partition: int = MIN_NPU_PARTITION) -> Graph:
    """The model imported with the operators placed on the CPU as HOST ops. ``refused``:
    why the whole model did not compile for the chip, raised again when no operator
    needs the CPU (the cause is elsewhere). ``dataset``: the calibration data, which the
    placement judges a float model's ops on. ``faults`` (source op -> reason), kept
    across calls: the operators whose quantization failed (a ``refused`` that is a
    :class:`~libnpu.compiler.layer_faults.LayerFault` adds its own), on the CPU too.
    ``min_partition``: chip partitions between host calls doing less work join them
    (:mod:`libnpu.compiler.small_islands`; 0: none)."""
    plan = plan_placement(model, ops=ops, kind=kind, dataset=dataset)
    if strict:
        plan.refuse_fallback()
    faults = {} if faults is None else faults
    if isinstance(refused, LayerFault):
        _, sources = import_with_fallback(plan.data, plan.kind, plan.name, force_host={**plan.cpu, **faults})
        found = [s for s in fault_sources(refused, sources) if s.index not in faults and not s.reason]
        if strict or not found or len(faults) + len(found) > MAX_LAYER_FAULTS:
            raise refused
        faults.update({s.index: refused.reason for s in found})
    cpu = {**plan.cpu, **faults}
    if not cpu:
        if refused is not None:
            raise refused
        return load_model(plan.data, kind=plan.kind, name=plan.name)
    graph, sources = import_with_fallback(plan.data, plan.kind, plan.name, force_host=cpu)
    islands = small_island_sources(graph, sources, min_partition)
    if islands:     # tiny chip partitions between host calls join them (small_islands)
        cpu = {**cpu, **islands}
        graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=cpu)
        graph.metadata[SMALL_ISLANDS] = [f"{p.op} (op {p.index}) runs on the CPU: {islands[p.index]}"
                                         for p in plan.placements if p.index in islands]
    graph.metadata["placement"] = [[p.index, p.op, CPU if p.index in cpu else p.device, cpu.get(p.index, p.reason)]
                                   for p in plan.placements]
    return graph
