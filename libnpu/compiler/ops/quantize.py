"""QUANTIZE and DEQUANTIZE: float <-> int8 / int16 at a graph's edges, int8 / int16
rescaling (the chip's QUANTIZE / REQUANTIZE / DEQUANTIZE descriptors), and int8 <-> uint8
at an int8 model's edges (a byte table, LUT)."""
from __future__ import annotations

import numpy as np

from .. import qparams, tflite_import
from ..ir import IRError
from ..registry import Operator, register, tflite_options

#: int8 <-> uint8 at one scale, zero points 128 apart (how TFLite's converter gives an int8
#: model uint8 inputs and outputs): LiteRT adds or subtracts 128, which never saturates,
#: so each byte's sign bit flips. The chip's LUT descriptor does it byte for byte.
_SIGN_FLIP = (np.arange(256, dtype=np.uint8) ^ 0x80).view(np.int8)


def _sign_flip_params(g, op) -> dict:
    (si, zi), (so, zo) = qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])
    offset = 128 if g.tensors[op.outputs[0]].dtype == "uint8" else -128
    if np.float32(si) != np.float32(so) or zo - zi != offset:
        raise IRError(f"{op.describe()}: the chip converts between int8 and uint8 only at one scale with zero "
                      f"points 128 apart (a sign-bit flip); this one rescales (scale {si:g}, zero point {zi} -> "
                      f"scale {so:g}, zero point {zo})")
    return dict(lut=_SIGN_FLIP)


def _quantize_params(g, op) -> dict:
    dtypes = {g.tensors[op.inputs[0]].dtype, g.tensors[op.outputs[0]].dtype}
    if dtypes == {"int8", "uint8"}:
        return _sign_flip_params(g, op)
    if g.tensors[op.inputs[0]].dtype == "float32":
        so, zo = qparams.qp(g, op.outputs[0])
        return dict(scale=so, zero_point=zo)
    return qparams.rescale(g, op)


def _lower_quantize(low, op, p):
    if "lut" in p:
        return low.flat("LUT", op, {}, dict(lut=low.const(op, "lut", p["lut"])))
    float_in = low.g.tensors[op.inputs[0]].dtype == "float32"
    return low.flat("QUANTIZE" if float_in else "REQUANTIZE", op, p)


def _dequantize_params(g, op) -> dict:
    s, z = qparams.qp(g, op.inputs[0])
    return dict(scale=s, zero_point=z)


def _export(wr, op, outs) -> None:
    wr.simple(op, outs)


# In the real-valued domain both are identities; the float reference's write path
# rounds to the output's grid.
register(Operator("QUANTIZE", tflite=tflite_import.simple, float_ref=lambda op, ins, out: ins[0],
                  params=_quantize_params, lower=_lower_quantize, export=_export, tflite_version=2,
                  int16=True))
register(Operator("DEQUANTIZE", tflite=tflite_import.simple, float_ref=lambda op, ins, out: ins[0],
                  params=_dequantize_params, lower=lambda low, op, p: low.flat("DEQUANTIZE", op, p),
                  export=_export, tflite_version=2, int16=True))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(DEQUANTIZE=None, QUANTIZE=None)
