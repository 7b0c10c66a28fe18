"""Small chip islands between host calls: kept on the CPU, where they cost less than a device trip.

A model with CPU operators runs as jobs between host calls (:mod:`libnpu.partitions`).
A chip partition fed only by host calls and read only by host calls costs a whole
device trip (the job's transport, the host waking up; ~9-27 us for a NOP job on a quiet
machine, ~160 us for a model job's transport, ~21 ms per job under load:
docs/hardware.md) for work the host does in microseconds: openwakeword's mel front end
ran five elementwise ops (0 multiply-adds) on the chip between two host calls. Real NPU
stacks weigh this too: TFLite delegates' minimum partition size
(``min_nodes_per_partition``), ONNX Runtime execution providers' partitioning rules.

:func:`keep_small_islands_on_cpu` moves such a partition of a float graph (before
quantization) to the CPU in float (:func:`libnpu.compiler.cpu_float.float_on_cpu`) when
its modeled work is under ``limit`` (default ``MIN_NPU_PARTITION``; 0 turns the rule off).
Only a partition with host calls on both sides moves (every input from a host call,
every output read by host calls only, none a model output or a state), so a model with
no CPU operator (an int8 model as shipped) never changes and a model is never moved to
the CPU whole by this rule (when every chip op is in such islands, the largest stays:
a model allow-listed to one small chip layer keeps it).
"""
from __future__ import annotations

from collections.abc import Sequence

from .cpu_float import float_on_cpu, movable
from .ir import Graph, IRError, Op, SourceOp

__all__ = ["MIN_NPU_PARTITION", "SMALL_ISLANDS", "TOO_SMALL", "island_work", "small_islands", "small_island_sources",
           "keep_small_islands_on_cpu"]

#: Modeled work (multiply-adds; an op without any counts one per output value) under
#: which a chip partition between host calls runs on the CPU: ~100 us of one host core
#: at about one float operation a nanosecond, the fixed cost of a model job's trip on a
#: quiet machine (docs/hardware.md); under load a trip costs far more.
MIN_NPU_PARTITION = 100_000

#: The loadable's metadata key listing the islands moved (one line each).
SMALL_ISLANDS = "small_islands"

#: How the reason of such an island begins (``npu compile``'s placement output).
TOO_SMALL = "too small to pay for a device trip"


def island_work(graph: Graph, ops: Sequence[Op]) -> int:
    """The modeled work of ``ops``: multiply-adds, or one per output value for an op with none."""
    return sum(graph.op_macs(op) or sum(graph.tensors[o].size for o in op.outputs if o) for op in ops)


def small_islands(graph: Graph, limit: int = MIN_NPU_PARTITION) -> list[tuple[list[Op], int]]:
    """The chip partitions of ``graph`` (ops connected through tensors, HOST ops aside) that
    sit between host calls and whose work (:func:`island_work`) is under ``limit``, each with
    that work, in graph order."""
    if limit <= 0 or not any(op.type == "HOST" for op in graph.ops):
        return []
    producer = {o: op for op in graph.ops for o in op.outputs}
    readers: dict[str, list[Op]] = {}
    for op in graph.ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    chip = [op for op in graph.ops if op.type != "HOST"]
    component: dict[int, int] = {}
    for start in chip:            # connected components of chip ops, by a walk both ways
        if id(start) in component:
            continue
        component[id(start)] = id(start)
        pending = [start]
        while pending:
            op = pending.pop()
            near = [producer[i] for i in op.inputs if i in producer] + \
                [r for o in op.outputs for r in readers.get(o, [])]
            for other in near:
                if other.type != "HOST" and id(other) not in component:
                    component[id(other)] = id(start)
                    pending.append(other)
    groups: dict[int, list[Op]] = {}
    for op in chip:
        groups.setdefault(component[id(op)], []).append(op)
    states = {n for s in graph.states for n in (s.input, s.output)}
    found = []
    for ops in groups.values():
        made = {o for op in ops for o in op.outputs}
        ins = {i for op in ops for i in op.inputs if i and i not in made and not graph.tensors[i].is_constant}
        outs = {o for o in made if any(r.type == "HOST" for r in readers.get(o, []))}
        fed_by_host = bool(ins) and all(i in producer and producer[i].type == "HOST" for i in ins)
        read_by_host = bool(outs) and not made & (set(graph.outputs) | states)
        if not (fed_by_host and read_by_host and all(movable(graph, op) for op in ops)):
            continue
        work = island_work(graph, ops)
        if work < limit:
            found.append((ops, work))
    moved = {id(op) for ops, _ in found for op in ops}
    if found and all(id(op) in moved for op in chip):     # never the whole model: the largest stays
        found.remove(max(found, key=lambda f: f[1]))
    return found


def small_island_sources(graph: Graph, sources: Sequence[SourceOp], limit: int = MIN_NPU_PARTITION) -> dict[int, str]:
    """Source operator index -> reason, for the source operators whose IR ops make the
    :func:`small_islands` of ``graph`` (as imported with its CPU operators as HOST ops):
    placed on the CPU too, they join their neighbours' host call. An island part of whose
    source operators made IR ops elsewhere stays."""
    found: dict[int, str] = {}
    for ops, work in small_islands(graph, limit):
        ids = {id(op) for op in ops}
        making = [s for s in sources if any(id(op) in ids for op in s.ir_ops)]
        if all(id(op) in ids for s in making for op in s.ir_ops):
            found.update({s.index: _reason(work) for s in making})
    return found


def _reason(work: int) -> str:
    return f"{TOO_SMALL}: {work} MACs between CPU partitions"


def keep_small_islands_on_cpu(graph: Graph, limit: int = MIN_NPU_PARTITION) -> tuple[Graph, list[str]]:
    """``graph`` with its :func:`small_islands` on the CPU in float, and one line per island
    moved (its ops, and the reason the placement output gives). An island the host cannot
    run in float (no .tflite expresses it) stays on the chip."""
    moved: list[str] = []
    for ops, work in small_islands(graph, limit):
        reason = _reason(work)
        try:
            graph = float_on_cpu(graph, [op.outputs[0] for op in ops], reason)
        except IRError:
            continue
        moved.append(f"{'+'.join(op.type for op in ops)} ({ops[0].name}) runs on the CPU: {reason}")
    if moved:       # said by npu compile, as the layer faults are
        graph.metadata[SMALL_ISLANDS] = [*graph.metadata.get(SMALL_ISLANDS, []), *moved]
    return graph, moved
