"""QUANTIZE and DEQUANTIZE: float <-> int8 / int16 at a graph's edges, and int8 / int16
rescaling (the chip's QUANTIZE / REQUANTIZE / DEQUANTIZE descriptors)."""
from __future__ import annotations

from .. import qparams, tflite_import
from ..registry import Operator, register, tflite_options


def _quantize_params(g, op) -> dict:
    if g.tensors[op.inputs[0]].dtype == "float32":
        so, zo = qparams.qp(g, op.outputs[0])
        return dict(scale=so, zero_point=zo)
    return qparams.rescale(g, op)


def _lower_quantize(low, op, p):
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
