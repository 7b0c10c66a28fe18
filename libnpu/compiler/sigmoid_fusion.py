"""Recognise the logistic sigmoid however an exporter spells it, by what the ops compute.

Keras layers and hand-written activations spell a sigmoid out: ``1 / (1 + exp(-x))``,
``exp(x) / (1 + exp(x))``, often with a slope (BirdNET's location models: a "flat
sigmoid" ``1 / (1 + exp(-0.5 * clip(x, -15, 15)))`` over thousands of species scores).
Quantized op by op, that is ruinous: ``exp`` spans ``e^7.5`` (~1800) where the sigmoid
needs its values near 1 told apart: on an int8 grid of step ~7 every score over ~0.22
comes out 1 and the next one down is 0.12, and the EXP and DIV have no int16 kernel to
widen it. Such models scored 0.14 at int8 and 0.83 with int16 activations on 32 layers
(their held-out samples, the escalation capped), 0.88-0.91 on unseen inputs on the chip;
with the one LOGISTIC (its fixed ``[0, 1)`` grid, int16 where escalation widens it) 0.999.
As one op it is also judged as a probability on its logits (:mod:`libnpu.compiler.held_out`).

:func:`fuse_sigmoid_spellings` starts at each EXP, walks back to the run-time tensors
``x`` it is computed from through elementwise ops with scalar constants (``REGION_OPS``),
evaluates every tensor computed from ``x`` alone on ``PROBE``
(:mod:`libnpu.compiler.probe_regions`) and replaces the ops computing a tensor equal to
``sigmoid(alpha * x + beta)`` with a LOGISTIC (after a MUL by ``alpha`` and an ADD of
``beta`` where they are not 1 and 0), farthest root first (the fewest ops), provided none
of their other results is read elsewhere. It is LOGISTIC's float-graph rewrite
(``ops/activation.py``), run after activations are fused.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ir import Graph, Op, Tensor
from .probe_regions import find_roots, ops_between, probe_region, replace_ops, scalar

__all__ = ["REGION_OPS", "PROBE", "TOLERANCE", "fuse_sigmoid_spellings", "sigmoid_form"]

#: The elementwise ops a region may hold, with their float64 functions.
REGION_OPS: dict[str, Callable[..., np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide, "NEG": np.negative, "EXP": np.exp,
}
#: The ``x`` values each candidate is evaluated on: both tails and the bend around 0.
PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), [-0.013, 0.007, 0.37, -2.9, 3.3]])
#: Largest difference from the sigmoid (probabilities: absolute; float32 constants are ~1e-7 off).
TOLERANCE = 1e-5
#: Where a value is trusted for the fit of its logit (the tails' logits are rounding noise).
_FIT_RANGE = (1e-4, 1 - 1e-4)


def _in_region(g: Graph, op: Op) -> bool:
    return (op.type in REGION_OPS and len(op.outputs) == 1 and op.attrs.get("activation", "NONE") == "NONE"
            and g.tensors[op.outputs[0]].dtype == "float32" and g.tensors[op.outputs[0]].quant is None
            and all(i and (not g.tensors[i].is_constant or scalar(g, i) is not None) for i in op.inputs))


def _evaluate(op: Op, args: list[np.ndarray]) -> np.ndarray:
    return REGION_OPS[op.type](*args)


def sigmoid_form(value: np.ndarray, probe: np.ndarray = PROBE) -> tuple[float, float] | None:
    """``(alpha, beta)`` when ``value`` is ``sigmoid(alpha * probe + beta)`` (``alpha`` not
    0) within ``TOLERANCE``, else None."""
    if value.shape != probe.shape or not np.all(np.isfinite(value)):
        return None
    inside = (value > _FIT_RANGE[0]) & (value < _FIT_RANGE[1])
    if inside.sum() < 4:
        return None
    alpha, beta = np.polyfit(probe[inside], np.log(value[inside] / (1.0 - value[inside])), 1)
    if abs(alpha) < 1e-6:
        return None
    with np.errstate(over="ignore"):
        want = 1.0 / (1.0 + np.exp(-(alpha * probe + beta)))
    return (float(alpha), float(beta)) if np.all(np.abs(value - want) <= TOLERANCE) else None


def _scale_and_shift(g: Graph, logistic: Op, alpha: float, beta: float) -> None:
    """A MUL by ``alpha`` and an ADD of ``beta`` (where they are not 1 and 0) put before
    ``logistic``, which then reads their result: ``sigmoid(alpha * x + beta)``."""
    at, shape = g.ops.index(logistic), g.tensors[logistic.inputs[0]].shape
    for kind, value, identity in (("MUL", alpha, 1.0), ("ADD", beta, 0.0)):
        if abs(value - identity) <= 1e-6:
            continue
        base = f"{logistic.name}/sigmoid_{kind.lower()}"
        const = g.add_const(f"{base}_value", np.array(value, np.float32))
        out = g.add_tensor(Tensor(g.unique_name(base), shape, "float32"))
        g.ops.insert(at, Op(kind, [logistic.inputs[0], const.name], [out.name], {"activation": "NONE"}, base))
        logistic.inputs[0] = out.name
        at += 1


def fuse_sigmoid_spellings(g: Graph) -> int:
    """Replace every elementwise spelling of a sigmoid (module docstring) with a LOGISTIC;
    returns how many were fused."""
    fused = 0
    producers, consumers = g.producers(), g.consumers()
    removed: set[int] = set()
    for anchor in [op for op in g.ops if op.type == "EXP"]:
        if id(anchor) in removed or not _in_region(g, anchor):
            continue
        for x in reversed(find_roots(g, anchor, producers, _in_region, depth=6)):     # farthest first
            values = probe_region(g, x, consumers, PROBE, _in_region, _evaluate, limit=12) or {}
            hit = next(((y, form) for y, value in reversed(values.items())
                        if y != x and (form := sigmoid_form(value)) is not None), None)
            if hit is None:
                continue
            y, (alpha, beta) = hit
            chain = ops_between(g, x, y, producers)
            if anchor not in chain or g.tensors[y].shape != g.tensors[x].shape:
                continue
            logistic = Op("LOGISTIC", [x], [y], {}, producers[y].name)
            if not replace_ops(g, chain, logistic, consumers):
                continue       # an intermediate value is read elsewhere: the ops stay
            _scale_and_shift(g, logistic, alpha, beta)
            removed.update(id(op) for op in chain)
            producers, consumers = g.producers(), g.consumers()
            fused += 1
            break
    return fused
