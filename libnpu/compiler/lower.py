"""Lowering: an int8 IR graph -> chip task descriptors -> a loadable.

A walk over the ops in topological order. For each op, ``qparams.op_params`` gives the
kernel parameters, its operator's ``lower`` (``compiler.ops``) the descriptor, the
memory plan every operand's (region, offset); the descriptor (``firmware_sim.spec``)
is encoded with its address fields left 0 and one relocation per address, filled in
at load time. Per-channel
multipliers, LUTs and CONCATENATION's tables are appended to the weights region.

Dependencies list, for each task, the earlier tasks it must follow: the producers of
its inputs and every earlier task touching bytes it overwrites (the arena reuses
memory), so a scheduler may run independent tasks in any order. A stateful graph's
write-backs (``ASSIGN_VARIABLE``, ``compiler.ops.variables``) come last, so they follow
every task that reads a state's old value.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from firmware_sim.spec import ops as spec_ops
from firmware_sim.spec import tasks as spec_tasks

from ..loadable import HostStep, Loadable, Reloc, Task
from . import registry
from .frontend import check_int8
from .ir import Graph, IRError, Op, Tensor
from .memplan import MemoryPlan, plan_memory
from .progress import Progress, stage
from .qparams import op_params

__all__ = ["LoweringError", "lower", "compile_model", "Emitted", "Lowering", "pad_rank", "int16_flags"]


class LoweringError(IRError):
    """An op cannot be expressed as chip tasks."""


def pad_rank(shape, rank: int = spec_ops.MAX_RANK) -> list[int]:
    """A shape as a descriptor's ``u32[MAX_RANK]`` field (unused trailing entries 0)."""
    shape = [int(d) for d in shape]
    if len(shape) > rank:
        raise LoweringError(f"rank {len(shape)} exceeds the chip's {rank}")
    return shape + [0] * (rank - len(shape))


@dataclass
class Emitted:
    """One descriptor to encode: what an operator's ``lower`` returns."""
    name: str                      # descriptor type name in spec.tasks
    flags: int
    fields: dict[str, Any]
    addresses: dict[str, str]      # descriptor field -> tensor name
    extra: dict[str, Any] = field(default_factory=dict)  # field -> (region, offset) of lowering constants


class Lowering:
    """What an operator's ``lower`` gets: the graph, the memory plan and helpers."""

    def __init__(self, graph: Graph, plan: MemoryPlan) -> None:
        self.g, self.plan = graph, plan

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def const(self, op: Op, what: str, data: np.ndarray) -> tuple[int, int]:
        p = self.plan.add_constant(f"{op.name}/{what}", data)
        return p.region, p.offset

    def emit(self, name: str, op: Op, fields: dict, flags: int = 0, extra: dict | None = None) -> Emitted:
        """A one-input, one-output descriptor reading ``op.inputs[0]``, writing its output."""
        return Emitted(name, flags, fields, dict(input=op.inputs[0], output=op.outputs[0]), extra or {})

    def flat(self, name: str, op: Op, fields: dict, extra: dict | None = None) -> Emitted:
        """A flat elementwise descriptor (``count`` elements)."""
        return self.emit(name, op, dict(fields, count=self.g.tensors[op.inputs[0]].size), extra=extra)

    def weighted(self, name: str, op: Op, fields: dict, flags: int = 0,
                 extra: dict | None = None) -> Emitted:
        """A descriptor reading ``op``'s input, weights and optional bias, writing its output."""
        addresses = dict(input=op.inputs[0], weights=op.inputs[1], output=op.outputs[0])
        if len(op.inputs) > 2 and op.inputs[2]:
            addresses["bias"] = op.inputs[2]
        return Emitted(name, flags, fields, addresses, extra or {})

    def convolution(self, name: str, op: Op, fields: dict, p: dict) -> Emitted:
        """A convolution-family descriptor: one requantization in ``fields``, or per-channel
        multipliers and shifts as lowering constants (``OPF_PER_CHANNEL``)."""
        mult, shift = p["multiplier"], p["shift"]
        if mult.size > 1:
            extra = dict(mult_iova=self.const(op, "multiplier", mult), shift_iova=self.const(op, "shift", shift))
            return self.weighted(name, op, fields, spec_ops.OPF_PER_CHANNEL, extra)
        return self.weighted(name, op, dict(fields, multiplier=int(mult[0]), shift=int(shift[0])))


def int16_flags(graph: Graph, op: Op, descriptor: str) -> int:
    """The descriptor flags that make the chip run ``op`` on int16 activations: its integer
    tensors are int16 (``OPF_INT16``); REQUANTIZE marks each side (``OPF_INT16`` the
    output, ``OPF_INT16_INPUT`` the input); int16 weights of an op with weights add
    ``OPF_WEIGHTS16`` (a16w16, only with int16 activations)."""
    data_in = [graph.tensors[n].dtype for n in op.inputs if n and not graph.tensors[n].is_constant]
    data_out = [graph.tensors[n].dtype for n in op.outputs]
    if descriptor == "REQUANTIZE":
        return ((spec_ops.OPF_INT16 if "int16" in data_out else 0)
                | (spec_ops.OPF_INT16_INPUT if "int16" in data_in else 0))
    flags = spec_ops.OPF_INT16 if "int16" in data_in + data_out else 0
    if registry.get(op.type, "weight_axis") is not None and graph.tensors[op.inputs[1]].dtype == "int16":
        if not flags:
            raise LoweringError(f"{op.describe()}: int16 weights need int16 activations")
        flags |= spec_ops.OPF_WEIGHTS16
    return flags


def _encode(e: Emitted, plan: MemoryPlan) -> tuple[bytes, list[Reloc]]:
    task_type = spec_tasks.TASK_BY_NAME[e.name]
    try:
        payload = spec_tasks.encode_task(e.name, e.flags, **e.fields)
    except (KeyError, ValueError, OverflowError) as exc:
        raise LoweringError(f"{e.name}: cannot encode descriptor: {exc}") from exc
    relocs = [plan.reloc(tensor, task_type.dtype.fields[f][1]) for f, tensor in e.addresses.items()]
    relocs += [Reloc(task_type.dtype.fields[f][1], region, offset) for f, (region, offset) in e.extra.items()]
    return payload, relocs


def _extents(plan: MemoryPlan, names: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for n in names:
        p = plan.placements[n]
        out.append((p.region, p.offset, p.offset + max(p.nbytes, 1)))
    return out


def _overlaps(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> bool:
    return any(r1 == r2 and s1 < e2 and s2 < e1 for r1, s1, e1 in a for r2, s2, e2 in b)


def lower(graph: Graph, *, metadata: dict[str, Any] | None = None) -> Loadable:
    """Compile an int8 graph (see :func:`frontend.check_int8`) into a loadable.

    A graph with no operators or no outputs, or whose operators all lower to nothing,
    is refused: its loadable would run no task and report success."""
    graph.check_runnable()
    check_int8(graph)
    graph = _copy_crossed_states(graph)
    plan = plan_memory(graph)
    _, index = plan.descriptors(graph)
    low = Lowering(graph, plan)
    tasks: list[Task] = []
    host_steps: list[HostStep] = []
    producer: dict[str, int] = {}
    touched: list[tuple[list, list]] = []  # per task: (read extents, written extents)
    # After the last op, each changed state's new value is copied into its STATE region.
    write_backs = [Op("ASSIGN_VARIABLE", [s.output], [s.input], name=f"{s.name}/assign")
                   for s in graph.states if s.output != s.input]
    for op in [*graph.ops, *write_backs]:
        if op.type == "HOST":
            host_steps.append(_host_step(op, len(tasks), index))
            continue
        emitted = registry.get(op.type, "lower")(low, op, op_params(graph, op))
        if emitted is not None:
            emitted.flags |= int16_flags(graph, op, emitted.name)
        ins = [i for i in op.inputs if i and not graph.tensors[i].is_constant]
        if emitted is None:  # aliased RESHAPE: the output is ready when the input is
            if ins[0] in producer:
                producer[op.outputs[0]] = producer[ins[0]]
            continue
        payload, relocs = _encode(emitted, plan)
        reads, writes = _extents(plan, ins), _extents(plan, op.outputs)
        deps = {producer[i] for i in ins if i in producer}
        deps |= {j for j, (r, w) in enumerate(touched) if _overlaps(writes, r) or _overlaps(writes, w)}
        tasks.append(Task(op.name, op.type, spec_tasks.TASK_BY_NAME[emitted.name].opcode, payload,
                          deps=sorted(deps), tensors=[index[n] for n in op.inputs + op.outputs if n],
                          macs=graph.op_macs(op),
                          bytes_moved=sum(graph.tensors[n].nbytes for n in op.inputs + op.outputs if n),
                          relocs=relocs))
        touched.append((reads, writes))
        for o in op.outputs:
            producer[o] = len(tasks) - 1
    if not tasks and not host_steps:
        raise LoweringError(f"{graph.name}: no operator lowers to a chip task (all are aliased reshapes)")
    meta = dict(graph.metadata, **(metadata or {}))
    meta.update(arena_bytes=plan.arena_size, weights_bytes=plan.weights_size, macs=graph.macs())
    return plan.to_loadable(graph, tasks, {k: v for k, v in meta.items() if _jsonable(v)}, host_steps)


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


def compile_model(model: str | os.PathLike | bytes | Graph,
                  dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None, *,
                  kind: str | None = None, progress: Progress | None = None,
                  ops: Collection[str] | None = None, strict: bool = False,
                  **quantize_options: Any) -> Loadable:
    """Model file (path/bytes) or graph -> int8 graph (quantized if needed) -> loadable.

    The compiler's one entry point: ``progress`` hears every stage (:mod:`libnpu.compiler.progress`).
    Operators the chip cannot run (:mod:`libnpu.compiler.placement`; ``ops`` an allow-list of
    the names the chip may run) become host steps; ``strict`` refuses that
    (:class:`~libnpu.compiler.placement.FallbackRefusedError` listing them all)."""
    from .frontend import to_int8_graph
    dataset = list(dataset) if dataset is not None else None
    if isinstance(model, Graph):
        graph = model
    elif ops is None:
        try:    # the whole model on the chip, as it always compiled; placement only when that fails
            graph = to_int8_graph(model, dataset, kind=kind, progress=progress, **quantize_options)
            with stage(progress, "lower"):
                return lower(graph)
        except IRError as refused:
            with stage(progress, "import"):
                graph = _placed_graph(model, kind, ops, strict, refused)
    else:
        with stage(progress, "import"):
            graph = _placed_graph(model, kind, ops, strict, None)
    graph = to_int8_graph(graph, dataset, progress=progress, **quantize_options)
    with stage(progress, "lower"):
        return lower(graph)


def _placed_graph(model: str | os.PathLike | bytes, kind: str | None, ops: Collection[str] | None,
                  strict: bool, refused: IRError | None) -> Graph:
    """The model imported with the operators placed on the CPU as HOST ops. ``refused``:
    why the whole model did not compile for the chip, raised again when no operator
    needs the CPU (the cause is elsewhere)."""
    from .frontend import load_model
    from .placement import import_with_fallback, plan_placement
    plan = plan_placement(model, ops=ops, kind=kind)
    if strict:
        plan.refuse_fallback()
    if not plan.cpu:
        if refused is not None:
            raise refused
        return load_model(plan.data, kind=plan.kind, name=plan.name)
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    graph.metadata["placement"] = [[p.index, p.op, p.device, p.reason] for p in plan.placements]
    return graph
