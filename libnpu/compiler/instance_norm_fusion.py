"""Recognise instance normalization spelled out op by op, and make it one INSTANCE_NORM.

TensorFlow's ``nn.moments`` + ``nn.batch_normalization`` (Magenta's conditional instance
norm, as tf2onnx or the TFLite converter write it) and PyTorch-style spellings compute
each channel's mean and variance over H, W and then ``(x - mean) * rsqrt(var + eps) *
gamma + beta``, gamma and beta per channel, constants or run-time values (a style
vector's dense layers). Op by op on the chip, the variance goes through a tensor of
squares whose one grid spans every channel: a channel 100x narrower than the widest has
10^4x smaller squares, which fall under one step even at int16, so its variance reads 0
and its normalized values are noise times ``1 / sqrt(eps)`` (a synthetic style network:
cosine 0.92 at int16). INSTANCE_NORM takes each plane's statistics from exact integer
sums (``firmware_sim.kernels.instance_norm``), whatever the channel's size.

:func:`fuse_instance_norms` starts at each MEAN over the spatial axes (1, 2) of a 4-D
NHWC tensor ``x`` and follows the ops the spellings use after the optimizer's rewrites
(SQRT + DIV and SQRT + 1 / v are RSQRT then, ``E[x^2] - E[x]^2`` is centred):

- the variance: ``MEAN(MUL(d, d))`` or ``MEAN(SQUARED_DIFFERENCE(x, mean))``, ``d = x - mean``,
  then ``ADD(var, eps)`` (a constant scalar) and RSQRT (times constant ones, if any);
- centred: ``MUL(d, r)``, then optionally ``MUL(., gamma)`` and ``ADD(., beta)``;
- TensorFlow's: ``inv = MUL(r, gamma)`` (or ``r``), ``ADD(MUL(x, inv), SUB(beta, MUL(mean, inv)))``.

gamma and beta are tensors of one value per channel (shape 1, 1, 1, C or C) that ``x``
does not feed; a missing one becomes a constant 1 or 0. The ops are replaced only when
no value between them is read elsewhere or is a model output; the last op's fused
activation moves onto the INSTANCE_NORM.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, Op
from .probe_regions import scalar

__all__ = ["fuse_instance_norms", "SPATIAL_AXES"]

#: The axes an instance norm's MEANs reduce, in the IR's NHWC layout.
SPATIAL_AXES = (1, 2)


class _Walk:
    """The readers and producers of a graph's tensors, and the ops a match has taken."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.readers: dict[str, list[Op]] = {}
        self.producer: dict[str, Op] = {}
        for op in g.ops:
            for i in op.inputs:
                self.readers.setdefault(i, []).append(op)
            for o in op.outputs:
                self.producer[o] = op
        self.taken: list[Op] = []

    def only_reader(self, name: str, op_type: str) -> Op | None:
        """The one op reading ``name``, when it is of ``op_type`` with no fused activation."""
        found = self.readers.get(name, [])
        if len(found) != 1 or found[0].type != op_type or found[0].attrs.get("activation", "NONE") != "NONE":
            return None
        return found[0]

    def other(self, op: Op, name: str) -> str | None:
        """The other input of a two-input ``op`` reading ``name``."""
        if len(op.inputs) != 2 or name not in op.inputs:
            return None
        return op.inputs[1] if op.inputs[0] == name else op.inputs[0]

    def take(self, *ops: Op | None) -> bool:
        if any(op is None for op in ops):
            return False
        self.taken.extend(op for op in ops if op is not None and op not in self.taken)
        return True


def _same_mean(op: Op | None, x_rank: int) -> bool:
    return (op is not None and op.type == "MEAN" and bool(op.attrs.get("keep_dims"))
            and tuple(sorted(a % x_rank for a in op.attrs["axes"])) == SPATIAL_AXES)


def _per_channel(w: _Walk, name: str | None, channels: int, x: str) -> bool:
    """``name`` holds one value per channel (or one) and is not computed from ``x``."""
    if name is None or name == x:
        return False
    t = w.g.tensors[name]
    if int(np.prod(t.shape)) not in (1, channels) or (len(t.shape) and t.shape[-1] not in (1, channels)):
        return False
    todo, seen = [name], set()
    while todo:                                        # nothing of x upstream (a few ops: dense layers)
        n = todo.pop()
        if n == x:
            return False
        op = w.producer.get(n)
        if op is not None and n not in seen:
            seen.add(n)
            todo.extend(op.inputs)
    return True


def _times_one(w: _Walk, r: str) -> str:
    """``r`` past MULs by a constant 1 (the optimizer's ``1 / sqrt(v)``)."""
    while True:
        readers = w.readers.get(r, [])
        if len(readers) != 1 or readers[0].type != "MUL" or readers[0].attrs.get("activation", "NONE") != "NONE":
            return r
        one = w.other(readers[0], r)
        if one is None or scalar(w.g, one) != 1.0:
            return r
        w.take(readers[0])
        r = readers[0].outputs[0]


def _match(g: Graph, w: _Walk, mean_op: Op) -> tuple[list[Op], str, str | None, str | None, float, Op] | None:
    """(ops, x, gamma, beta, epsilon, last op) of the instance norm whose first MEAN is ``mean_op``."""
    x, mean = mean_op.inputs[0], mean_op.outputs[0]
    shape = g.tensors[x].shape
    if len(shape) != 4 or g.tensors[x].is_constant or not _same_mean(mean_op, 4):
        return None
    channels = shape[-1]
    w.take(mean_op)
    d = None
    for op in w.readers.get(mean, []):
        if op.type == "SUB" and op.inputs == [x, mean] and op.attrs.get("activation", "NONE") == "NONE":
            d = op
    square = next((op for op in w.readers.get(mean, []) if op.type == "SQUARED_DIFFERENCE"
                   and set(op.inputs) == {x, mean}), None)
    if square is None and d is not None:
        square = next((op for op in w.readers.get(d.outputs[0], []) if op.type == "MUL"
                       and op.inputs == [d.outputs[0]] * 2 and op.attrs.get("activation", "NONE") == "NONE"), None)
        w.take(d)
    if square is None:
        return None
    var = w.only_reader(square.outputs[0], "MEAN")
    if not _same_mean(var, 4) or not w.take(square, var):
        return None
    shifted = w.only_reader(var.outputs[0], "ADD")
    eps = scalar(g, w.other(shifted, var.outputs[0]) or "") if shifted is not None else None
    rsqrt = w.only_reader(shifted.outputs[0], "RSQRT") if shifted is not None else None
    if eps is None or eps < 0 or rsqrt is None or not w.take(shifted, rsqrt):
        return None
    r = _times_one(w, rsqrt.outputs[0])
    readers = w.readers.get(r, [])
    gamma = beta = None
    if d is not None and len(readers) == 1 and readers[0].type == "MUL" and w.other(readers[0], r) == d.outputs[0]:
        last = readers[0]                                   # centred: (x - mean) * r [* gamma] [+ beta]
        w.take(last)
        for op_type in ("MUL", "ADD"):
            after = w.readers.get(last.outputs[0], [])
            if last.attrs.get("activation", "NONE") != "NONE" or len(after) != 1 or after[0].type != op_type \
                    or not _per_channel(w, w.other(after[0], last.outputs[0]), channels, x):
                continue
            if op_type == "MUL":
                gamma = w.other(after[0], last.outputs[0])
            else:
                beta = w.other(after[0], last.outputs[0])
            last = after[0]
            w.take(last)
        return w.taken, x, gamma, beta, eps, last
    inv = r                                                 # TensorFlow's: x * inv + (beta - mean * inv)
    if len(readers) == 1 and readers[0].type == "MUL" and _per_channel(w, w.other(readers[0], r), channels, x) \
            and readers[0].attrs.get("activation", "NONE") == "NONE":
        gamma, inv = w.other(readers[0], r), readers[0].outputs[0]
        w.take(readers[0])
    uses = w.readers.get(inv, [])
    mi = next((op for op in uses if op.type == "MUL" and w.other(op, inv) == mean), None)
    xs = next((op for op in uses if op.type == "MUL" and w.other(op, inv) == x), None)
    if len(uses) != 2 or mi is None or xs is None or any(op.attrs.get("activation", "NONE") != "NONE"
                                                         for op in (mi, xs)):
        return None
    sub = w.only_reader(mi.outputs[0], "SUB")
    if sub is None or sub.inputs[1] != mi.outputs[0] or not _per_channel(w, sub.inputs[0], channels, x):
        return None
    beta = sub.inputs[0]
    last = next((op for op in w.readers.get(xs.outputs[0], []) if op.type == "ADD"
                 and set(op.inputs) == {xs.outputs[0], sub.outputs[0]}), None)
    if last is None or not w.take(mi, xs, sub, last):
        return None
    return w.taken, x, gamma, beta, eps, last


def fuse_instance_norms(g: Graph) -> int:
    """Replace each instance norm spelled out in the float graph ``g`` by one INSTANCE_NORM
    (module docstring); returns how many."""
    made = 0
    for mean_op in [op for op in g.ops if op.type == "MEAN"]:
        if mean_op not in g.ops:
            continue
        w = _Walk(g)
        found = _match(g, w, mean_op)
        if found is None:
            continue
        ops, x, gamma, beta, eps, last = found
        out = last.outputs[0]
        inner = {o for op in ops for o in op.outputs} - {out}
        if inner & g.results() or any(r not in ops for t in inner for r in w.readers.get(t, [])):
            continue
        channels = g.tensors[x].shape[-1]
        if gamma is None:
            gamma = g.add_const(g.unique_name(f"{out}__gamma"), np.ones((channels,), np.float32)).name
        if beta is None:
            beta = g.add_const(g.unique_name(f"{out}__beta"), np.zeros((channels,), np.float32)).name
        fused = Op("INSTANCE_NORM", [x, gamma, beta], [out],
                   {"epsilon": float(eps), "activation": last.attrs.get("activation", "NONE")}, name=last.name)
        at = g.ops.index(last)
        g.ops[at] = fused
        for op in ops:
            if op is not last:
                g.ops.remove(op)
        for t in inner:
            g.tensors.pop(t, None)
        made += 1
    return made
