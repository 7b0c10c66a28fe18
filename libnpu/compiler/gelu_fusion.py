"""Recognise GELU however an exporter spells it, by what the ops compute rather than their order.

Exporters write GELU as a chain of elementwise ops on one tensor ``x``: PyTorch's
``x * 0.5 * (1 + erf(x / sqrt2))``, JAX's and Keras' tanh approximation
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` as ``x * x * x`` or
``Pow(x, 3)``, with the constants on either side and the products in any order. Quantized
op by op, the tanh form is ruinous: ``0.044715 * x^3`` spans ``1e4`` where ``x`` spans
``75`` (magika's GELU after its convolution), so the int8 grid of the sum loses ``x``
itself and the TANH sees steps of ``100``. As one GELU it is one 256-entry table on
``x``'s grid.

:func:`fuse_gelu` finds, around each TANH or ERF, a region of elementwise ops
(``REGION_OPS``, scalar constants only, no fused activation) whose only run-time input is
one tensor ``x``, evaluates every tensor of it on a range of ``x`` values (``PROBE``,
:mod:`libnpu.compiler.probe_regions`), and
replaces the ops that compute a tensor equal to GELU (either form, ``TOLERANCE``) with one
GELU, provided none of those ops' other results is read elsewhere.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .ir import Graph, Op
from .probe_regions import find_roots, ops_between, probe_region, replace_ops, scalar

__all__ = ["REGION_OPS", "PROBE", "TOLERANCE", "fuse_gelu", "gelu_reference"]


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to double precision (``math.erf`` elementwise: the probe is small)."""
    return np.vectorize(math.erf, otypes=[np.float64])(x)


#: The elementwise ops a GELU region may hold, with their float64 functions.
REGION_OPS: dict[str, Callable[..., np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide,
    "TANH": np.tanh, "ERF": _erf, "NEG": np.negative,
}
#: The ``x`` values each candidate is evaluated on: both tails and the bend around 0.
PROBE = np.concatenate([np.linspace(-8.0, 8.0, 161), [-0.01, 0.003, 0.5, -0.7, 2.5, -3.3]])
#: Largest difference from GELU, relative to ``1 + |x|``: the two forms differ by up to
#: ``5e-4`` (they are told apart), float32 constants by ``1e-7``.
TOLERANCE = 2e-5


def gelu_reference(x: np.ndarray, approximate: bool) -> np.ndarray:
    """GELU in float64: the tanh approximation when ``approximate``, else the erf form."""
    x = np.asarray(x, np.float64)
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _in_region(g: Graph, op: Op) -> bool:
    return (op.type in REGION_OPS and len(op.outputs) == 1 and op.attrs.get("activation", "NONE") == "NONE"
            and all(i and (not g.tensors[i].is_constant or scalar(g, i) is not None) for i in op.inputs))


def _evaluate(op: Op, args: list[np.ndarray]) -> np.ndarray:
    return REGION_OPS[op.type](*args)


_FORMS = {approximate: gelu_reference(PROBE, approximate) for approximate in (True, False)}
_ALLOWED = TOLERANCE * (1 + np.abs(PROBE))


def _gelu_form(value: np.ndarray) -> bool | None:
    """``True`` / ``False`` when ``value`` is GELU of ``PROBE`` in the tanh / erf form, else None."""
    if value.shape != PROBE.shape or not np.all(np.isfinite(value)):
        return None
    for approximate, reference in _FORMS.items():
        if np.all(np.abs(value - reference) <= _ALLOWED):
            return approximate
    return None


def fuse_gelu(g: Graph) -> int:
    """Replace every elementwise spelling of GELU (module docstring) with one GELU op;
    returns how many were fused."""
    fused = 0
    producers, consumers = g.producers(), g.consumers()
    removed: set[int] = set()
    for anchor in [op for op in g.ops if op.type in ("TANH", "ERF")]:
        if id(anchor) in removed:
            continue    # fused with an earlier anchor's region
        for x in find_roots(g, anchor, producers, _in_region, depth=8):
            values = probe_region(g, x, consumers, PROBE, _in_region, _evaluate, limit=24)
            if values is None:
                continue
            done = False
            for y, value in values.items():
                approximate = _gelu_form(value)
                if y == x or approximate is None:
                    continue
                chain = ops_between(g, x, y, producers)
                if anchor not in chain \
                        or not replace_ops(g, chain, Op("GELU", [x], [y], {"approximate": approximate},
                                                        producers[y].name), consumers):
                    continue      # not this anchor's, or an intermediate value is read elsewhere: it must stay
                removed.update(id(op) for op in chain)
                producers, consumers = g.producers(), g.consumers()
                fused += 1
                done = True
                break
            if done:
                break
    return fused
