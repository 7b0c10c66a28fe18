"""Regions of elementwise ops computed from one tensor, evaluated on probe values: what the
fusions of activations an exporter writes out as elementwise ops share (``*_fusion.py``).

A fusion names the ops a region may hold (``in_region``) and how each computes in float64
(``evaluate``); :func:`find_roots` walks back from an anchor op to the run-time tensors
``x`` it is computed from, :func:`probe_region` evaluates every tensor computed from ``x``
alone on the probe, :func:`ops_between` lists the ops computing ``y`` from ``x`` and
:func:`replace_ops` puts one op in their place when none of their other results is read
elsewhere.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ir import Graph, Op

__all__ = ["scalar", "find_roots", "probe_region", "ops_between", "replace_ops"]

InRegion = Callable[[Graph, Op], bool]
Evaluate = Callable[[Op, list[np.ndarray]], np.ndarray]


def scalar(g: Graph, name: str) -> float | None:
    """The value of a one-element constant, else None."""
    t = g.tensors.get(name)
    if t is None or t.data is None or t.data.size != 1:
        return None
    return float(t.data.reshape(-1)[0])


def find_roots(g: Graph, anchor: Op, producers: dict[str, Op], in_region: InRegion, depth: int) -> list[str]:
    """The run-time tensors reached backwards from ``anchor`` through region ops, nearest first."""
    seen: list[str] = []
    frontier = [i for i in anchor.inputs if not g.tensors[i].is_constant]
    for _ in range(depth):
        nxt: list[str] = []
        for name in frontier:
            if name in seen:
                continue
            seen.append(name)
            op = producers.get(name)
            if op is not None and in_region(g, op):
                nxt.extend(i for i in op.inputs if not g.tensors[i].is_constant)
        frontier = nxt
    return seen


def probe_region(g: Graph, x: str, consumers: dict[str, list[Op]], probe: np.ndarray, in_region: InRegion,
                 evaluate: Evaluate, limit: int) -> dict[str, np.ndarray] | None:
    """Every tensor computed from ``x`` alone by region ops, with its values when ``x`` is
    ``probe`` (``x`` included, in the order computed); None when more than ``limit`` ops."""
    values: dict[str, np.ndarray] = {x: probe.copy()}
    pending = [x]
    count = 0
    while pending:
        name = pending.pop(0)
        for op in consumers.get(name, []):
            out = op.outputs[0] if op.outputs else ""
            if out in values or not in_region(g, op) \
                    or not all(g.tensors[i].is_constant or i in values for i in op.inputs):
                continue
            args = [values[i] if i in values else np.float64(scalar(g, i)) for i in op.inputs]
            with np.errstate(all="ignore"):
                values[out] = np.asarray(evaluate(op, args), np.float64)
            count += 1
            if count > limit:
                return None
            pending.append(out)
    return values


def ops_between(g: Graph, x: str, y: str, producers: dict[str, Op]) -> list[Op]:
    """The ops between ``x`` and ``y`` (``y``'s producers back to ``x``)."""
    chain: list[Op] = []
    pending = [y]
    while pending:
        op = producers[pending.pop()]
        if op in chain:
            continue
        chain.append(op)
        pending.extend(i for i in op.inputs if i != x and not g.tensors[i].is_constant)
    return chain


def replace_ops(g: Graph, chain: list[Op], fused: Op, consumers: dict[str, list[Op]]) -> bool:
    """``chain`` (computing ``fused``'s output) replaced by ``fused`` where the first of
    them was; False (nothing changed) when another of their results is read elsewhere."""
    inner = {op.outputs[0] for op in chain} - set(fused.outputs)
    if inner & g.results() or any(c not in chain for t in inner for c in consumers.get(t, [])):
        return False
    at = min(g.ops.index(op) for op in chain)
    for op in chain:
        g.ops.remove(op)
    g.ops.insert(at, fused)
    return True
