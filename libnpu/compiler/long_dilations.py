"""Convolutions whose dilated filter is longer than the chip takes, folded into ones it takes.

The chip's convolutions refuse a dilated filter longer than ``npu_hw.ops.MAX_FILTER_EXTENT``
(4,096 taps along an axis: it bounds the padded buffers). Temporal convolution networks
double the dilation layer after layer: a 1-D U-Net over 30 s of EEG at 250 Hz has
kernel 3 at dilations 2,048 and 4,096 (extents 4,097 and 8,193), and the chip failed the
job with EINVAL. A filter of K taps ``d`` apart along one axis is exactly a filter of K
adjacent taps over the rows of that axis folded by ``d``: position ``r * d + c`` of a
length padded to ``R * d`` is row ``r``, column ``c`` of an ``[R, d]`` view (times the
other axis's width), and tap ``j`` of output ``t`` reads row ``r + j``, the same column.
So ``PAD`` (the convolution's own padding plus the rounding up to ``R * d``), a
``RESHAPE`` (no copy), the convolution with dilation 1 and a K x 1 filter, a ``RESHAPE``
back and a ``STRIDED_SLICE`` of the valid length: the same sums, every task one the chip
takes. Done at import (:func:`fold_long_dilations`), so placement judges the ops the
compiler will lower. A filter long on one axis and wider than 1 on the other, or strided
along the long axis, is left as it is: the convolution's lowering refuses it
(:func:`check_filter_extent`), and it runs on the CPU with that reason.
"""
from __future__ import annotations

from npu_hw.ops import MAX_FILTER_EXTENT

from .ir import Graph, IRError, Op, Tensor

__all__ = ["fold_long_dilations", "check_filter_extent"]

_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def check_filter_extent(kernel: tuple[int, int], dilation: tuple[int, int],
                        pads: tuple[int, int, int, int]) -> None:
    """Raise :class:`IRError` unless the chip takes a convolution window: each dilated
    filter extent at most ``MAX_FILTER_EXTENT``, each padding shorter than the extent
    (the chip's rule, ``firmware_sim.kernels.conv``)."""
    top, bottom, left, right = pads
    for axis, k, d, before, after in (("height", kernel[0], dilation[0], top, bottom),
                                      ("width", kernel[1], dilation[1], left, right)):
        extent = (k - 1) * d + 1
        if extent > MAX_FILTER_EXTENT:
            raise IRError(f"dilated filter {axis} {extent} exceeds the chip's {MAX_FILTER_EXTENT}")
        if max(before, after) >= extent:
            raise IRError(f"{axis} padding ({before}, {after}) not shorter than the dilated filter ({extent})")


def _tensor(g: Graph, like: Tensor, name: str, shape: tuple[int, ...]) -> str:
    """A new activation of ``shape`` on ``like``'s dtype and grid."""
    return g.add_tensor(Tensor(g.unique_name(name), shape, like.dtype, like.quant)).name


def _fold(g: Graph, op: Op) -> list[Op] | None:
    """The ops replacing ``op`` (it among them, changed), or None when it stays as it is."""
    x, w = g.tensors[op.inputs[0]], g.tensors[op.inputs[1]]
    out = g.tensors[op.outputs[0]]
    kh, kw = w.shape[1:3]
    (sh, sw), (dh, dw) = op.attrs["stride"], op.attrs["dilation"]
    top, bottom, left, right = op.attrs["pads"]
    n, h, width, c = x.shape
    if w.data is None or len(x.shape) != 4:
        return None
    if (kw - 1) * dw + 1 > MAX_FILTER_EXTENT and kh == 1 and sw == 1 and top == bottom == 0 and (sh == 1 or h == 1):
        axis, k, d, before, after, batch, inner = 2, kw, dw, left, right, n * h, 1
        weights = w.data.reshape(w.shape[0], kw, 1, w.shape[3])
    elif (kh - 1) * dh + 1 > MAX_FILTER_EXTENT and kw == 1 and sh == 1 and left == right == 0 \
            and (sw == 1 or width == 1):
        axis, k, d, before, after, batch, inner = 1, kh, dh, top, bottom, n, width
        weights = w.data
    else:
        return None
    length = x.shape[axis] + before + after
    rows = -(-length // d)
    kept = out.shape[axis]                       # the output's length: (rows - k + 1) * d or less
    if rows - k + 1 < 1 or kept > (rows - k + 1) * d:
        return None
    ops: list[Op] = []
    src = x.name
    if before or after or rows * d != length:
        paddings = [(0, 0)] * 4
        paddings[axis] = (before, after + rows * d - length)
        padded = list(x.shape)
        padded[axis] = rows * d
        src = _tensor(g, x, f"{op.name}__padded", tuple(padded))
        ops.append(Op("PAD", [x.name], [src], dict(paddings=tuple(paddings))))
    folded = (batch, rows, d * inner, c)
    ops.append(Op("RESHAPE", [src], [_tensor(g, x, f"{op.name}__rows", folded)], dict(new_shape=folded)))
    y_shape = (batch, rows - k + 1, d * inner, out.shape[3])
    y = _tensor(g, out, f"{op.name}__rows_out", y_shape)
    op.inputs = [ops[-1].outputs[0], g.add_const(f"{w.name}__rows", weights, w.quant).name, *op.inputs[2:]]
    op.outputs = [y]
    op.attrs = dict(op.attrs, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0))
    ops.append(op)
    unfolded = list(out.shape)
    unfolded[axis] = (rows - k + 1) * d
    if unfolded[axis] == kept:
        ops.append(Op("RESHAPE", [y], [out.name], dict(new_shape=out.shape)))
        return ops
    whole = _tensor(g, out, f"{op.name}__unfolded", tuple(unfolded))
    ops.append(Op("RESHAPE", [y], [whole], dict(new_shape=tuple(unfolded))))
    end = list(out.shape)
    ops.append(Op("STRIDED_SLICE", [whole], [out.name],
                  dict(begin=(0, 0, 0, 0), end=tuple(end), strides=(1, 1, 1, 1), new_shape=out.shape)))
    return ops


def fold_long_dilations(g: Graph, ops: list[Op]) -> int:
    """Fold each convolution among ``ops`` (just added to ``g``) whose dilated filter is
    longer than the chip takes into the ops above, in ``g.ops`` in place; returns how many."""
    folded = 0
    for op in [o for o in ops if o.type in _CONVS]:
        replacement = _fold(g, op)
        if replacement is None:
            continue
        at = g.ops.index(op)
        g.ops[at:at + 1] = replacement
        folded += 1
    return folded

