"""Recognise hard-swish and hard-sigmoid however an exporter spells them, by what the ops compute.

paddle2onnx writes hardswish as ``x * clip(x + 3, 0, 6) / 6``, PyTorch and Keras exports as
``x * relu6(x + 3) * (1/6)`` or ``x * HardSigmoid(x)``, hard-sigmoid as ``relu6(x + 3) / 6``
or ``clip(0.2 * x + 0.5, 0, 1)``. Op by op that is three or four elementwise tasks on the
chip (int16 ones when escalation widened them); as one HARD_SWISH it is one task (int8:
``HardSwishPrepare``'s formula, int16: ours), and a hard-sigmoid one HARD_SIGMOID table.

:func:`fuse_hard_swish_spellings` starts at each clamp (``RELU6``, ``CLIP``, ``RELU``,
``RELU_N1_TO_1``, ``HARD_SIGMOID`` or an op with such a fused activation), walks back
to the run-time tensor ``x`` it is computed from (``REGION_OPS``, scalar constants
only), evaluates every tensor computed from ``x`` alone on ``PROBE``
(:mod:`libnpu.compiler.probe_regions`) and replaces the ops
computing a tensor equal to ``hard_swish(x)`` (else ``clip(alpha * x + beta, 0, 1)``)
with one op, provided none of their other results is read elsewhere. It is HARD_SWISH's
float-graph rewrite (``ops/unary.py``), run after activations are fused.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ir import Graph, Op
from .probe_regions import find_roots, ops_between, probe_region, replace_ops, scalar

__all__ = ["REGION_OPS", "PROBE", "TOLERANCE", "fuse_hard_swish_spellings", "hard_swish_reference"]


def _clip(lo: float, hi: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.clip(x, lo, hi)


#: The ops a region may hold, with their float64 functions (CLIP's bounds are its attrs).
REGION_OPS: dict[str, Callable[..., np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide,
    "RELU": _clip(0.0, np.inf), "RELU6": _clip(0.0, 6.0), "RELU_N1_TO_1": _clip(-1.0, 1.0),
}
#: The ops whose result is clamped: where a search starts.
CLAMPS = ("RELU", "RELU6", "RELU_N1_TO_1", "CLIP", "HARD_SIGMOID")
#: The ``x`` values each candidate is evaluated on: both flat tails, both bends, odd points.
PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), [-3.3, -2.9, -0.01, 0.003, 0.7, 2.9, 3.1, 5.5]])
#: Largest difference allowed, relative to ``1 + |x|`` (float32 constants such as 1/6).
TOLERANCE = 1e-5


def hard_swish_reference(x: np.ndarray) -> np.ndarray:
    """``x * relu6(x + 3) / 6`` in float64."""
    x = np.asarray(x, np.float64)
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


_HARD_SWISH = hard_swish_reference(PROBE)
_ALLOWED = TOLERANCE * (1 + np.abs(PROBE))


def _evaluate(op: Op, args: list[np.ndarray]) -> np.ndarray:
    """``op`` in float64 on ``args``, its fused activation included."""
    if op.type == "CLIP":
        value = np.clip(args[0], op.attrs["min"], op.attrs["max"])
    elif op.type == "HARD_SIGMOID":
        value = np.clip(op.attrs["alpha"] * args[0] + op.attrs["beta"], 0.0, 1.0)
    else:
        value = REGION_OPS[op.type](*args)
    act = op.attrs.get("activation", "NONE")
    return np.asarray(value if act == "NONE" else REGION_OPS[act](value), np.float64)


def _in_region(g: Graph, op: Op) -> bool:
    return ((op.type in REGION_OPS or op.type in ("CLIP", "HARD_SIGMOID")) and len(op.outputs) == 1
            and all(i and (not g.tensors[i].is_constant or scalar(g, i) is not None) for i in op.inputs))


def _hard_sigmoid_form(value: np.ndarray) -> tuple[float, float] | None:
    """``(alpha, beta)`` when ``value`` is ``clip(alpha * PROBE + beta, 0, 1)`` with a
    rising slope between the flat tails, else None."""
    if not np.all(np.isfinite(value)):
        return None
    inside = (value > 1e-3) & (value < 1 - 1e-3)
    if inside.sum() < 4:
        return None
    alpha, beta = np.polyfit(PROBE[inside], value[inside], 1)
    if alpha <= 0 or np.any(np.abs(value - np.clip(alpha * PROBE + beta, 0, 1)) > _ALLOWED):
        return None
    return float(alpha), float(beta)


def _candidates(g: Graph, roots: list[str], consumers: dict[str, list[Op]]) -> list[tuple[str, str, str, dict]]:
    """``(x, y, op, attrs)`` for each tensor ``y`` to compute as one op from root ``x``:
    hard-swishes first (nearest root first), then hard-sigmoids (farthest root first, the
    longest chain), each root's last one first."""
    swishes: list[tuple[str, str, str, dict]] = []
    sigmoids: list[tuple[str, str, str, dict]] = []
    for x in roots:
        mine = []
        values = probe_region(g, x, consumers, PROBE, _in_region, _evaluate, limit=12) or {}
        for y, value in reversed(values.items()):
            if y == x:
                continue
            if np.all(np.abs(value - _HARD_SWISH) <= _ALLOWED):
                swishes.append((x, y, "HARD_SWISH", {}))
            elif (form := _hard_sigmoid_form(value)) is not None:
                mine.append((x, y, "HARD_SIGMOID", dict(alpha=form[0], beta=form[1])))
        sigmoids = mine + sigmoids
    return swishes + sigmoids


def fuse_hard_swish_spellings(g: Graph) -> int:
    """Replace every elementwise spelling of hard-swish / hard-sigmoid (module docstring)
    with one HARD_SWISH / HARD_SIGMOID; returns how many were fused."""
    fused = 0
    producers, consumers = g.producers(), g.consumers()
    removed: set[int] = set()
    for anchor in [op for op in g.ops if op.type in CLAMPS or op.attrs.get("activation", "NONE") != "NONE"]:
        if id(anchor) in removed or not _in_region(g, anchor):
            continue
        for x, y, op_type, attrs in _candidates(g, find_roots(g, anchor, producers, _in_region, 5), consumers):
            chain = ops_between(g, x, y, producers)
            if anchor not in chain or (len(chain) == 1 and chain[0].type == op_type) \
                    or not replace_ops(g, chain, Op(op_type, [x], [y], attrs, producers[y].name), consumers):
                continue      # not this clamp's, already one op, or an intermediate value is read elsewhere
            removed.update(id(op) for op in chain)
            producers, consumers = g.producers(), g.consumers()
            fused += 1
            break
    return fused
