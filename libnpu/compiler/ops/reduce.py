"""Reductions over any axes: SUM, REDUCE_MAX, REDUCE_MIN (TFLite) and REDUCE_L2 (ONNX
ReduceL2: no TFLite builtin, the chip's formula is in docs/hardware.md); ONNX ReduceSum,
ReduceMax, ReduceMin, ReduceL2. MEAN is in ``pool``. The IR keeps TFLite's ``axes`` and
``keep_dims``; the chip reduces with the axes kept, a dropped axis is the same bytes."""
from __future__ import annotations

import numpy as np
import tflite

from .. import onnx_import, qparams, tflite_import
from ..registry import Operator, onnx, register

_ATTRS = ("axes", "keep_dims")


def _tflite_reduce(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.ReducerOptions)
    rank = len(im.shape(ins[0]))
    axes = sorted({int(a) % rank for a in im.const(ins[1], "axes", where).reshape(-1)})
    if not axes:
        raise tflite_import.UnsupportedOpError(f"{where}: a reduction over no axes")
    return dict(axes=tuple(axes), keep_dims=bool(o.KeepDims()) if o else False), ins[:1]


def _float(fn):
    return lambda op, ins, out: fn(ins[0], axis=tuple(op.attrs["axes"]), keepdims=op.attrs["keep_dims"])


def _l2(x, axis, keepdims):
    return np.sqrt(np.sum(np.square(x, dtype=np.float64), axis=axis, keepdims=keepdims)).astype(np.float32)


def _fields(low, op, p) -> dict:
    from ..lower import pad_rank
    shape = low.shape(op.inputs[0])
    return dict(rank=len(shape), in_shape=pad_rank(shape), axes_mask=sum(1 << a for a in p["axes"]))


def _sum_params(g, op) -> dict:
    return dict(axes=tuple(op.attrs["axes"]), **qparams.rescale(g, op))


def _l2_params(g, op) -> dict:
    (si, zi), (so, zo) = qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])
    return dict(axes=tuple(op.attrs["axes"]), input_zp=zi, output_zp=zo, scale=float(np.float64(si) / np.float64(so)))


def _lower_sum(low, op, p):
    return low.emit("SUM", op, dict(_fields(low, op, p), input_zp=p["input_zp"], output_zp=p["output_zp"],
                                    multiplier=p["multiplier"], shift=p["shift"]))


def _lower_l2(low, op, p):
    return low.emit("REDUCE_L2", op, dict(_fields(low, op, p), input_zp=p["input_zp"], output_zp=p["output_zp"],
                                          scale=p["scale"]))


def _export_reduce(w, op, outs) -> None:
    w.with_constant(op, outs, op.attrs["axes"], {"ReducerOptions": dict(KeepDims=bool(op.attrs["keep_dims"]))})


register(Operator(
    "SUM", _ATTRS, tflite=_tflite_reduce, float_ref=_float(np.sum), params=_sum_params, lower=_lower_sum,
    export=_export_reduce))
for _name, _fn in (("REDUCE_MAX", np.max), ("REDUCE_MIN", np.min)):
    register(Operator(
        _name, _ATTRS, tflite=_tflite_reduce, float_ref=_float(_fn), same_scale=True,
        params=lambda g, op: dict(axes=tuple(op.attrs["axes"])),
        lower=lambda low, op, p, name=_name: low.emit(name, op, _fields(low, op, p)),
        export=_export_reduce, tflite_version=2))
register(Operator(
    "REDUCE_L2", _ATTRS, float_ref=_float(_l2), params=_l2_params, lower=_lower_l2))


@onnx("ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2")
def _onnx_reduce(im, node, attrs, where):
    shape = im.onnx_shape(node.input[0], where)
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = im.const(node.input[1], where).reshape(-1).tolist()
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            raise onnx_import.ONNXImportError(f"{where}: noop_with_empty_axes is not supported")
        axes = range(len(shape))
    axes = sorted({int(a) % len(shape) for a in axes})
    keep = bool(attrs.get("keepdims", 1))
    nhwc = im.is_nhwc(node.input[0]) and keep and len(shape) == 4
    ir_axes = tuple(sorted(onnx_import.AXIS_TO_NHWC[a] for a in axes)) if nhwc else tuple(axes)
    kind = {"ReduceSum": "SUM", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN",
            "ReduceL2": "REDUCE_L2"}[node.op_type]
    x = im.value(node.input[0], True if nhwc else False, where)
    im.emit(kind, [x], node.output[0], nhwc, where, dict(axes=ir_axes, keep_dims=keep))
