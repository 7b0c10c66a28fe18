"""Pooling: MAX_POOL_2D, AVERAGE_POOL_2D and MEAN (ONNX MaxPool, AveragePool,
GlobalAveragePool, 2-D and 1-D; ReduceMean; GlobalMaxPool as REDUCE_MAX)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import ops as spec_ops

from .. import float_ref, onnx_import, qparams, tflite_export, tflite_import
from ..descriptors import pad_rank
from ..registry import Operator, onnx, register, tflite_options
from .conv import onnx_attrs_2d, onnx_emit_2d

# TFLite -----------------------------------------------------------------------------


def _tflite_pool(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.Pool2DOptions)
    kh, kw, sh, sw = o.FilterHeight(), o.FilterWidth(), o.StrideH(), o.StrideW()
    pads = tflite_import.window_pads(im, ins, o.Padding(), kh, kw, sh, sw, 1, 1)
    return dict(filter=(kh, kw), stride=(sh, sw), pads=pads,
                activation=tflite_import.activation(o.FusedActivationFunction(), where)), ins[:1]


def _tflite_mean(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.ReducerOptions)
    rank = len(im.shape(ins[0]))
    axes = sorted({int(a) % rank for a in im.const(ins[1], "axes", where).reshape(-1)})
    return dict(axes=tuple(axes), keep_dims=bool(o.KeepDims()) if o else False), ins[:1]


# float reference ---------------------------------------------------------------------


def pool(x, *, kind: str, filter, stride, pads, activation) -> np.ndarray:
    """Max (``kind="max"``) or average pooling of an NHWC tensor in float."""
    kh, kw = filter
    if kind == "max":
        win = float_ref.windows(x, kh, kw, stride, (1, 1), pads, value=-np.inf)
        y = win.max(axis=(4, 5))
    else:
        # TFLite averages over the valid (unpadded) elements only.
        win = float_ref.windows(x, kh, kw, stride, (1, 1), pads)
        ones = np.ones((1,) + x.shape[1:3] + (1,), np.float32)
        cnt = float_ref.windows(ones, kh, kw, stride, (1, 1), pads).sum(axis=(4, 5))
        y = win.sum(axis=(4, 5)) / cnt
    return float_ref.activation(y.astype(np.float32), activation)


# int8 parameters and lowering ---------------------------------------------------------


def _pool_params(g, op) -> dict:
    return dict(filter_hw=tuple(op.attrs["filter"]), **qparams.window(g, op), **qparams.act_range(g, op))


def _lower_pool(descriptor: str):
    def lower(low, op, p):
        fields = dict(in_shape=low.shape(op.inputs[0]), out_shape=low.shape(op.outputs[0]),
                      filter_hw=p["filter_hw"], stride=p["stride"], padding=p["padding"],
                      act_min=p["act_min"], act_max=p["act_max"])
        return low.emit(descriptor, op, fields)
    return lower


def _export_pool(w, op, outs) -> None:
    a = op.attrs
    kh, kw = a["filter"]
    pad, x = w.padding(op, kh, kw, allow_pad_op=False)
    w.add(op.type, [x], outs, {"Pool2DOptions": dict(
        Padding=pad, StrideH=a["stride"][0], StrideW=a["stride"][1], FilterHeight=kh,
        FilterWidth=kw, FusedActivationFunction=tflite_export.ACT[a["activation"]])})


def _mean_params(g, op) -> dict:
    return dict(axes=tuple(op.attrs["axes"]), keep_dims=bool(op.attrs["keep_dims"]),
                **qparams.rescale(g, op))


def _lower_mean(low, op, p):
    shape = low.shape(op.inputs[0])
    fields = dict(rank=len(shape), in_shape=pad_rank(shape), axes_mask=sum(1 << a for a in p["axes"]),
                  input_zp=p["input_zp"], output_zp=p["output_zp"], multiplier=p["multiplier"],
                  shift=p["shift"])
    return low.emit("MEAN", op, fields, spec_ops.OPF_KEEP_DIMS if p["keep_dims"] else 0)


def _export_mean(w, op, outs) -> None:
    w.with_constant(op, outs, op.attrs["axes"], {"ReducerOptions": dict(KeepDims=bool(op.attrs["keep_dims"]))})


_POOL_ATTRS = ("filter", "stride", "pads", "activation")

for _name, _kind in (("MAX_POOL_2D", "max"), ("AVERAGE_POOL_2D", "avg")):
    register(Operator(
        _name, _POOL_ATTRS, tflite=_tflite_pool,
        float_ref=lambda op, ins, out, kind=_kind: pool(ins[0], kind=kind, **op.attrs),
        same_scale=True, fused_activation=True, params=_pool_params, lower=_lower_pool(_name),
        export=_export_pool, tflite_version=2, int16=True,
        channel_grid="move" if _kind == "max" else None))

register(Operator(
    "MEAN", ("axes", "keep_dims"), tflite=_tflite_mean,
    float_ref=lambda op, ins, out: ins[0].mean(axis=op.attrs["axes"], keepdims=op.attrs["keep_dims"]),
    params=_mean_params, lower=_lower_mean, export=_export_mean, tflite_version=2, int16=True))


# ONNX ----------------------------------------------------------------------------------


def ceil_mode_pads(in_hw, out_hw, kernel, strides, pads, where) -> tuple[int, int, int, int]:
    """A ``ceil_mode`` pool's pads ``(top, bottom, left, right)`` with the trailing ones grown
    so that the floor rule gives the ceiling rule's output size: the chip's window (and
    LiteRT's) is clipped to the input, so the added rows and columns are never read, and
    the max (or the mean of the valid elements) is the one onnxruntime computes.

    onnxruntime's size: ``ceil((in + pads - k) / s) + 1``, one less when that last window
    would start in the trailing padding (PyTorch's rule); ONNX shape inference (opset 13)
    keeps that window, so a declared size that disagrees is refused (the CPU runs it)."""
    top, left = pads[0], pads[2]
    grown = []
    for size, out, k, s, begin, end in zip(in_hw, out_hw, kernel, strides, (top, left), (pads[1], pads[3])):
        want = -(-(size + begin + end - k) // s) + 1
        if (want - 1) * s >= size + begin:
            want -= 1
        if out != want:
            raise onnx_import.ONNXImportError(
                f"{where}: ceil_mode: the output's declared size {out} is not onnxruntime's {want} "
                "(its last window would start in the padding)")
        grown.append(max(end, (out - 1) * s + k - size - begin))
    return (top, grown[0], left, grown[1])


@onnx("MaxPool", "AveragePool")
def _onnx_pool(im, node, attrs, where):
    if any(d != 1 for d in attrs.get("dilations", (1, 1))):
        raise onnx_import.ONNXImportError(f"{where}: dilated pooling is not supported")
    if len(attrs["kernel_shape"]) == 1:   # over [N, C, L]: the 2-D pool of height 1
        attrs = onnx_attrs_2d(attrs)
    kernel = tuple(attrs["kernel_shape"])
    if len(kernel) != 2:
        raise onnx_import.ONNXImportError(f"{where}: only 1-D and 2-D pooling is supported")
    strides = tuple(attrs.get("strides", (1, 1)))
    pads = onnx_import.pads_2d(im, node, attrs, kernel, strides, (1, 1), where)
    if attrs.get("ceil_mode", 0):
        in_hw, out_hw = ((1, *im.onnx_shape(name, where)[2:])[-2:] for name in (node.input[0], node.output[0]))
        pads = ceil_mode_pads(in_hw, out_hw, kernel, strides, pads, where)
    average = node.op_type == "AveragePool"
    if average and attrs.get("count_include_pad", 0) and any(pads):
        raise onnx_import.ONNXImportError(f"{where}: count_include_pad with padding is not supported")
    onnx_emit_2d(im, node, "AVERAGE_POOL_2D" if average else "MAX_POOL_2D", [],
                 dict(filter=kernel, stride=strides, pads=pads, activation="NONE"), where)


@onnx("GlobalAveragePool")
def _onnx_global_average(im, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    if len(shape) != 4:  # [N, C, L] (1-D) or [N, C, D, H, W]: the mean over all axes but N and C
        im.emit("MEAN", [im.value(node.input[0], False, where)], node.output[0], False, where,
                dict(axes=tuple(range(2, len(shape))), keep_dims=True))
        return
    given = im.qdq_ranges.get(node.input[0]), im.qdq_ranges.get(node.output[0])
    if None not in given and given[0] != given[1]:
        # a QDQ model's pairs give the mean a grid of its own (onnxruntime's quantize_static
        # does: a channel's mean is far narrower than its values): MEAN requantizes to it,
        # where AVERAGE_POOL_2D (one grid in and out) would take the wider one for both
        im.emit("MEAN", [im.value(node.input[0], True, where)], node.output[0], True, where,
                dict(axes=(1, 2), keep_dims=True))
        return
    _, _, h, w = shape
    im.emit("AVERAGE_POOL_2D", [im.value(node.input[0], True, where)], node.output[0], True, where,
            dict(filter=(h, w), stride=(1, 1), pads=(0, 0, 0, 0), activation="NONE"))


@onnx("GlobalMaxPool")
def _onnx_global_max(im, node, attrs, where):
    """The largest value over all axes but N and C: REDUCE_MAX (over H and W of the NHWC
    tensor, or axes 2.. of [N, C, L], as magika pools its 1-D convolution)."""
    shape = im.onnx_shape(node.input[0], where)
    nhwc = len(shape) == 4
    axes = (1, 2) if nhwc else tuple(range(2, len(shape)))
    im.emit("REDUCE_MAX", [im.value(node.input[0], nhwc, where)], node.output[0], nhwc, where,
            dict(axes=axes, keep_dims=True))


@onnx("ReduceMean")
def _onnx_reduce_mean(im, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = im.const(node.input[1], where).tolist()
    axes = sorted(int(a) % len(shape) for a in (axes if axes is not None else range(len(shape))))
    keep = bool(attrs.get("keepdims", 1))
    nhwc = im.is_nhwc(node.input[0]) and keep
    ir_axes = tuple(sorted(onnx_import.AXIS_TO_NHWC[a] for a in axes)) if nhwc else tuple(axes)
    x = im.value(node.input[0], True if nhwc else False, where)
    im.emit("MEAN", [x], node.output[0], nhwc, where, dict(axes=ir_axes, keep_dims=keep))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(AVERAGE_POOL_2D='Pool2DOptions', MAX_POOL_2D='Pool2DOptions', MEAN='ReducerOptions')
