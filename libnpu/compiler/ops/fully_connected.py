"""FULLY_CONNECTED (ONNX Gemm, and MatMul by a constant)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import tasks as spec_tasks

from .. import channel_grids, float_ref, onnx_import, qparams, tflite_export, tflite_import
from ..registry import Operator, onnx, register, tflite_options
from .matmul import onnx_matmul


def _tflite(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.FullyConnectedOptions)
    if o is not None and o.WeightsFormat() != 0:
        raise tflite_import.UnsupportedOpError(f"{where}: shuffled weights format is not supported")
    attrs = dict(activation=tflite_import.activation(o.FusedActivationFunction() if o else 0, where),
                 keep_num_dims=bool(o.KeepNumDims()) if o else False)
    return attrs, (ins + [-1])[:3]


def _float(op, ins, out) -> np.ndarray:
    x, w, b = (list(ins) + [None])[:3]
    y = x.reshape(-1, w.shape[1]) @ w.T
    if b is not None:
        y = y + b
    return float_ref.activation(y, op.attrs["activation"]).reshape(out.shape)


def _lower(low, op, p):
    n, k = low.shape(op.inputs[1])
    rows = low.g.tensors[op.inputs[0]].size // k
    fields = dict(rows=rows, in_features=k, out_features=n, input_zp=p["input_zp"],
                  output_zp=p["output_zp"], act_min=p["act_min"], act_max=p["act_max"])
    flags, extra = spec_tasks.FC_DOUBLE_SCALE, {}
    mult, shift, scale = p["multiplier"], p["shift"], np.asarray(p["scale"], np.float64)
    if mult.size > 1:
        flags |= spec_tasks.FC_PER_CHANNEL
        extra = dict(mult_iova=low.const(op, "multiplier", mult), shift_iova=low.const(op, "shift", shift),
                     scale_iova=low.const(op, "scale", scale))
    else:
        fields.update(multiplier=int(mult[0]), shift=int(shift[0]), scale=float(scale[0]))
    return low.weighted("FULLY_CONNECTED", op, fields, flags, extra)


def _export(wr, op, outs) -> None:
    a = op.attrs
    ins = [wr.name(i) for i in (op.inputs + [""])[:3]]
    wr.add(op.type, ins, outs, {"FullyConnectedOptions": dict(
        FusedActivationFunction=tflite_export.ACT[a["activation"]], KeepNumDims=bool(a.get("keep_num_dims")))})


register(Operator(
    "FULLY_CONNECTED", ("activation", "keep_num_dims"), tflite=_tflite,  # in: x, w [N, K], bias|""
    float_ref=_float, weight_axis=0, fc_weights=True, fused_activation=True,
    params=qparams.weighted, lower=_lower, export=_export, tflite_version=4,
    macs=lambda g, op: g.tensors[op.outputs[0]].size * int(g.tensors[op.inputs[1]].shape[1]), int16=True,
    channel_grid="rescale", channel_reader=channel_grids.reads_folded))


@onnx("Gemm")
def _onnx_gemm(im, node, attrs, where):
    if node.input[1] not in im.consts:
        onnx_matmul(im, node, where, bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)),
                    float(attrs.get("alpha", 1.0)), node.input[2] if len(node.input) > 2 else "",
                    float(attrs.get("beta", 1.0)))
        return
    if attrs.get("transA", 0):
        raise onnx_import.ONNXImportError(f"{where}: transA is not supported")
    w = im.const(node.input[1], where).astype(np.float32) * float(attrs.get("alpha", 1.0))
    if not attrs.get("transB", 0):
        w = w.T
    bias = ""
    if len(node.input) > 2 and node.input[2]:
        c = im.const(node.input[2], where).astype(np.float32) * float(attrs.get("beta", 1.0))
        bias = im.g.add_const(node.input[2], np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()).name
    wt = im.g.add_const(node.input[1], np.ascontiguousarray(w)).name
    im.emit("FULLY_CONNECTED", [im.value(node.input[0], False, where), wt, bias], node.output[0], False,
            where, dict(activation="NONE", keep_num_dims=False))


@onnx("MatMul")
def _onnx_matmul(im, node, attrs, where):
    if node.input[1] not in im.consts:
        onnx_matmul(im, node, where)
        return
    w = im.const(node.input[1], where).astype(np.float32)
    if w.ndim != 2:
        raise onnx_import.ONNXImportError(f"{where}: weight must be 2-D")
    wt = im.g.add_const(node.input[1], np.ascontiguousarray(w.T)).name
    x = im.value(node.input[0], False, where)
    im.emit("FULLY_CONNECTED", [x, wt, ""], node.output[0], False, where,
            dict(activation="NONE", keep_num_dims=len(im.g.tensors[x].shape) > 2))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(FULLY_CONNECTED='FullyConnectedOptions')
