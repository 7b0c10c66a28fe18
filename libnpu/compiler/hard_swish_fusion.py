"""Recognise hard-swish and hard-sigmoid however an exporter spells them, by what the ops compute.

paddle2onnx writes hardswish as ``x * clip(x + 3, 0, 6) / 6``, PyTorch and Keras exports as
``x * relu6(x + 3) * (1/6)`` or ``x * HardSigmoid(x)``, hard-sigmoid as ``relu6(x + 3) / 6``
or ``clip(0.2 * x + 0.5, 0, 1)``. Op by op that is three or four elementwise tasks on the
chip (int16 ones when escalation widened them); as one HARD_SWISH it is one task (int8:
``HardSwishPrepare``'s formula, int16: ours), and a hard-sigmoid one HARD_SIGMOID table.

:func:`fuse_hard_swish_spellings` starts at each clamp (``RELU6``, ``CLIP``, ``RELU``,
``RELU_N1_TO_1``, ``HARD_SIGMOID`` or an op with such a fused activation), walks back
to the run-time tensor ``x`` it is computed from (``REGION_OPS``, scalar constants
only), evaluates every tensor computed from ``x`` alone on ``PROBE`` and replaces the ops
computing a tensor equal to ``hard_swish(x)`` (else ``clip(alpha * x + beta, 0, 1)``)
with one op, provided none of their other results is read elsewhere. It is HARD_SWISH's
float-graph rewrite (``ops/unary.py``), run after activations are fused.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ir import Graph, Op

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


def _scalar(g: Graph, name: str) -> float | None:
    t = g.tensors.get(name)
    if t is None or t.data is None or t.data.size != 1:
        return None
    return float(t.data.reshape(-1)[0])


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
            and all(i and (not g.tensors[i].is_constant or _scalar(g, i) is not None) for i in op.inputs))


def _roots(g: Graph, anchor: Op, producers: dict[str, Op], depth: int = 5) -> list[str]:
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
            if op is not None and _in_region(g, op):
                nxt.extend(i for i in op.inputs if not g.tensors[i].is_constant)
        frontier = nxt
    return seen


def _region(g: Graph, x: str, consumers: dict[str, list[Op]], limit: int = 8) -> dict[str, np.ndarray]:
    """Every tensor computed from ``x`` alone by at most ``limit`` region ops, with its
    values on ``PROBE`` (``x`` included)."""
    values: dict[str, np.ndarray] = {x: PROBE.copy()}
    pending = [x]
    while pending and len(values) <= limit:
        name = pending.pop(0)
        for op in consumers.get(name, []):
            out = op.outputs[0] if op.outputs else ""
            if out in values or not _in_region(g, op) \
                    or not all(g.tensors[i].is_constant or i in values for i in op.inputs):
                continue
            args = [values[i] if i in values else np.float64(_scalar(g, i)) for i in op.inputs]
            with np.errstate(all="ignore"):
                values[out] = _evaluate(op, args)
            pending.append(out)
    return values


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


def _computing(g: Graph, x: str, y: str, producers: dict[str, Op]) -> list[Op]:
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


def _candidates(g: Graph, roots: list[str], consumers: dict[str, list[Op]]) -> list[tuple[str, str, str, dict]]:
    """``(x, y, op, attrs)`` for each tensor ``y`` to compute as one op from root ``x``:
    hard-swishes first (nearest root first), then hard-sigmoids (farthest root first, the
    longest chain), each root's last one first."""
    swishes: list[tuple[str, str, str, dict]] = []
    sigmoids: list[tuple[str, str, str, dict]] = []
    for x in roots:
        mine = []
        for y, value in reversed(_region(g, x, consumers).items()):
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
        for x, y, op_type, attrs in _candidates(g, _roots(g, anchor, producers), consumers):
            chain = _computing(g, x, y, producers)
            inner = {op.outputs[0] for op in chain} - {y}
            if anchor not in chain or (len(chain) == 1 and chain[0].type == op_type) \
                    or inner & g.results() or any(c not in chain for t in inner for c in consumers.get(t, [])):
                continue      # not this clamp's, already one op, or an intermediate value is read elsewhere
            at = min(g.ops.index(op) for op in chain)
            for op in chain:
                g.ops.remove(op)
                removed.add(id(op))
            g.ops.insert(at, Op(op_type, [x], [y], attrs, producers[y].name))
            producers, consumers = g.producers(), g.consumers()
            fused += 1
            break
    return fused
