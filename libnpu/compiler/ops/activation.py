"""Activations: RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH and SOFTMAX (ONNX Relu, Sigmoid,
Tanh; Clip is in ``ops.unary``, Softmax in ``ops.normalization``)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import sigmoid16

from .. import onnx_import, qparams, tflite_import
from ..ir import IRError
from ..registry import Operator, onnx, register, tflite_options
from ..sigmoid_fusion import fuse_sigmoid_spellings


def _export_plain(wr, op, outs) -> None:
    wr.simple(op, outs)


# ReLU family: one chip descriptor, the range set by the activation's name -------------


def _relu_params(g, op) -> dict:
    (si, zi), (so, zo) = qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])
    m, sh = fp.relu_multiplier(si, so)
    info = np.iinfo(g.tensors[op.outputs[0]].dtype)
    lo, hi = fp.fused_activation_range(qparams.ACTIVATION_CODES[op.type], so, zo, int(info.min), int(info.max))
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh, act_min=lo, act_max=hi)


_RELUS = {"RELU": lambda x: np.maximum(x, 0), "RELU6": lambda x: np.clip(x, 0, 6),
          "RELU_N1_TO_1": lambda x: np.clip(x, -1, 1)}
for _name, _fn in _RELUS.items():
    register(Operator(_name, tflite=tflite_import.simple, float_ref=lambda op, ins, out, fn=_fn: fn(ins[0]),
                      params=_relu_params, lower=lambda low, op, p: low.flat("RELU", op, p),
                      export=_export_plain, tflite_version=1 if _name == "RELU_N1_TO_1" else 2,
                      int16=_name != "RELU_N1_TO_1"))  # LiteRT has no int16 RELU_N1_TO_1


# LOGISTIC / TANH: a table on the chip (int8: 256 entries; int16: 65536, LiteRT's int16
# kernels tabulated by spec.sigmoid16) ----------------------------------------------------


def _lut_params(kind: int):
    def params(g, op) -> dict:
        (si, zi), (so, zo) = qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])
        if g.tensors[op.inputs[0]].dtype == "int16":
            try:
                return dict(lut=sigmoid16.activation_lut_int16(kind, si, so))
            except ValueError as exc:
                raise IRError(f"{op.type} {op.name!r}: {exc}") from exc
        return dict(lut=fp.activation_lut(kind, si, zi, so, zo))
    return params


def _lower_lut(low, op, p):
    return low.flat("LUT", op, {}, dict(lut=low.const(op, "lut", p["lut"])))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + e**-x)`` in float32, taking ``e`` only to non-positive powers: ``e**-x``
    itself overflows below x = -88 (a RuntimeWarning printed during compiles of models
    whose logits reach that far, though the result, 0, was right)."""
    x = np.asarray(x, np.float32)
    e = np.exp(-np.abs(x))
    denominator = np.asarray(1 + e)
    # one quotient, its numerator chosen (1 or e): the same float32 values as both quotients
    # computed and one chosen, at half the work (a YOLO's SiLUs: 9,420 calls a compile)
    return np.divide(np.where(x >= 0, np.float32(1), e), denominator, out=denominator)


register(Operator("LOGISTIC", tflite=tflite_import.simple, float_ref=lambda op, ins, out: sigmoid(ins[0]),
                  rewrite=fuse_sigmoid_spellings,       # 1 / (1 + exp(-x)) and its kin: one LOGISTIC
                  fixed_output=(1 / 256, -128), params=_lut_params(fp.LUT_LOGISTIC), lower=_lower_lut,
                  export=_export_plain, tflite_version=2, int16=True))  # int16: output scale 2**-15
register(Operator("TANH", tflite=tflite_import.simple, float_ref=lambda op, ins, out: np.tanh(ins[0]),
                  fixed_output=(1 / 128, 0), params=_lut_params(fp.LUT_TANH), lower=_lower_lut,
                  export=_export_plain, tflite_version=2, int16=True))


# SOFTMAX ---------------------------------------------------------------------------------


def _tflite_softmax(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.SoftmaxOptions)
    return dict(beta=float(o.Beta()) if o else 1.0), ins


def softmax(x, *, beta) -> np.ndarray:
    """Softmax over the last axis in float."""
    z = (x - x.max(axis=-1, keepdims=True)) * beta
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _softmax_params(g, op) -> dict:
    if g.tensors[op.inputs[0]].dtype == "int16":  # the int16 kernel's exp-table rescaling
        m, sh = fp.softmax_int16_params(op.attrs["beta"], qparams.qp(g, op.inputs[0])[0])
        return dict(input_beta_multiplier=m, input_beta_left_shift=sh, diff_min=0)
    m, sh, dmin = fp.softmax_params(op.attrs["beta"], qparams.qp(g, op.inputs[0])[0])
    return dict(input_beta_multiplier=m, input_beta_left_shift=sh, diff_min=dmin)


def _lower_softmax(low, op, p):
    shape = low.shape(op.inputs[0])
    return low.emit("SOFTMAX", op, dict(p, rows=int(np.prod(shape[:-1], dtype=np.int64)), depth=shape[-1]))


def _export_softmax(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"SoftmaxOptions": dict(Beta=float(op.attrs["beta"]))})


register(Operator("SOFTMAX", ("beta",), tflite=_tflite_softmax,
                  float_ref=lambda op, ins, out: softmax(ins[0], **op.attrs), fixed_output=(1 / 256, -128),
                  params=_softmax_params, lower=_lower_softmax, export=_export_softmax, tflite_version=2,
                  int16=True))


# ONNX ----------------------------------------------------------------------------------

onnx("Relu")(onnx_import.unary("RELU"))
onnx("Sigmoid")(onnx_import.unary("LOGISTIC"))
onnx("Tanh")(onnx_import.unary("TANH"))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(LOGISTIC=None, RELU=None, RELU6=None, RELU_N1_TO_1=None, TANH=None)
