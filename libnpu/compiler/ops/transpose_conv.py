"""TRANSPOSE_CONV (ONNX ConvTranspose, 2-D and 1-D; mediapipe's Convolution2DTransposeBias custom op).
The IR's inputs are ``x, w [Cout, KH, KW, Cin], bias|""`` like a convolution's (TFLite's operand
order, output shape first, is restored on export); ``padding`` is the (top, left) cropped from
the full result, the output size is the output tensor's."""
from __future__ import annotations

import struct

import numpy as np
import tflite

from npu_hw import ops as spec_ops

from .. import float_ref, onnx_import, qparams, tflite_export, tflite_import
from ..registry import Operator, onnx, register, tflite_options
from .conv import onnx_bias, onnx_emit_2d, onnx_weights_2d

# mediapipe's TRANSPOSE_CONV with a bias, from before the builtin took one: inputs (x, w, bias),
# custom options a raw TfLiteTransposeConvParams (int32 padding, stride_width, stride_height).
MEDIAPIPE_TRANSPOSE_CONV = "CUSTOM:Convolution2DTransposeBias"


def _crops(im, w: int, out: int, stride: tuple[int, int], code: int) -> tuple[int, ...]:
    """(top, left) cropped from the full result: TFLite's padding of the forward convolution
    from the output back to the input (``code``: the spec's PADDING_SAME / PADDING_VALID)."""
    _, oh, ow, _ = im.shape(out)
    _, kh, kw, _ = im.shape(w)
    return tuple(spec_ops.conv_geometry(size, k, s, 1, code)[1] for size, k, s in ((oh, kh, stride[0]),
                                                                                  (ow, kw, stride[1])))


def _tflite(im, ins, outs, table, where):
    if isinstance(table, bytes):        # the custom op: its options are its raw parameters
        return _tflite_mediapipe(im, ins, outs, table, where)
    o = tflite_import.options(table, tflite.TransposeConvOptions)
    stride = (int(o.StrideH()), int(o.StrideW()))
    padding = _crops(im, ins[1], outs[0], stride, o.Padding() + 1)   # tflite SAME=0, VALID=1
    act = tflite_import.activation(o.FusedActivationFunction(), where)
    bias = ins[3] if len(ins) > 3 else -1
    return dict(stride=stride, padding=padding, activation=act), [ins[2], ins[1], bias]


def _tflite_mediapipe(im, ins, outs, custom: bytes, where):
    """Convolution2DTransposeBias: mediapipe's kernel is TFLite's float TRANSPOSE_CONV (padding
    computed the same way, no activation) plus the bias, which is this operator exactly."""
    if len(custom) < 12 or len(ins) != 3 or min(ins) < 0 or len(outs) != 1:
        raise tflite_import.UnsupportedOpError(f"{where}: expected inputs (x, w, bias) and 12 bytes of options, "
                                               f"got {len(ins)} inputs and {len(custom)} bytes")
    padding_code, stride_w, stride_h = struct.unpack_from("<3i", custom)   # TfLitePadding: SAME 1, VALID 2
    if padding_code not in (spec_ops.PADDING_SAME, spec_ops.PADDING_VALID) or min(stride_w, stride_h) < 1:
        raise tflite_import.UnsupportedOpError(f"{where}: padding {padding_code} / stride "
                                               f"{stride_h}x{stride_w} not supported")
    stride = (stride_h, stride_w)
    padding = _crops(im, ins[1], outs[0], stride, padding_code)
    return dict(stride=stride, padding=padding, activation="NONE"), [ins[0], ins[1], ins[2]]


def transpose_conv2d(x, w, b, *, stride, padding, activation, out_hw) -> np.ndarray:
    """Transposed convolution of NHWC ``x`` by OHWI ``w`` in float."""
    n, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    (sh, sw), (pt, pl), (oh, ow) = stride, padding, out_hw
    taps = np.tensordot(x, w, axes=([3], [3]))            # (N, H, W, Cout, KH, KW)
    acc = np.zeros((n, max((h - 1) * sh + kh, pt + oh), max((wd - 1) * sw + kw, pl + ow), cout), np.float32)
    for ky in range(kh):
        for kx in range(kw):
            acc[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (wd - 1) * sw + 1:sw] += taps[..., ky, kx]
    y = acc[:, pt:pt + oh, pl:pl + ow]
    if b is not None:
        y = y + b
    return float_ref.activation(y.astype(np.float32), activation)


def _params(g, op) -> dict:
    p = qparams.weighted(g, op)
    del p["scale"]
    return dict(p, stride=tuple(op.attrs["stride"]), padding=tuple(op.attrs["padding"]))


def _lower(low, op, p):
    x, w, out = low.shape(op.inputs[0]), low.shape(op.inputs[1]), low.shape(op.outputs[0])
    fields = dict(in_shape=x, out_shape=out, filter_hw=w[1:3], stride=p["stride"], dilation=(1, 1),
                  padding=p["padding"], cin_per_group=x[3], input_zp=p["input_zp"], output_zp=p["output_zp"],
                  act_min=p["act_min"], act_max=p["act_max"])
    return low.convolution("TRANSPOSE_CONV", op, fields, p)


def _export(wr, op, outs) -> None:
    a = op.attrs
    out = wr.src.tensors[op.outputs[0]].shape
    w = wr.src.tensors[op.inputs[1]].shape
    x = wr.src.tensors[op.inputs[0]].shape
    # the padding whose forward convolution of the output gives both the crop and the input's
    # size (both crop 0 when the SAME and VALID sizes differ: LiteRT checks the size)
    fits = [enum for code, enum in ((spec_ops.PADDING_SAME, 0), (spec_ops.PADDING_VALID, 1))
            if all(spec_ops.conv_geometry(size, k, s, 1, code) == (n, pad)
                   for size, k, s, pad, n in zip(out[1:3], w[1:3], a["stride"], a["padding"], x[1:3]))]
    if not fits:
        raise tflite_export.TFLiteExportError(f"{op.describe()}: padding {a['padding']} is neither SAME nor VALID")
    ins = [wr.const_i32(op.outputs[0], out), wr.name(op.inputs[1]), wr.name(op.inputs[0]), wr.bias(op, w[0])]
    wr.add(op.type, ins, outs, {"TransposeConvOptions": dict(
        Padding=fits[0], StrideH=a["stride"][0], StrideW=a["stride"][1],
        FusedActivationFunction=tflite_export.ACT[a["activation"]])})


register(Operator(
    "TRANSPOSE_CONV", ("stride", "padding", "activation"), tflite=_tflite, tflite_aliases=(MEDIAPIPE_TRANSPOSE_CONV,),
    float_ref=lambda op, ins, out: transpose_conv2d(ins[0], ins[1], ins[2], out_hw=out.shape[1:3], **op.attrs),
    weight_axis=0, fused_activation=True, params=_params, lower=_lower, export=_export, tflite_version=3,
    int16=True, int8_weights_only=True, q15_requant=True,
    macs=lambda g, op: g.tensors[op.inputs[0]].size * int(np.prod(g.tensors[op.inputs[1]].shape[:3]))))


def _dense_weights(w: np.ndarray, group: int, dilations: tuple[int, int], where: str) -> np.ndarray:
    """ONNX ConvTranspose weights ``[Cin, Cout/group, KH, KW]`` as the equivalent ungrouped,
    undilated ones: zeros between the groups' blocks and between dilated taps (exact)."""
    cin, cout_g, kh, kw = w.shape
    if group < 1 or cin % group or min(dilations) < 1:
        raise onnx_import.ONNXImportError(f"{where}: group {group} / dilations {dilations} do not fit {w.shape}")
    if group > 1:
        cin_g = cin // group
        dense = np.zeros((cin, cout_g * group, kh, kw), np.float32)
        for g in range(group):
            dense[g * cin_g:(g + 1) * cin_g, g * cout_g:(g + 1) * cout_g] = w[g * cin_g:(g + 1) * cin_g]
        w = dense
    dh, dw = dilations
    if (dh, dw) != (1, 1):
        spread = np.zeros(w.shape[:2] + ((kh - 1) * dh + 1, (kw - 1) * dw + 1), np.float32)
        spread[:, :, ::dh, ::dw] = w
        w = spread
    return w


@onnx("ConvTranspose")
def _onnx_conv_transpose(im, node, attrs, where):
    w, attrs = onnx_weights_2d(im.const(node.input[1], where).astype(np.float32), attrs)
    if w.ndim != 4:
        raise onnx_import.ONNXImportError(f"{where}: only 1-D and 2-D ConvTranspose is supported")
    w = _dense_weights(w, int(attrs.get("group", 1)), tuple(int(d) for d in attrs.get("dilations", (1, 1))), where)
    cin, cout, kh, kw = w.shape
    strides = tuple(int(s) for s in attrs.get("strides", (1, 1)))
    h, wd = (1, *im.onnx_shape(node.input[0], where)[2:])[-2:]      # 1-D: height 1
    oh, ow = (1, *im.onnx_shape(node.output[0], where)[2:])[-2:]
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", "") and "output_shape" not in attrs:
        pads = list(attrs.get("pads", (0, 0, 0, 0)))
        padding = (int(pads[0]), int(pads[1]))
    else:  # the total crop follows from the output size; only SAME_UPPER crops less at the start
        totals = [(size - 1) * s + k - out for size, s, k, out in ((h, strides[0], kh, oh), (wd, strides[1], kw, ow))]
        padding = tuple(t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in totals)
    if min(padding) < 0:
        raise onnx_import.ONNXImportError(f"{where}: output larger than the full result is not supported")
    wt = im.g.add_const(node.input[1], np.ascontiguousarray(w.transpose(1, 2, 3, 0))).name  # [Cout, KH, KW, Cin]
    onnx_emit_2d(im, node, "TRANSPOSE_CONV", [wt, onnx_bias(im, node, where)],
                 dict(stride=strides, padding=padding, activation="NONE"), where)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(TRANSPOSE_CONV='TransposeConvOptions')
