"""Variance as some exporters write it, ``E[x^2] - E[x]^2``, rewritten as ``E[(x - E[x])^2]``.

Flax's LayerNorm (and so every jax2tf export: magika's two LayerNorms) computes the
variance as the mean of the squares less the square of the mean. In float the two forms
agree; quantized they do not: both terms are about ``mean^2``, far larger than their
difference when the values sit away from zero, and their int8 grids are steps of that
size. On magika's second LayerNorm (values in [9, 75], variance 24..33 against means
squared of 300..380) the difference came out 74 off (its cumulative SQNR -7.8 dB, every
output after it lost). The centred form squares ``x - E[x]``, whose grid is fitted to
the spread itself.

:func:`center_variances` finds ``SUB(a, b)`` with ``a`` the mean of ``MUL(x, x)`` and
``b`` the square of the mean of ``x``, both means the same reduction (MEAN, or SUM then
MUL by ``1/n``, ``n`` the values reduced), and replaces it with the same reduction of
``(x - E[x])^2`` (RESHAPEs keep the reduced axes for the subtraction when the mean
dropped them, and give the variance the shape it had; the optimizer drops the ones that
change nothing). The old terms go if nothing else reads them.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, Op, Tensor

__all__ = ["center_variances"]


def _scalar(g: Graph, name: str) -> float | None:
    t = g.tensors[name]
    if t.data is None or t.data.size != 1:
        return None
    return float(t.data.reshape(-1)[0])


def _mean(g: Graph, name: str, producers: dict[str, Op]) -> tuple[str, Op, Op | None] | None:
    """``(source, reduction, scaling)`` when ``name`` is a mean over some axes of ``source``:
    MEAN (scaling None), or SUM scaled by ``1/n`` by a MUL; a RESHAPE after it (keeping
    the reduced axes as 1s) is seen through."""
    op = producers.get(name)
    while op is not None and op.type == "RESHAPE":
        op = producers.get(op.inputs[0])
    if op is None or op.attrs.get("activation", "NONE") != "NONE":
        return None
    if op.type == "MEAN":
        return op.inputs[0], op, None
    if op.type != "MUL" or len(op.inputs) != 2:
        return None
    for k in (0, 1):
        c, other = _scalar(g, op.inputs[k]), producers.get(op.inputs[1 - k])
        if c is None or other is None or other.type != "SUM":
            continue
        shape = g.tensors[other.inputs[0]].shape
        n = int(np.prod([shape[a] for a in other.attrs["axes"]], dtype=np.int64))
        if abs(c * n - 1.0) <= 1e-5:
            return other.inputs[0], other, op
    return None


def _square_of(op: Op | None) -> str | None:
    """``x`` when ``op`` is ``MUL(x, x)``."""
    if op is None or op.type != "MUL" or len(op.inputs) != 2 or op.inputs[0] != op.inputs[1] \
            or op.attrs.get("activation", "NONE") != "NONE":
        return None
    return op.inputs[0]


def _same_reduction(a: Op, b: Op) -> bool:
    return a.type == b.type and tuple(a.attrs.get("axes", ())) == tuple(b.attrs.get("axes", ())) \
        and bool(a.attrs.get("keep_dims")) == bool(b.attrs.get("keep_dims"))


def center_variances(g: Graph) -> int:
    """Rewrite every ``E[x^2] - E[x]^2`` as ``E[(x - E[x])^2]`` (module docstring); returns how many."""
    done = 0
    producers = None       # built again only after a rewrite: once per SUB was quadratic (unrolled RNNs)
    for sub in [op for op in g.ops if op.type == "SUB" and op.attrs.get("activation", "NONE") == "NONE"]:
        if producers is None:
            producers = g.producers()
        squares = _mean(g, sub.inputs[0], producers)
        x = _square_of(producers.get(squares[0])) if squares else None
        mean_name = _square_of(producers.get(sub.inputs[1]))
        mean = _mean(g, mean_name, producers) if mean_name else None
        if squares is None or x is None or mean_name is None or mean is None or mean[0] != x \
                or not _same_reduction(squares[1], mean[1]):
            continue
        if (squares[2] is None) != (mean[2] is None):
            continue
        reduce_op, scale_op = squares[1], squares[2]
        xt = g.tensors[x]
        at = g.ops.index(sub)
        new: list[Op] = []
        prefix = sub.outputs[0]

        def tensor(base: str, shape: tuple[int, ...], prefix: str = prefix) -> str:
            return g.add_tensor(Tensor(g.unique_name(f"{prefix}__{base}"), tuple(shape), "float32")).name

        centre = mean_name
        kept = tuple(1 if i in {a % len(xt.shape) for a in reduce_op.attrs.get("axes", ())} else d
                     for i, d in enumerate(xt.shape))
        if g.tensors[mean_name].shape != kept:
            centre = tensor("mean_kept", kept)
            new.append(Op("RESHAPE", [mean_name], [centre], {"new_shape": kept}))
        diff = tensor("centred", xt.shape)
        new.append(Op("SUB", [x, centre], [diff], {"activation": "NONE"}))
        squared = tensor("centred_squared", xt.shape)
        new.append(Op("MUL", [diff, diff], [squared], {"activation": "NONE"}))
        result = tensor("reduced", g.tensors[reduce_op.outputs[0]].shape)
        new.append(Op(reduce_op.type, [squared], [result], dict(reduce_op.attrs)))
        if scale_op is not None:
            factor = next(i for i in scale_op.inputs if g.tensors[i].is_constant)
            scaled = tensor("scaled", g.tensors[result].shape)
            new.append(Op("MUL", [result, factor], [scaled], {"activation": "NONE"}))
            result = scaled
        shape = g.tensors[sub.outputs[0]].shape
        new.append(Op("RESHAPE", [result], list(sub.outputs), {"new_shape": shape}, sub.name))
        g.ops[at:at + 1] = new
        producers = None
        done += 1
    if done:
        g.prune()
    return done
