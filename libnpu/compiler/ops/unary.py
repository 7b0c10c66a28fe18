"""Unary activations and math: HARD_SWISH, LEAKY_RELU, RSQRT, ABS (integer formulas on the
chip's math unit), ELU, GELU, EXP, LOG, SQRT, NEG (256-entry tables on LUT, built as
LiteRT builds them), and the ONNX-only HARD_SIGMOID, SOFTPLUS, ERF (tables of their float
functions) and CLIP (any bounds, on the RELU descriptor).

ONNX: HardSwish, LeakyRelu, Elu (alpha 1), Gelu, Exp, Log, Sqrt, Abs, Neg (as MUL by -1),
HardSigmoid, Softplus, Erf, Clip, Reciprocal (as DIV), Pow by 2 (as MUL by itself).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tflite

from firmware_sim.spec import fixedpoint as fp
from firmware_sim.spec import math_params as mp

from .. import onnx_import, qparams, tflite_import
from ..ir import IRError
from ..registry import Operator, onnx, register

_f32 = np.float32


def _export_plain(wr, op, outs) -> None:
    wr.simple(op, outs)


def _zps(g, op) -> tuple[tuple[float, int], tuple[float, int]]:
    return qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])


def _flat(name: str) -> Callable:
    return lambda low, op, p: low.flat(name, op, p)


def _lower_lut(low, op, p):
    return low.flat("LUT", op, {}, dict(lut=low.const(op, "lut", p["lut"])))


# Integer formulas on the math unit -----------------------------------------------------------


def _hard_swish_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return mp.hard_swish_params(si, zi, so, zo)


register(Operator("HARD_SWISH", tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: (ins[0] * np.clip(ins[0] + 3, 0, 6) / 6).astype(np.float32),
                  params=_hard_swish_params, lower=_flat("HARD_SWISH"), export=_export_plain))


def _tflite_leaky(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.LeakyReluOptions)
    return dict(alpha=float(o.Alpha()) if o else 0.2), ins


def _leaky_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(input_zp=zi, output_zp=zo, **mp.leaky_relu_params(si, op.attrs["alpha"], so))


def _export_leaky(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"LeakyReluOptions": dict(Alpha=float(op.attrs["alpha"]))})


register(Operator("LEAKY_RELU", ("alpha",), tflite=_tflite_leaky,
                  float_ref=lambda op, ins, out: np.where(ins[0] > 0, ins[0], ins[0] * _f32(op.attrs["alpha"])),
                  params=_leaky_params, lower=_flat("LEAKY_RELU"), export=_export_leaky, tflite_version=2))


def _rsqrt_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(input_zp=zi, output_zp=zo, **mp.rsqrt_params(si, so))


def _rsqrt(op, ins, out):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 / np.sqrt(ins[0])).astype(np.float32)


register(Operator("RSQRT", tflite=tflite_import.simple, float_ref=_rsqrt, params=_rsqrt_params,
                  lower=_flat("RSQRT"), export=_export_plain, tflite_version=2))


def _abs_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(input_zp=zi, output_zp=zo, **mp.abs_params(si, so))


register(Operator("ABS", tflite=tflite_import.simple, float_ref=lambda op, ins, out: np.abs(ins[0]),
                  params=_abs_params, lower=_flat("ABS"), export=_export_plain, tflite_version=2))


# Tables built from float (LiteRT's LUTPopulate) -------------------------------------------------


def _libm(name: str) -> Callable[[np.float32], np.float32]:
    return lambda v: _f32(getattr(mp.libm(), name)(float(v)))


def _vectorize(fn: Callable[[np.float32], np.float32]) -> Callable:
    """The float reference of a table op: its float function on every element."""
    def ref(op, ins, out):
        x = np.asarray(ins[0], np.float32)
        return np.array([fn(_f32(v)) for v in x.reshape(-1)], np.float32).reshape(x.shape)
    return ref


def _table_op(name: str, fn: Callable[[dict], Callable[[np.float32], np.float32]], float_ref: Callable,
              attrs: tuple[str, ...] = (), tflite: Callable | None = tflite_import.simple,
              export: Callable | None = _export_plain, version: int = 1) -> None:
    """An operator whose int8 kernel is the table of ``fn(attrs)`` (``math_params.float_lut``)."""
    def params(g, op) -> dict:
        (si, zi), (so, zo) = _zps(g, op)
        return dict(lut=mp.float_lut(fn(dict(op.attrs, output_scale=so, output_zp=zo)), si, zi, so, zo))
    register(Operator(name, attrs, tflite=tflite, float_ref=float_ref, params=params, lower=_lower_lut,
                      export=export, tflite_version=version))


def _elu(v: np.float32) -> np.float32:
    return _f32(mp.libm().expm1f(float(v))) if v < 0 else v


_table_op("ELU", lambda a: _elu, lambda op, ins, out: np.where(ins[0] < 0, np.expm1(ins[0]), ins[0]))
_table_op("EXP", lambda a: _libm("expf"), lambda op, ins, out: np.exp(ins[0]), version=2)
_table_op("LOG", lambda a: mp.log_transform(a["output_scale"], a["output_zp"]),
          lambda op, ins, out: np.log(np.maximum(ins[0], np.float32(1e-30))), version=2)


def _tflite_gelu(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.GeluOptions)
    return dict(approximate=bool(o.Approximate()) if o else False), ins


def _export_gelu(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"GeluOptions": dict(Approximate=bool(op.attrs["approximate"]))})


def _float_gelu(op, ins, out):
    x = ins[0].astype(np.float64)
    if op.attrs["approximate"]:
        y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    else:
        from math import erf
        y = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    return y.astype(np.float32)


_table_op("GELU", lambda a: mp.gelu_transform(bool(a["approximate"])), _float_gelu, ("approximate",),
          tflite=_tflite_gelu, export=_export_gelu)


def _sqrt_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(lut=mp.sqrt_lut(si, zi, so, zo))


register(Operator("SQRT", tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: np.sqrt(np.maximum(ins[0], 0)).astype(np.float32),
                  params=_sqrt_params, lower=_lower_lut, export=_export_plain, tflite_version=2))


def _neg_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    if _f32(si) != _f32(so) or zo != -zi:
        raise IRError(f"{op.describe()}: int8 NEG negates the bytes, so its output must have the "
                      f"input's scale and the negated zero point (got {si}/{zi} -> {so}/{zo})")
    return dict(lut=mp.neg_lut())


register(Operator("NEG", tflite=tflite_import.simple, float_ref=lambda op, ins, out: -ins[0],
                  params=_neg_params, lower=_lower_lut, export=_export_plain))


# ONNX-only functions: tables of their float functions (no TFLite builtin to export) ------------


def _hard_sigmoid(a: dict) -> Callable[[np.float32], np.float32]:
    alpha, beta = _f32(a["alpha"]), _f32(a["beta"])
    return lambda v: _f32(min(max(_f32(alpha * v + beta), _f32(0)), _f32(1)))


_table_op("HARD_SIGMOID", _hard_sigmoid,
          lambda op, ins, out: np.clip(ins[0] * _f32(op.attrs["alpha"]) + _f32(op.attrs["beta"]), 0, 1)
          .astype(np.float32), ("alpha", "beta"), tflite=None, export=None)


def _softplus(v: np.float32) -> np.float32:
    # log(1 + exp(x)) without overflow: x + log1p(exp(-x)) for x > 0
    if v > 0:
        return _f32(v + _f32(mp.libm().log1pf(float(_f32(mp.libm().expf(float(-v)))))))
    return _f32(mp.libm().log1pf(float(_f32(mp.libm().expf(float(v))))))


_table_op("SOFTPLUS", lambda a: _softplus, lambda op, ins, out: np.logaddexp(ins[0], 0).astype(np.float32),
          tflite=None, export=None)


def _float_erf(op, ins, out):
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(ins[0]).astype(np.float32)


_table_op("ERF", lambda a: _libm("erff"), _float_erf,
          tflite=None, export=None)


def _clip_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    m, sh = fp.relu_multiplier(si, so)

    def q(f: float) -> int:
        v = float(_f32(f) / _f32(so))
        return int(zo) + int(np.copysign(np.floor(abs(v) + 0.5), v))
    lo, hi = op.attrs["min"], op.attrs["max"]
    act_min = -128 if lo == -np.inf else min(max(-128, q(lo)), 127)
    act_max = 127 if hi == np.inf else max(min(127, q(hi)), act_min)
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh, act_min=act_min, act_max=act_max)


register(Operator("CLIP", ("min", "max"),
                  float_ref=lambda op, ins, out: np.clip(ins[0], op.attrs["min"], op.attrs["max"]).astype(np.float32),
                  params=_clip_params, lower=lambda low, op, p: low.flat("RELU", op, p)))


# ONNX -----------------------------------------------------------------------------------------

for _onnx_name, _op in (("HardSwish", "HARD_SWISH"), ("Exp", "EXP"), ("Log", "LOG"), ("Sqrt", "SQRT"),
                        ("Abs", "ABS"), ("Softplus", "SOFTPLUS"), ("Erf", "ERF")):
    onnx(_onnx_name)(onnx_import.unary(_op))


def _unary_with(op_type: str, attrs: dict) -> Callable:
    def emit(im, node, where) -> None:
        nhwc = im.is_nhwc(node.input[0])
        im.emit(op_type, [im.value(node.input[0], None, where)], node.output[0], nhwc, where, attrs)
    return emit


@onnx("LeakyRelu")
def _onnx_leaky(im, node, attrs, where):
    _unary_with("LEAKY_RELU", dict(alpha=float(attrs.get("alpha", 0.01))))(im, node, where)


@onnx("Elu")
def _onnx_elu(im, node, attrs, where):
    if float(attrs.get("alpha", 1.0)) != 1.0:
        raise onnx_import.ONNXImportError(f"{where}: Elu with alpha {attrs['alpha']} (only 1.0) is not supported")
    _unary_with("ELU", {})(im, node, where)


@onnx("Gelu")
def _onnx_gelu(im, node, attrs, where):
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    _unary_with("GELU", dict(approximate=approximate == "tanh"))(im, node, where)


@onnx("HardSigmoid")
def _onnx_hard_sigmoid(im, node, attrs, where):
    _unary_with("HARD_SIGMOID", dict(alpha=float(attrs.get("alpha", 0.2)),
                                     beta=float(attrs.get("beta", 0.5))))(im, node, where)


_RELU_BOUNDS = {(0.0, np.inf): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}


@onnx("Clip")
def _onnx_clip(im, node, attrs, where):
    lo = float(attrs.get("min", -np.inf))
    hi = float(attrs.get("max", np.inf))
    if len(node.input) > 1 and node.input[1]:
        lo = float(im.const(node.input[1], where))
    if len(node.input) > 2 and node.input[2]:
        hi = float(im.const(node.input[2], where))
    if lo > hi:
        raise onnx_import.ONNXImportError(f"{where}: Clip min {lo} > max {hi}")
    kind = _RELU_BOUNDS.get((lo, hi))
    if kind is not None:
        onnx_import.unary(kind)(im, node, attrs, where)
    else:
        _unary_with("CLIP", dict(min=lo, max=hi))(im, node, where)


def _with_constant(op_type: str, value: float) -> Callable:
    """x op constant (one element, broadcast)."""
    def emit(im, node, attrs, where) -> None:
        nhwc = im.is_nhwc(node.input[0])
        c = im.g.add_const(f"{node.output[0]}__const", np.full((1,), value, np.float32)).name
        im.emit(op_type, [im.value(node.input[0], None, where), c], node.output[0], nhwc, where,
                dict(activation="NONE"))
    return emit


onnx("Neg")(_with_constant("MUL", -1.0))


@onnx("Pow")
def _onnx_pow(im, node, attrs, where):
    exponent = np.asarray(im.const(node.input[1], where), np.float64)
    if exponent.size != 1 or float(exponent.reshape(-1)[0]) not in (1.0, 2.0, 0.5):
        raise onnx_import.ONNXImportError(f"{where}: Pow by {exponent.tolist()} (only 2, 1 and 0.5) is not supported")
    e = float(exponent.reshape(-1)[0])
    nhwc = im.is_nhwc(node.input[0])
    x = im.value(node.input[0], None, where)
    if e == 2.0:
        im.emit("MUL", [x, x], node.output[0], nhwc, where, dict(activation="NONE"))
    elif e == 0.5:
        im.emit("SQRT", [x], node.output[0], nhwc, where)
    else:
        _with_constant("MUL", 1.0)(im, node, attrs, where)
