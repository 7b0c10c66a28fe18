"""Grids tensors share, and the requantization that keeps an operator's fixed output grid
from being imposed on the tensors joined to it.

Data-moving operators (``same_scale``: CONCATENATION, PACK, MAXIMUM, RESHAPE, pools...)
give their inputs and output one quantization, as LiteRT's int8 kernels and the chip's
(which copy bytes) require; so do a state and the new value written back to it. Some
operators' int8 outputs have a grid the spec fixes (``fixed_output``: LOGISTIC and
SOFTMAX on [0, 1) by 1/256, TANH on [-1, 1) by 1/128, L2_NORMALIZATION, LOG_SOFTMAX).

The rule (:func:`requantize_joins`): where tensors that share one grid with a fixed-grid
output reach beyond that grid by more than one of its steps, or two different fixed grids
meet, the fixed-grid output keeps its grid and a QUANTIZE (int8 -> int8: the chip's
REQUANTIZE, LiteRT's requantizing QUANTIZE) takes it to the join's own grid, chosen from
the calibrated ranges of everything joined, as any other tensor's. Without it a YOLO
head's ``Concat(boxes, Sigmoid(scores))`` clipped every box coordinate to [0, 1) (boxes
at cosine 0.805), and ``Concat(Sigmoid(x), Tanh(y))`` could not be quantized at all.
Where the joined tensors fit the fixed grid, it stays the join's grid (no extra op).
int8 models are imported with the grids they were shipped with: this is for float models.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from . import registry
from .ir import Graph, Op, QuantParams, Tensor
from .scales import SHARED_GRIDS

__all__ = ["fixed_grids", "shared_grid_groups", "requantize_joins"]

Range = tuple[float, float]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def fixed_grids(g: Graph) -> dict[str, QuantParams]:
    """Tensor name -> the int8 grid its producer's type fixes (outputs of ``fixed_output`` ops)."""
    fixed: dict[str, QuantParams] = {}
    for op in g.ops:
        grid = registry.get(op.type, "fixed_output")
        if grid is not None:
            fixed[op.outputs[0]] = QuantParams(np.float32(grid[0]), grid[1])
    return fixed


def shared_grid_groups(g: Graph, names: Iterable[str]) -> list[list[str]]:
    """``names`` in groups that must share one quantization: joined by a data-moving
    (``same_scale``) op, a state's input and the value written back to it, or listed
    together in the graph's ``metadata[SHARED_GRIDS]``."""
    uf = _UnionFind()
    for op in g.ops:
        if registry.get(op.type, "same_scale"):
            for i in op.inputs:
                if i:
                    uf.union(i, op.outputs[0])
    for state in g.states:             # the value written back is read by the next call: one scale
        uf.union(state.input, state.output)
    for group in g.metadata.get(SHARED_GRIDS, ()):   # e.g. an unrolled recurrence's steps (scales.SHARED_GRIDS)
        for n in group[1:]:
            uf.union(group[0], n)
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(uf.find(name), []).append(name)
    return list(groups.values())


def _grid_range(qp: QuantParams) -> Range:
    s, z = float(qp.scale[0]), int(qp.zero_point[0])
    return (-128 - z) * s, (127 - z) * s


def _needs_own_grid(members: list[str], fixed: Mapping[str, QuantParams], ranges: Mapping[str, Range]) -> bool:
    """Whether a group holding fixed-grid tensors must not take their grid: two different
    fixed grids, or other members beyond the fixed grid by more than one step."""
    pins = [fixed[m] for m in members if m in fixed]
    if any(p != pins[0] for p in pins):
        return True
    lo, hi = _grid_range(pins[0])
    step = float(pins[0].scale[0])
    return any(ranges[m][0] < lo - step or ranges[m][1] > hi + step
               for m in members if m not in fixed and m in ranges)


def _value_range(t: Tensor, ranges: Mapping[str, Range]) -> Range | None:
    """A float tensor's calibrated range (a constant's: its values); None for others
    (integer indices, tensors calibration did not see)."""
    if t.dtype not in ("float32", "float16"):
        return None
    if t.is_constant:
        d = np.asarray(t.data, np.float32)
        return (float(d.min()), float(d.max())) if d.size else (0.0, 0.0)
    return ranges.get(t.name)


def requantize_joins(graph: Graph, ranges: Mapping[str, Range]) -> tuple[Graph, dict[str, Range]]:
    """``graph`` (float) with a QUANTIZE after each fixed-grid output whose join needs a
    grid of its own (see the module's rule), read by the data-moving ops and the state that
    joined it, and ``ranges`` with the new tensors' ranges: their calibrated values' and
    the whole fixed grid (values calibration never produced, such as a high score, still
    pass the join). ``graph`` itself is returned when no join needs it."""
    fixed = fixed_grids(graph)
    if not fixed:
        return graph, dict(ranges)
    known = {n: r for n, t in graph.tensors.items() if (r := _value_range(t, ranges)) is not None}
    split = [m for members in shared_grid_groups(graph, known.keys() | fixed.keys())
             if any(m in fixed for m in members) and _needs_own_grid(members, fixed, known)
             for m in members if m in fixed]
    new_ranges = dict(ranges)
    if not split:
        return graph, new_ranges
    g = graph.copy()
    producer = {o: op for op in g.ops for o in op.outputs}
    for name in split:
        joined = g.unique_name(f"{name}_joined")
        t = g.tensors[name]
        g.add_tensor(Tensor(joined, t.shape, t.dtype))
        for op in g.ops:
            if registry.get(op.type, "same_scale"):
                op.inputs = [joined if i == name else i for i in op.inputs]
        for state in g.states:
            state.output = joined if state.output == name else state.output
        requantize = Op("QUANTIZE", [name], [joined], name=joined)
        g.ops.insert(g.ops.index(producer[name]) + 1, requantize)
        lo, hi = _grid_range(fixed[name])
        calibrated = ranges.get(name, (lo, hi))
        new_ranges[joined] = (min(lo, calibrated[0]), max(hi, calibrated[1]))
    return g, new_ranges
