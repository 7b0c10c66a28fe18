"""Convolutions: CONV_2D and DEPTHWISE_CONV_2D (ONNX Conv, 2-D and 1-D)."""
from __future__ import annotations

import numpy as np
import tflite

from .. import channel_grids, float_ref, onnx_import, qparams, tflite_export, tflite_import
from ..ir import Op, Tensor
from ..long_dilations import check_filter_extent, fold_long_dilations
from ..registry import Operator, onnx, register, tflite_options
from ..scratch import scratch

# TFLite -----------------------------------------------------------------------------


def _window_attrs(im, ins, o, kh: int, kw: int, where) -> dict:
    """Stride, dilation, explicit pads and fused activation of a conv's options."""
    stride, dil = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
    return dict(stride=stride, dilation=dil,
                pads=tflite_import.window_pads(im, ins, o.Padding(), kh, kw, *stride, *dil),
                activation=tflite_import.activation(o.FusedActivationFunction(), where))


def _tflite_conv(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.Conv2DOptions)
    _, kh, kw, cin_g = im.shape(ins[1])
    cin = im.shape(ins[0])[3]
    if cin % cin_g:
        raise tflite_import.UnsupportedOpError(
            f"{where}: input channels {cin} not a multiple of filter depth {cin_g}")
    attrs = dict(_window_attrs(im, ins, o, kh, kw, where), groups=cin // cin_g)
    _add_folded(im, "CONV_2D", attrs, (ins + [-1])[:3], outs)


def _tflite_depthwise(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.DepthwiseConv2DOptions)
    _, kh, kw, cout = im.shape(ins[1])
    cin = im.shape(ins[0])[3]
    attrs = dict(_window_attrs(im, ins, o, kh, kw, where), depth_multiplier=cout // cin)
    _add_folded(im, "DEPTHWISE_CONV_2D", attrs, (ins + [-1])[:3], outs)


def _add_folded(im, op_type: str, attrs: dict, ins: list[int], outs: list[int]) -> None:
    """Add the convolution, a dilated filter longer than the chip takes folded
    (:mod:`libnpu.compiler.long_dilations`)."""
    op = im.graph.add_op(Op(op_type, [im.tensor(j) if j >= 0 else "" for j in ins], [im.tensor(outs[0])], attrs))
    fold_long_dilations(im.graph, [op])


# float reference ---------------------------------------------------------------------


def conv2d(x, w, b, *, stride, dilation, pads, groups, activation) -> np.ndarray:
    """Grouped 2-D convolution of NHWC ``x`` by OHWI ``w`` in float."""
    cout, kh, kw, cin_g = w.shape
    win = float_ref.windows(x, kh, kw, stride, dilation, pads)
    outs = []
    cout_g = cout // groups
    for g in range(groups):
        patches = _patch_matrix(win[:, :, :, g * cin_g:(g + 1) * cin_g])
        wg = w[g * cout_g:(g + 1) * cout_g].transpose(3, 1, 2, 0)  # (Cin_g, KH, KW, Cout_g)
        outs.append(np.tensordot(patches, wg, axes=([3, 4, 5], [0, 1, 2])))
    y = outs[0] if groups == 1 else np.concatenate(outs, axis=3)
    if b is not None:
        y = y + b
    return float_ref.activation(y.astype(np.float32, copy=False), activation)


def _patch_matrix(win: np.ndarray) -> np.ndarray:
    """The windows ``(N, OH, OW, C, KH, KW)`` as one C-ordered array, copied one tap at a time.

    The same array (and so the same GEMM, the same bits) as numpy's own copy when
    ``tensordot`` reshapes the strided view, but that copy walks the view in its order, KW
    innermost: runs of KW values, a loop per three floats; a tap at a time copies runs of C.
    In U2-Net-p's default compile that copy took 44% of the time, twice the GEMM's. The array
    is a scratch buffer (:mod:`libnpu.compiler.scratch`): ``tensordot`` reads it before the
    next call."""
    if win.shape[-2:] == (1, 1):      # a 1 x 1 kernel: the view reshapes as it is (no copy, or a plain one)
        return win
    out = scratch(win.shape, win.dtype)
    n, oh, ow, c, kh, kw = win.shape
    rows = max(1, _COPY_BLOCK // max(1, ow * c * kh * kw * win.itemsize))    # output rows a block: in cache
    for b in range(n):
        for top in range(0, oh, rows):
            for i in range(kh):
                for j in range(kw):
                    out[b, top:top + rows, :, :, i, j] = win[b, top:top + rows, :, :, i, j]
    return out


#: Bytes of the patch matrix filled a block at a time: every tap writes into the block while it is in cache.
_COPY_BLOCK = 1 << 19


def depthwise_conv2d(x, w, b, *, stride, dilation, pads, depth_multiplier, activation) -> np.ndarray:
    """Depthwise convolution of NHWC ``x`` by ``w`` [1, KH, KW, C*M] in float."""
    _, kh, kw, cout = w.shape
    if depth_multiplier > 1:
        x = np.repeat(x, depth_multiplier, axis=3)
    xp = float_ref.pad_nhwc(x, pads)
    n, hp, wp, _ = xp.shape
    sh, sw = stride
    dh, dw = dilation
    oh = (hp - (kh - 1) * dh - 1) // sh + 1
    ow = (wp - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, oh, ow, cout), np.float32)
    # float32 taps multiplied into one buffer, not a new array per tap: the same sums, and the
    # escalation simulates a depthwise network a few hundred times (benchmarks/escalation_cost.py)
    tap = np.empty_like(y) if xp.dtype == np.float32 and w.dtype == np.float32 else None
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            if tap is None:
                y += window * w[0, i, j]
            else:
                y += np.multiply(window, w[0, i, j], out=tap)
    if b is not None:
        y = y + b
    return float_ref.activation(y, activation)


# int8 parameters and lowering ---------------------------------------------------------


def _params(g, op) -> dict:
    p = qparams.weighted(g, op)
    del p["scale"]
    return dict(p, **qparams.window(g, op), dilation=tuple(op.attrs["dilation"]))


def _lower(descriptor: str, depthwise: bool):
    def lower(low, op, p):
        x, w = low.shape(op.inputs[0]), low.shape(op.inputs[1])
        out = low.shape(op.outputs[0])
        check_filter_extent(w[1:3], p["dilation"], op.attrs["pads"])
        fields = dict(in_shape=x, out_shape=out, filter_hw=w[1:3], stride=p["stride"],
                      dilation=p["dilation"], padding=p["padding"],
                      cin_per_group=1 if depthwise else w[3], input_zp=p["input_zp"],
                      output_zp=p["output_zp"], act_min=p["act_min"], act_max=p["act_max"])
        return low.convolution(descriptor, op, fields, p)
    return lower


def _export(options: str, channel_axis: int):
    def export(wr, op, outs) -> None:
        a = op.attrs
        w = wr.src.tensors[op.inputs[1]]
        pad, x = wr.padding(op, w.shape[1], w.shape[2], a["dilation"])
        fields = dict(Padding=pad, StrideH=a["stride"][0], StrideW=a["stride"][1],
                      DilationHFactor=a["dilation"][0], DilationWFactor=a["dilation"][1],
                      FusedActivationFunction=tflite_export.ACT[a["activation"]])
        if "depth_multiplier" in a:
            fields["DepthMultiplier"] = a["depth_multiplier"]
        ins = [x, wr.name(op.inputs[1]), wr.bias(op, w.shape[channel_axis])]
        wr.add(op.type, ins, outs, {options: fields})
    return export


def _macs(per_output_axes: tuple[int, ...]):
    def macs(g, op) -> int:
        w = g.tensors[op.inputs[1]].shape
        return g.tensors[op.outputs[0]].size * int(np.prod([w[a] for a in per_output_axes]))
    return macs


_WINDOW = ("stride", "dilation", "pads")
register(Operator(
    "CONV_2D", (*_WINDOW, "groups", "activation"), tflite=_tflite_conv,  # in: x, w OHWI, bias|""
    float_ref=lambda op, ins, out: conv2d(ins[0], ins[1], ins[2], **op.attrs),
    weight_axis=0, fused_activation=True, params=_params, lower=_lower("CONV_2D", False),
    export=_export("Conv2DOptions", 0), tflite_version=3, macs=_macs((1, 2, 3)), int16=True,
    q15_requant=True, channel_grid="rescale", channel_reader=channel_grids.reads_folded))
register(Operator(
    "DEPTHWISE_CONV_2D", (*_WINDOW, "depth_multiplier", "activation"),  # w [1, KH, KW, C*M]
    tflite=_tflite_depthwise,
    float_ref=lambda op, ins, out: depthwise_conv2d(ins[0], ins[1], ins[2], **op.attrs),
    weight_axis=3, fused_activation=True, params=_params, lower=_lower("DEPTHWISE_CONV_2D", True),
    export=_export("DepthwiseConv2DOptions", 3), tflite_version=3, macs=_macs((1, 2)), int16=True,
    q15_requant=True, channel_grid="rescale", channel_reader=channel_grids.reads_activation))


# ONNX ----------------------------------------------------------------------------------
# A 1-D node over [N, C, L] is the 2-D node of height 1: weights [.., .., K] become
# [.., .., 1, K], and it runs on the [N, 1, L, C] view of its input (a TRANSPOSE, then a
# RESHAPE, which the memory plan aliases), its [N, 1, L', C'] result turned back to
# [N, C', L'] the same way. No new chip operator, and the 2-D kernels' LiteRT semantics.


def onnx_attrs_2d(attrs: dict) -> dict:
    """The attributes of a 1-D windowed ONNX node (Conv, ConvTranspose, MaxPool,
    AveragePool) as those of the 2-D node of height 1."""
    a = dict(attrs)
    for key, height in (("strides", 1), ("dilations", 1), ("kernel_shape", 1), ("output_padding", 0),
                        ("output_shape", 1)):
        if key in a:
            a[key] = [height, *a[key]]
    if "pads" in a:
        begin, end = a["pads"]
        a["pads"] = [0, begin, 0, end]
    return a


def onnx_weights_2d(w: np.ndarray, attrs: dict) -> tuple[np.ndarray, dict]:
    """An ONNX Conv's / ConvTranspose's weights and attributes as the 2-D node's: unchanged
    for 2-D weights; for 1-D ones [.., .., K], [.., .., 1, K] and :func:`onnx_attrs_2d`."""
    return (w[:, :, None, :], onnx_attrs_2d(attrs)) if w.ndim == 3 else (w, attrs)


def _add(im, op_type: str, x: str, shape: tuple[int, ...], attrs: dict, name: str) -> str:
    """A new IR tensor of ``shape``, ``op_type`` of ``x``."""
    out = im.g.add_tensor(Tensor(im.g.unique_name(name), shape, "float32")).name
    im.g.add_op(Op(op_type, [x], [out], attrs))
    return out


def _swap_last(im, x: str, name: str, onnx_out: str = "", where: str = "") -> str:
    """[N, A, B] -> [N, B, A] (as ONNX tensor ``onnx_out`` if given): a TRANSPOSE, or a
    RESHAPE (aliased: no copy) when A or B is 1."""
    n, a, b = im.g.tensors[x].shape
    op_type, attrs = ("RESHAPE", dict(new_shape=(n, b, a))) if 1 in (a, b) else ("TRANSPOSE", dict(perm=(0, 2, 1)))
    if onnx_out:
        return im.emit(op_type, [x], onnx_out, False, where, attrs)
    return _add(im, op_type, x, (n, b, a), attrs, name)


def onnx_emit_2d(im, node, op_type: str, params: list[str], attrs: dict, where) -> None:
    """Emit IR ``op_type`` (a window op: NHWC activation, then ``params``) for ONNX
    ``node``: on its NHWC input for a 2-D node, on the [N, 1, L, C] view for a 1-D one."""
    shape = im.onnx_shape(node.input[0], where)
    if len(shape) == 4:
        im.emit(op_type, [im.value(node.input[0], True, where), *params], node.output[0], True, where, attrs)
        return
    if len(shape) != 3:
        raise onnx_import.ONNXImportError(f"{where}: only 1-D and 2-D windows are supported")
    (n, c, length), (_, cout, out_len) = shape, im.onnx_shape(node.output[0], where)
    out = node.output[0]
    x = _swap_last(im, im.value(node.input[0], False, where), f"{out}__nlc")
    x = _add(im, "RESHAPE", x, (n, 1, length, c), dict(new_shape=(n, 1, length, c)), f"{out}__nhwc")
    y = im.g.add_tensor(Tensor(im.g.unique_name(f"{out}__2d"), (n, 1, out_len, cout), "float32")).name
    im.g.add_op(Op(op_type, [x, *params], [y], attrs, name=out))
    y = _add(im, "RESHAPE", y, (n, out_len, cout), dict(new_shape=(n, out_len, cout)), f"{out}__nlc")
    _swap_last(im, y, out, out, where)


def onnx_bias(im, node, where) -> str:
    """IR name of an ONNX convolution's bias ("" when it has none)."""
    if len(node.input) > 2 and node.input[2]:
        return im.g.add_const(node.input[2], im.const(node.input[2], where).astype(np.float32)).name
    return ""


@onnx("Conv")
def _onnx_conv(im, node, attrs, where):
    w, attrs = onnx_weights_2d(im.const(node.input[1], where).astype(np.float32), attrs)
    if w.ndim != 4:
        raise onnx_import.ONNXImportError(f"{where}: only 1-D and 2-D convolutions are supported")
    cout, cin_g, kh, kw = w.shape
    group = int(attrs.get("group", 1))
    strides = tuple(attrs.get("strides", (1, 1)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    pads = onnx_import.pads_2d(im, node, attrs, (kh, kw), strides, dil, where)
    cin = im.onnx_shape(node.input[0], where)[1]
    bias = onnx_bias(im, node, where)
    common = dict(stride=strides, dilation=dil, pads=pads, activation="NONE")
    before = len(im.g.ops)
    _emit_onnx_conv(im, node, w, cin, bias, group, common, where)
    fold_long_dilations(im.g, im.g.ops[before:])


def _emit_onnx_conv(im, node, w, cin: int, bias: str, group: int, common: dict, where) -> None:
    cout, cin_g = w.shape[:2]
    if group > 1 and group == cin and cin_g == 1:
        wt = im.g.add_const(node.input[1], w.transpose(1, 2, 3, 0)).name  # [1, KH, KW, Cout]
        onnx_emit_2d(im, node, "DEPTHWISE_CONV_2D", [wt, bias], dict(common, depth_multiplier=cout // cin), where)
    else:
        wt = im.g.add_const(node.input[1], w.transpose(0, 2, 3, 1)).name  # OHWI
        onnx_emit_2d(im, node, "CONV_2D", [wt, bias], dict(common, groups=group), where)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(CONV_2D='Conv2DOptions', DEPTHWISE_CONV_2D='DepthwiseConv2DOptions')
