"""Binary activations and math with broadcasting: PRELU, SQUARED_DIFFERENCE, DIV, MAXIMUM,
MINIMUM (ONNX PRelu, Max, Min: a constant -inf in a Max, +inf in a Min, left out; Div of two
activations is imported in ``ops.elementwise``)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import ops as spec_ops

from .. import channel_grids, onnx_import, qparams, tflite_import
from ..ir import IRError
from ..registry import Operator, onnx, register, tflite_options
from .elementwise import _export, _float, _lower, _scales, _tflite, channel_rows

_f32 = np.float32


# Parameters, as LiteRT's Prepare derives them ----------------------------------------------


def prelu_params(input_scale: float, alpha_scale: float, output_scale: float) -> dict[str, int]:
    """PRELU int8 (``PreluPrepare``)."""
    s_in, s_out = _f32(input_scale), _f32(output_scale)
    m1, s1 = fp.quantize_multiplier(float(s_in / s_out))
    m2, s2 = fp.quantize_multiplier(float(s_in * _f32(alpha_scale) / s_out))
    return dict(output_multiplier_1=m1, output_shift_1=s1, output_multiplier_2=m2, output_shift_2=s2)


SQUARED_DIFFERENCE_LEFT_SHIFT = 7


def squared_difference_params(input1_scale: float, input2_scale: float, output_scale: float) -> dict[str, int]:
    """SQUARED_DIFFERENCE int8: inputs to a common scale, the square to the output."""
    twice_max = float(_f32(2) * max(_f32(input1_scale), _f32(input2_scale)))
    m1, s1 = fp.quantize_multiplier(float(_f32(input1_scale)) / twice_max)
    m2, s2 = fp.quantize_multiplier(float(_f32(input2_scale)) / twice_max)
    real_out = twice_max * twice_max / float(_f32(1 << (2 * SQUARED_DIFFERENCE_LEFT_SHIFT)) * _f32(output_scale))
    if real_out >= 1.0:
        raise IRError(f"SQUARED_DIFFERENCE: output scale {output_scale} too small for input scales "
                      f"{input1_scale} and {input2_scale} (LiteRT needs the output multiplier below one)")
    mo, so = fp.quantize_multiplier(real_out)
    return dict(left_shift=SQUARED_DIFFERENCE_LEFT_SHIFT, input1_multiplier=m1, input1_shift=s1,
                input2_multiplier=m2, input2_shift=s2, output_multiplier=mo, output_shift=so)


def div_params(input1_scale: float, input2_scale: float, output_scale: float) -> dict[str, int]:
    """DIV int8: ``in1 / (in2 * out)`` in float32."""
    m, s = fp.quantize_multiplier(float(_f32(input1_scale) / (_f32(input2_scale) * _f32(output_scale))))
    return dict(output_multiplier=m, output_shift=s)


def _zps(g, op) -> dict:
    (_, z1), (_, z2), (_, zo) = _scales(g, op)
    return dict(input1_zp=z1, input2_zp=z2, output_zp=zo)


def _export_plain(wr, op, outs) -> None:
    wr.simple(op, outs)


def _prelu_params(g, op) -> dict:
    (s1, _), (s2, _), (so, _) = _scales(g, op)
    rows = channel_rows(g, op, spec_ops.PRELU16_CHANNEL_PARAMS, prelu_params)
    if rows is not None:   # PRELU16_PER_CHANNEL
        return dict(_zps(g, op), channel_params=rows)
    return dict(_zps(g, op), **prelu_params(s1, s2, so))


register(Operator("PRELU", tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: np.where(ins[0] >= 0, ins[0], ins[0] * ins[1]).astype(np.float32),
                  params=_prelu_params, lower=_lower, export=_export_plain,
                  # int16: alpha an int16 constant (LiteRT has no int16 PRELU: docs/hardware.md)
                  int16=True, channel_grid="rescale", channel_reader=channel_grids.reads_activation))


def _squared_difference_params(g, op) -> dict:
    (s1, _), (s2, _), (so, _) = _scales(g, op)
    return dict(_zps(g, op), **squared_difference_params(s1, s2, so))


register(Operator("SQUARED_DIFFERENCE", tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: np.square(ins[0] - ins[1]).astype(np.float32),
                  params=_squared_difference_params, lower=_lower, export=_export_plain, tflite_version=2))


def _div_params(g, op) -> dict:
    (s1, _), (s2, _), (so, _) = _scales(g, op)
    return dict(_zps(g, op), **div_params(s1, s2, so), **qparams.act_range(g, op))


def _float_div(op, ins, out):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _float(np.divide)(op, ins, out)


register(Operator("DIV", ("activation",), tflite=_tflite(tflite.DivOptions), float_ref=_float_div,
                  fused_activation=True, params=_div_params, lower=_lower, export=_export("DivOptions"),
                  tflite_version=2))


def _compare(name: str, fn: Callable) -> None:
    register(Operator(name, tflite=tflite_import.simple,
                      float_ref=lambda op, ins, out: fn(ins[0], ins[1]).astype(np.float32), same_scale=True,
                      params=_zps, lower=_lower, export=_export_plain, tflite_version=2, int16=True))


_compare("MAXIMUM", np.maximum)
_compare("MINIMUM", np.minimum)


def _variadic(op_type: str) -> Callable:
    """ONNX Max / Min of any number of inputs, as a chain of binary ops."""
    binary = onnx_import.binary(op_type)

    neutral = -np.inf if op_type == "MAXIMUM" else np.inf

    def handler(im, node, attrs, where):
        inputs = list(node.input)
        # Max with -inf (Min with +inf) changes nothing (jax's softmax: max(-inf, max(x))):
        # left out, as no int8 grid holds an infinity
        kept = [i for i in inputs if not (i in im.consts and np.all(im.consts[i] == neutral))]
        if kept and len(kept) < len(inputs) and np.broadcast_shapes(*(im.onnx_shape(i, where) for i in kept)) \
                == np.broadcast_shapes(*(im.onnx_shape(i, where) for i in inputs)):
            inputs = kept
        if len(inputs) == 1:  # a one-input Max is its input
            im.env[node.output[0]] = im.env[inputs[0]]
            return
        while len(inputs) > 2:
            partial = f"{node.output[0]}__{op_type.lower()}{len(inputs)}"
            shape = np.broadcast_shapes(im.onnx_shape(inputs[0], where), im.onnx_shape(inputs[1], where))
            im.shapes[partial] = (tuple(shape), "float32")
            binary(im, _Node([inputs[0], inputs[1]], [partial]), attrs, where)
            inputs = [partial, *inputs[2:]]
        binary(im, _Node(inputs, list(node.output)), attrs, where)
    return handler


class _Node:
    """The two fields of an ONNX node that the binary handler reads."""

    def __init__(self, inputs: list[str], outputs: list[str]) -> None:
        self.input, self.output = inputs, outputs


def clip_by_tensors(im, node, where) -> None:
    """ONNX Clip whose bounds are computed at run time (a spectrogram floored at its peak
    less 80 dB: ``Clip(x, ReduceMax(x) - 80)``): MAXIMUM with the lower bound, then MINIMUM
    with the upper one (an absent bound is skipped), both LiteRT's int8 kernels, so the
    chip runs it instead of a host call between two jobs."""
    x = node.input[0]
    steps = [(op_type, node.input[k]) for op_type, k in (("MAXIMUM", 1), ("MINIMUM", 2))
             if len(node.input) > k and node.input[k]]
    for n, (op_type, bound) in enumerate(steps):
        out = node.output[0]
        if n < len(steps) - 1:
            out = f"{node.output[0]}__{op_type.lower()}"
            im.shapes[out] = (tuple(np.broadcast_shapes(im.onnx_shape(x, where), im.onnx_shape(bound, where))),
                              "float32")
        onnx_import.binary(op_type)(im, _Node([x, bound], [out]), {}, where)
        x = out


onnx("PRelu")(onnx_import.binary("PRELU"))
onnx("Max")(_variadic("MAXIMUM"))
onnx("Min")(_variadic("MINIMUM"))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(DIV='DivOptions', MAXIMUM=None, MINIMUM=None, PRELU=None, SQUARED_DIFFERENCE=None)
