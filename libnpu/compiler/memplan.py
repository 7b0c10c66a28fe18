"""Device memory planning: where every tensor of a graph lives.

Regions (indices fixed so the lowering can rely on them):
    0            WEIGHTS: every constant, packed at ``alignment``; the lowering may append
                 more constants (per-channel multipliers, LUTs) with :meth:`MemoryPlan.add_constant`
    1            ACTIVATIONS: one arena; tensors whose lifetimes do not overlap share bytes
    2..          one INPUT region per graph input, then one OUTPUT region per graph output,
                 so the runtime can bind user buffers to them (NVDLA's bindInput/OutputTensor),
                 then one STATE region per state (``Graph.states``), its initial value as
                 contents; a state's new value lives until the end of the job, when the
                 lowering's write-back copies it into the STATE region

The arena is packed greedily, largest tensor first, at the lowest offset that does not
collide with an already placed tensor whose lifetime (producer op .. last consumer op)
overlaps — the strategy of TFLite's arena planner. A RESHAPE's output may alias its input
(same bytes, no data movement), so the lowering can drop the op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..loadable import DataReloc, HostStep, Loadable, MemoryRegion, RegionKind, Reloc, Task, TensorDesc, TensorFlags
from .ir import Graph, IRError

__all__ = ["Placement", "MemoryPlan", "plan_memory", "WEIGHTS", "ACTIVATIONS"]

WEIGHTS, ACTIVATIONS = 0, 1


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Placement:
    region: int
    offset: int
    nbytes: int


@dataclass
class MemoryPlan:
    """Regions plus the placement of each tensor (by name)."""
    regions: list[MemoryRegion]
    placements: dict[str, Placement]
    lifetimes: dict[str, tuple[int, int]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # RESHAPE output -> tensor it shares
    alignment: int = 64
    data_relocs: list[DataReloc] = field(default_factory=list)

    @property
    def arena_size(self) -> int:
        return self.regions[ACTIVATIONS].size

    @property
    def weights_size(self) -> int:
        return self.regions[WEIGHTS].size

    def add_constant(self, name: str, data: np.ndarray, alignment: int | None = None) -> Placement:
        """Append constant bytes (e.g. lowering-made multiplier arrays) to the weights region."""
        if name in self.placements:
            raise IRError(f"memory plan: {name!r} is already placed")
        reg = self.regions[WEIGHTS]
        # One growing buffer: copying the whole region per constant took 12 s of a compile
        # whose 14.8 MB of weights met 1200 per-channel arrays (to_loadable freezes it).
        if not isinstance(reg.content, bytearray):
            reg.content = bytearray(reg.content or b"")
        content = reg.content
        off = _align(len(content), alignment or self.alignment)
        raw = np.ascontiguousarray(data).tobytes()
        content += b"\0" * (off - len(content)) + raw
        reg.size = _align(len(content), self.alignment)
        p = Placement(WEIGHTS, off, len(raw))
        self.placements[name] = p
        return p

    def add_address_table(self, name: str, tensors: list[str]) -> Placement:
        """A u64 table in the weights region holding the device addresses of ``tensors``
        (patched at load time through data relocations)."""
        p = self.add_constant(name, np.zeros(len(tensors), np.uint64), alignment=8)
        for i, t in enumerate(tensors):
            target = self.placements[t]
            self.data_relocs.append(DataReloc(WEIGHTS, p.offset + 8 * i, target.region, target.offset))
        return p

    def reloc(self, tensor: str, field_offset: int) -> Reloc:
        """Relocation writing ``tensor``'s device address at ``field_offset`` of a payload."""
        p = self.placements[tensor]
        return Reloc(field_offset, p.region, p.offset)

    def descriptors(self, graph: Graph) -> tuple[list[TensorDesc], dict[str, int]]:
        """Tensor descriptors for every placed graph tensor, and name -> index."""
        order = list(graph.inputs) + [n for n in graph.outputs if n not in graph.inputs]
        order += [n for n in graph.tensors if n not in order]
        descs, index = [], {}
        states = {s.input for s in graph.states}
        for name in order:
            t = graph.tensors[name]
            p = self.placements[name]
            flags = TensorFlags.NONE
            if name in graph.inputs:
                flags |= TensorFlags.INPUT
            if name in graph.outputs:
                flags |= TensorFlags.OUTPUT
            if t.is_constant:
                flags |= TensorFlags.CONSTANT
            if name in states:
                flags |= TensorFlags.STATE
            q = t.quant
            index[name] = len(descs)
            descs.append(TensorDesc(name, t.shape, t.dtype, p.region, p.offset,
                                    scale=None if q is None else q.scale,
                                    zero_point=None if q is None else q.zero_point,
                                    axis=0 if q is None else q.axis, flags=flags))
        return descs, index

    def to_loadable(self, graph: Graph, tasks: list[Task], metadata: dict[str, Any] | None = None,
                    host_steps: list[HostStep] | None = None) -> Loadable:
        """Package the plan, the graph's tensor descriptors, the lowered ``tasks`` and the
        ``host_steps`` between them."""
        descs, _ = self.descriptors(graph)
        for region in self.regions:
            if isinstance(region.content, bytearray):
                region.content = bytes(region.content)
        ld = Loadable(graph.name, descs, list(self.regions), list(tasks), dict(metadata or {}),
                      list(self.data_relocs), list(host_steps or []))
        ld.validate()
        return ld


def _lifetimes(g: Graph) -> dict[str, tuple[int, int]]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for idx, op in enumerate(g.ops):
        for o in op.outputs:
            first.setdefault(o, idx)
            last.setdefault(o, idx)
        for i in op.inputs:
            if i:
                last[i] = max(last.get(i, idx), idx)
    return {n: (first.get(n, 0), last.get(n, 0)) for n in set(first) | set(last)}


def plan_memory(graph: Graph, *, alignment: int = 64, alias_reshapes: bool = True) -> MemoryPlan:
    """Place every tensor of ``graph`` (ops must be in topological order)."""
    graph.validate()
    g = graph
    placements: dict[str, Placement] = {}

    weights = bytearray()
    stored: dict[bytes, int] = {}     # constants with the same bytes share them (read only):
    for t in g.constants():           # an unrolled recurrence's steps each name the same weights
        raw = np.ascontiguousarray(t.data).tobytes()
        off = stored.get(raw) if len(raw) >= alignment else None
        if off is None:
            off = _align(len(weights), alignment)
            weights += b"\0" * (off - len(weights)) + raw
            stored[raw] = off
        placements[t.name] = Placement(WEIGHTS, off, len(raw))
    regions = [MemoryRegion("weights", RegionKind.WEIGHTS, _align(len(weights), alignment), 4096, bytes(weights)),
               MemoryRegion("activations", RegionKind.ACTIVATIONS, 0, 4096)]
    io = set(g.inputs) | set(g.outputs)
    for kind, names in ((RegionKind.INPUT, g.inputs), (RegionKind.OUTPUT, g.outputs)):
        for n in names:
            if n in placements:
                continue  # a graph input that is also an output lives in its input region
            t = g.tensors[n]
            regions.append(MemoryRegion(f"{kind.name.lower()}:{n}", kind, _align(max(t.nbytes, 1), alignment), 4096))
            placements[n] = Placement(len(regions) - 1, 0, t.nbytes)
    for state in g.states:
        t = g.tensors[state.input]
        regions.append(MemoryRegion(f"state:{state.name}", RegionKind.STATE, _align(max(t.nbytes, 1), alignment),
                                    4096, state.initial.tobytes()))
        placements[state.input] = Placement(len(regions) - 1, 0, t.nbytes)
        io.add(state.input)

    life = _lifetimes(g)
    for state in g.states:             # read by the write-back, after the last op
        life[state.output] = (life.get(state.output, (0, 0))[0], len(g.ops))
    # RESHAPE outputs alias their input when both live in the arena.
    parent: dict[str, str] = {}

    def root(n: str) -> str:
        while n in parent:
            n = parent[n]
        return n
    if alias_reshapes:
        for op in g.ops:
            if op.type == "RESHAPE":
                src, dst = op.inputs[0], op.outputs[0]
                if src in io or dst in io or g.tensors[src].is_constant:
                    continue
                parent[dst] = root(src)
    groups: dict[str, list[str]] = {}
    for n, t in g.tensors.items():
        if t.is_constant or n in io:
            continue
        groups.setdefault(root(n), []).append(n)
    items = []
    for r, members in groups.items():
        start = min(life.get(m, (0, 0))[0] for m in members)
        end = max(life.get(m, (0, 0))[1] for m in members)
        size = max(g.tensors[m].nbytes for m in members)
        items.append((r, members, start, end, size))
    items.sort(key=lambda it: (-it[4], it[2], it[0]))

    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    arena = 0
    for _root, members, start, end, size in items:
        busy = sorted((o, o + s) for o, s, a, b in placed if a <= end and start <= b)
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, _align(hi, alignment))
        placed.append((offset, size, start, end))
        arena = max(arena, offset + size)
        for m in members:
            placements[m] = Placement(ACTIVATIONS, offset, g.tensors[m].nbytes)
    regions[ACTIVATIONS].size = _align(arena, alignment)
    aliases = {m: root(m) for m in parent}
    return MemoryPlan(regions, placements, life, aliases, alignment)
