"""Unary activations and math: HARD_SWISH, LEAKY_RELU, RSQRT, ABS (integer formulas on the
chip's math unit), ELU, GELU, EXP, LOG, SQRT, NEG (256-entry tables on LUT, built as
LiteRT builds them), and the ONNX-only HARD_SIGMOID, SOFTPLUS, ERF (tables of their float
functions; GELU also on int16, our table) and CLIP (any bounds, on the RELU descriptor).

ONNX: HardSwish, LeakyRelu, Elu (any alpha; TFLite export only with 1), Gelu, Exp, Log, Sqrt, Abs, Neg (as MUL by -1),
HardSigmoid, Softplus, Erf, Clip (bounds computed at run time: MAXIMUM / MINIMUM), Reciprocal (as DIV),
Pow by 2 and 3 (as MULs of itself), 0.5
(SQRT) and 1. GELU written out as elementwise ops (erf or tanh form) becomes one GELU
(:mod:`libnpu.compiler.gelu_fusion`); hard-swish and hard-sigmoid (``x * HardSigmoid(x)``,
``x * clip(x + 3, 0, 6) / 6``, ...) one HARD_SWISH / HARD_SIGMOID
(:mod:`libnpu.compiler.hard_swish_fusion`).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import tables
from npu_hw.sigmoid16 import INT16_LUT_SIZE

from .. import onnx_import, qparams, tflite_import
from ..gelu_fusion import fuse_gelu
from ..hard_swish_fusion import fuse_hard_swish_spellings
from ..ir import Graph, IRError, Op, Tensor
from ..registry import Operator, onnx, register, tflite_options
from ..tflite_export import TFLiteExportError
from .binary import clip_by_tensors

_f32 = np.float32


# Parameters and tables, as LiteRT's Prepare derives them ---------------------------------------


def sqrt_lut(input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> np.ndarray:
    """SQRT int8: ``trunc(sqrtf(in_scale * (q - in_zp)) / out_scale) + out_zp`` (LiteRT
    truncates here); inputs below the zero point, where LiteRT fails, give ``out_zp``."""
    in_s, out_s = _f32(input_scale), _f32(output_scale)
    lut = np.empty(256, dtype=np.int8)
    for q in range(-128, 128):
        x = _f32(in_s * _f32(q - input_zp))
        y = _f32(tables.libm().sqrtf(max(float(x), 0.0)))
        lut[q & 0xFF] = min(max(int(y / out_s) + output_zp, -128), 127)
    return lut


def neg_lut() -> np.ndarray:
    """NEG int8: the byte negated (``-(-128)`` wraps to -128), whatever the quantization."""
    q = np.arange(256, dtype=np.int64).astype(np.uint8).view(np.int8).astype(np.int64)
    return (-q).astype(np.int8)


def hard_swish_params(input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> dict[str, int]:
    """HARD_SWISH int8 (``HardSwishPrepare``): int16 output and "reluish" multipliers."""
    hires = _f32(1.0 / 128.0) * _f32(input_scale)
    out_m, out_shift = tables.int16_multiplier(float(hires / _f32(output_scale)))
    if out_shift > 0:
        raise IRError(f"HARD_SWISH: output scale {output_scale} too small for input scale {input_scale} "
                      "(LiteRT needs the output multiplier at most one)")
    rel_m, rel_shift = tables.int16_multiplier(float(hires / _f32(3.0 / 32768.0)))
    return dict(input_zp=input_zp, output_zp=output_zp, output_multiplier=out_m, output_shift=out_shift,
                reluish_multiplier=rel_m, reluish_shift=rel_shift)


def hard_swish_int16_params(input_scale: float, output_scale: float) -> dict[str, int]:
    """HARD_SWISH int16 (ours, docs/hardware.md): Q31 multipliers for the Q15 reluish factor
    ``in_scale * 2**15 / 6`` and for the output ``in_scale / (out_scale * 2**15)``."""
    one = float(1 << 15)
    rel_m, rel_shift = fp.quantize_multiplier(float(input_scale) * one / 6.0)
    out_m, out_shift = fp.quantize_multiplier(float(input_scale) / (float(output_scale) * one))
    if rel_shift > 15 or out_shift > 0:
        raise IRError(f"HARD_SWISH int16: input scale {input_scale} / output scale {output_scale} out of range "
                      "(needs in_scale < 6 and out_scale >= in_scale / 2**15)")
    return dict(input_zp=0, output_zp=0, output_multiplier=out_m, output_shift=out_shift,
                reluish_multiplier=rel_m, reluish_shift=rel_shift)


def leaky_relu_params(input_scale: float, alpha: float, output_scale: float) -> dict[str, int]:
    """LEAKY_RELU int8 (``LeakyReluPrepare``): scales multiplied in float32."""
    s_in, s_out = _f32(input_scale), _f32(output_scale)
    m_a, s_a = fp.quantize_multiplier(float(s_in * _f32(alpha) / s_out))
    m_i, s_i = fp.quantize_multiplier(float(s_in / s_out))
    return dict(multiplier_identity=m_i, shift_identity=s_i, multiplier_alpha=m_a, shift_alpha=s_a)


def rsqrt_params(input_scale: float, output_scale: float) -> dict[str, int]:
    """RSQRT int8: ``1 / (sqrtf(in_scale) * out_scale)`` (the product in float32)."""
    m, s = fp.quantize_multiplier(1.0 / float(_f32(tables.libm().sqrtf(float(_f32(input_scale)))) * _f32(output_scale)))
    return dict(multiplier=m, shift=s)


def abs_params(input_scale: float, output_scale: float) -> dict[str, int]:
    """ABS int8: no rescaling when the scales are equal, else ``in / out`` in float32."""
    if _f32(input_scale) == _f32(output_scale):
        return dict(rescale=0, multiplier=0, shift=0)
    m, s = fp.quantize_multiplier(float(_f32(input_scale) / _f32(output_scale)))
    return dict(rescale=1, multiplier=m, shift=s)


def gelu_transform(approximate: bool) -> Callable[[np.float32], np.float32]:
    """GELU's float function as LiteRT's table uses it (erfc form, or the tanh approximation)."""
    if approximate:
        k = _f32((2.0 / math.sqrt(math.pi)) * math.sqrt(0.5))  # M_2_SQRTPI * M_SQRT1_2

        def gelu(v: np.float32) -> np.float32:
            inner = v + _f32(_f32(_f32(_f32(0.044715) * v) * v) * v)
            return _f32(_f32(_f32(0.5) * v) * _f32(_f32(1.0) + _f32(tables.libm().tanhf(float(_f32(k * inner))))))
        return gelu

    def gelu_erfc(v: np.float32) -> np.float32:
        return _f32(_f32(_f32(0.5) * v) * _f32(tables.libm().erfcf(float(_f32(v * _f32(-math.sqrt(0.5)))))))
    return gelu_erfc


def log_transform(output_scale: float, output_zp: int) -> Callable[[np.float32], np.float32]:
    """LOG's float function for its table: ``logf``, and the lowest output for x <= 0."""
    lowest = _f32(_f32(-128 - output_zp) * _f32(output_scale))

    def log(v: np.float32) -> np.float32:
        return lowest if v <= 0 else _f32(tables.libm().logf(float(v)))
    return log


def _export_plain(wr, op, outs) -> None:
    wr.simple(op, outs)


def _zps(g, op) -> tuple[tuple[float, int], tuple[float, int]]:
    return qparams.qp(g, op.inputs[0]), qparams.qp(g, op.outputs[0])


def _flat(name: str) -> Callable:
    return lambda low, op, p: low.flat(name, op, p)


def _lower_lut(low, op, p):
    return low.flat("LUT", op, {}, dict(lut=low.const(op, "lut", p["lut"])))


# Float-graph rewrites (the optimizer applies them before quantization) ----------------------------


def _scalar(g: Graph, name: str) -> float | None:
    t = g.tensors.get(name)
    if t is None or not t.is_constant or t.data.size != 1:
        return None
    return float(t.data.reshape(-1)[0])


def neg_to_mul(g: Graph) -> int:
    """``-x`` -> ``x * -1``: int8 NEG negates the bytes, which means negation only when the
    output's zero point is the input's negated; MUL quantizes like any op."""
    changed = 0
    for op in g.ops:
        if op.type == "NEG":
            minus_one = g.add_const(f"{op.outputs[0]}__minus_one", np.full((1,), -1.0, np.float32))
            op.type, op.inputs, op.attrs = "MUL", [op.inputs[0], minus_one.name], {"activation": "NONE"}
            changed += 1
    return changed



def divide_by_square_root(g: Graph) -> int:
    """``a / sqrt(v)`` -> ``a * rsqrt(v)`` where the SQRT has no other reader: a LayerNorm
    spelled out (PaddlePaddle's SVTR exports: Sub, Pow, ReduceMean, Add, Sqrt, Div) then
    runs as ONNX LayerNormalization imports, and all of it has int16 kernels (DIV and
    SQRT have none); int8 rounds one step fewer (RSQRT's formula, where SQRT's table is
    then divided by)."""
    readers: dict[str, list[Op]] = {}
    for op in g.ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    made = {op.outputs[0]: op for op in g.ops}
    changed = 0
    for op in g.ops:
        root = made.get(op.inputs[1]) if op.type == "DIV" and len(op.inputs) == 2 else None
        if root is None or root.type != "SQRT" or op.inputs[0] == op.inputs[1] \
                or len(readers[op.inputs[1]]) != 1 or op.inputs[1] in g.outputs:
            continue
        old = g.tensors[root.outputs[0]]
        if old.quant is not None:      # an imported integer graph keeps its ops
            continue
        inverse = g.add_tensor(Tensor(g.unique_name(f"{old.name}__rsqrt"), old.shape, old.dtype))
        del g.tensors[old.name]
        root.type, root.outputs = "RSQRT", [inverse.name]
        op.type, op.inputs = "MUL", [op.inputs[0], inverse.name]
        changed += 1
    return changed

# Integer formulas on the math unit -----------------------------------------------------------


def _hard_swish_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    if g.tensors[op.outputs[0]].dtype == "int16":
        return hard_swish_int16_params(si, so)
    return hard_swish_params(si, zi, so, zo)


register(Operator("HARD_SWISH", rewrite=fuse_hard_swish_spellings, tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: (ins[0] * np.clip(ins[0] + 3, 0, 6) / 6).astype(np.float32),
                  params=_hard_swish_params, lower=_flat("HARD_SWISH"), export=_export_plain,
                  int16=True))  # our int16 formula: LiteRT has no int16 HARD_SWISH (docs/hardware.md)


def _tflite_leaky(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.LeakyReluOptions)
    return dict(alpha=float(o.Alpha()) if o else 0.2), ins


def _leaky_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(input_zp=zi, output_zp=zo, **leaky_relu_params(si, op.attrs["alpha"], so))


def _export_leaky(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"LeakyReluOptions": dict(Alpha=float(op.attrs["alpha"]))})


register(Operator("LEAKY_RELU", ("alpha",), tflite=_tflite_leaky,
                  float_ref=lambda op, ins, out: np.where(ins[0] > 0, ins[0], ins[0] * _f32(op.attrs["alpha"])),
                  params=_leaky_params, lower=_flat("LEAKY_RELU"), export=_export_leaky, tflite_version=2,
                  int16=True))


def rsqrt_lut_int16(input_scale: float, output_scale: float) -> np.ndarray:
    """int16 RSQRT's table (ours: LiteRT's RSQRT has int8 only; docs/hardware.md): the
    ``LUT`` descriptor's int16[65536], entry ``uint16(x)`` the correctly rounded
    ``1 / sqrt(x * in_scale) / out_scale`` in float64, saturated to int16; ``x <= 0``
    gives 32767, as the int8 kernel gives 127 at its zero point (both grids symmetric).
    A LayerNorm's ``1 / sqrt(variance)`` spans its tokens' scales (40x on an attention
    output whose queries attend mostly to a key of value 0): int8's 256 steps over it
    left the common tokens a 7% step."""
    x = np.arange(INT16_LUT_SIZE, dtype=np.uint16).view(np.int16).astype(np.float64)
    with np.errstate(divide="ignore"):
        real = np.where(x > 0, 1 / np.sqrt(np.maximum(x, 1) * float(_f32(input_scale))), np.inf)
    return np.clip(np.round(real / float(_f32(output_scale))), -32768, 32767).astype(np.int16)


def _rsqrt_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    if g.tensors[op.inputs[0]].dtype == "int16":
        return dict(lut=rsqrt_lut_int16(si, so))
    return dict(input_zp=zi, output_zp=zo, **rsqrt_params(si, so))


def _lower_rsqrt(low, op, p):
    return _lower_lut(low, op, p) if "lut" in p else low.flat("RSQRT", op, p)   # int16: a table


def _rsqrt(op, ins, out):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 / np.sqrt(ins[0])).astype(np.float32)


register(Operator("RSQRT", rewrite=divide_by_square_root, tflite=tflite_import.simple, float_ref=_rsqrt,
                  params=_rsqrt_params, lower=_lower_rsqrt, export=_export_plain, tflite_version=2,
                  int16=True))  # int16: our table (rsqrt_lut_int16); LiteRT has no int16 RSQRT


def _abs_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    if g.tensors[op.inputs[0]].dtype == "int16" and (zi or zo):
        raise IRError(f"{op.describe()}: int16 ABS takes zero points 0, not {zi} / {zo}")
    return dict(input_zp=zi, output_zp=zo, **abs_params(si, so))


register(Operator("ABS", tflite=tflite_import.simple, float_ref=lambda op, ins, out: np.abs(ins[0]),
                  params=_abs_params, lower=_flat("ABS"), export=_export_plain, tflite_version=2,
                  int16=True))  # LiteRT's int16 ABS: a spectrum's magnitude needs its input's int16 steps


# Tables built from float (LiteRT's LUTPopulate) -------------------------------------------------


def _libm(name: str) -> Callable[[np.float32], np.float32]:
    return lambda v: _f32(getattr(tables.libm(), name)(float(v)))


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in numpy for the float references (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7)."""
    x = np.asarray(x, np.float64)
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1 - poly * np.exp(-x * x))


def float_lut_int16(fn: Callable[[np.ndarray], np.ndarray], input_scale: float, output_scale: float) -> np.ndarray:
    """The ``LUT`` descriptor's int16[65536] table (entry ``uint16(q)``) of the float function
    ``fn`` on symmetric int16 grids (zero points 0), ours (docs/hardware.md: LiteRT has no
    int16 kernel for these ops): ``clamp(floor(fn(in_scale * q) / out_scale + 1/2), -32768, 32767)``,
    ``fn`` evaluated in float64 on the float32 scales: the function rounded to the output grid."""
    si, so = float(_f32(input_scale)), float(_f32(output_scale))
    q = np.arange(1 << 16, dtype=np.uint16).view(np.int16).astype(np.float64)
    return np.clip(np.floor(np.asarray(fn(si * q), np.float64) / so + 0.5), -32768, 32767).astype(np.int16)


def _table_op(name: str, fn: Callable[[dict], Callable[[np.float32], np.float32]], float_ref: Callable,
              attrs: tuple[str, ...] = (), tflite: Callable | None = tflite_import.simple,
              export: Callable | None = _export_plain, version: int = 1, rewrite: Callable | None = None,
              int16: Callable[[dict, float, float], np.ndarray] | None = None) -> None:
    """An operator whose int8 kernel is the table of ``fn(attrs)`` (``spec.tables.float_lut``);
    ``int16(attrs, in_scale, out_scale)``: its int16[65536] table on symmetric int16 grids
    (the ``LUT`` descriptor's int16 mode), when it has one."""
    def params(g, op) -> dict:
        (si, zi), (so, zo) = _zps(g, op)
        if g.tensors[op.inputs[0]].dtype == "int16":
            if int16 is None or zi or zo:
                raise IRError(f"{op.describe()}: no int16 table for zero points {zi} / {zo}" if int16
                              else f"{op.describe()}: no int16 kernel")
            return dict(lut=int16(op.attrs, si, so))
        return dict(lut=tables.float_lut(fn(dict(op.attrs, output_scale=so, output_zp=zo)), si, zi, so, zo))
    register(Operator(name, attrs, rewrite=rewrite, tflite=tflite, float_ref=float_ref, params=params,
                      lower=_lower_lut, export=export, tflite_version=version, int16=int16 is not None))


def elu_transform(a: dict) -> Callable[[np.float32], np.float32]:
    """``alpha * expm1f(x)`` below 0 (TFLite's ELU has alpha 1: exactly ``expm1f``)."""
    alpha = _f32(a["alpha"])
    return lambda v: _f32(alpha * _f32(tables.libm().expm1f(float(v)))) if v < 0 else v


def _tflite_elu(im, ins, outs, table, where):
    return dict(alpha=1.0), ins


def _export_elu(wr, op, outs) -> None:
    if float(op.attrs["alpha"]) != 1.0:
        raise TFLiteExportError(f"{op.describe()}: TFLite's ELU has alpha 1, not {op.attrs['alpha']}")
    wr.simple(op, outs)


_table_op("ELU", elu_transform,
          lambda op, ins, out: np.where(ins[0] < 0, _f32(op.attrs["alpha"]) * np.expm1(np.minimum(ins[0], 0)), ins[0]),
          ("alpha",), tflite=_tflite_elu, export=_export_elu)
_table_op("EXP", lambda a: _libm("expf"), lambda op, ins, out: np.exp(ins[0]), version=2)
_table_op("LOG", lambda a: log_transform(a["output_scale"], a["output_zp"]),
          lambda op, ins, out: np.log(np.maximum(ins[0], np.float32(1e-30))), version=2)


def _tflite_gelu(im, ins, outs, table, where):
    o = tflite_import.options(table, tflite.GeluOptions)
    return dict(approximate=bool(o.Approximate()) if o else False), ins


def _export_gelu(wr, op, outs) -> None:
    wr.add(op.type, [wr.name(op.inputs[0])], outs, {"GeluOptions": dict(Approximate=bool(op.attrs["approximate"]))})


def _gelu64(x: np.ndarray, approximate: bool) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _float_gelu(op, ins, out):
    return _gelu64(ins[0], bool(op.attrs["approximate"])).astype(np.float32)


_table_op("GELU", lambda a: gelu_transform(bool(a["approximate"])), _float_gelu, ("approximate",),
          tflite=_tflite_gelu, export=_export_gelu, rewrite=fuse_gelu,
          int16=lambda a, si, so: float_lut_int16(lambda x: _gelu64(x, bool(a["approximate"])), si, so))


def _sqrt_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    return dict(lut=sqrt_lut(si, zi, so, zo))


register(Operator("SQRT", tflite=tflite_import.simple,
                  float_ref=lambda op, ins, out: np.sqrt(np.maximum(ins[0], 0)).astype(np.float32),
                  params=_sqrt_params, lower=_lower_lut, export=_export_plain, tflite_version=2))


def _neg_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    if _f32(si) != _f32(so) or zo != -zi:
        raise IRError(f"{op.describe()}: int8 NEG negates the bytes, so its output must have the "
                      f"input's scale and the negated zero point (got {si}/{zi} -> {so}/{zo})")
    return dict(lut=neg_lut())


register(Operator("NEG", rewrite=neg_to_mul, tflite=tflite_import.simple, float_ref=lambda op, ins, out: -ins[0],
                  params=_neg_params, lower=_lower_lut, export=_export_plain))


# ONNX-only functions: tables of their float functions (no TFLite builtin to export) ------------


def _hard_sigmoid(a: dict) -> Callable[[np.float32], np.float32]:
    alpha, beta = _f32(a["alpha"]), _f32(a["beta"])
    return lambda v: _f32(min(max(_f32(alpha * v + beta), _f32(0)), _f32(1)))


_table_op("HARD_SIGMOID", _hard_sigmoid,
          lambda op, ins, out: np.clip(ins[0] * _f32(op.attrs["alpha"]) + _f32(op.attrs["beta"]), 0, 1)
          .astype(np.float32), ("alpha", "beta"), tflite=None, export=None)
# No int16 HARD_SIGMOID: its table (float_lut_int16 of the clamp) was exact, but with it promoted
# rapidocr-cls's held-out samples chose bias correction, which failed its unseen crops (0.16 off)


def _softplus(v: np.float32) -> np.float32:
    # log(1 + exp(x)) without overflow: x + log1p(exp(-x)) for x > 0
    if v > 0:
        return _f32(v + _f32(tables.libm().log1pf(float(_f32(tables.libm().expf(float(-v)))))))
    return _f32(tables.libm().log1pf(float(_f32(tables.libm().expf(float(v))))))


_table_op("SOFTPLUS", lambda a: _softplus, lambda op, ins, out: np.logaddexp(ins[0], 0).astype(np.float32),
          tflite=None, export=None)


def _float_erf(op, ins, out):
    return _erf(ins[0]).astype(np.float32)


_table_op("ERF", lambda a: _libm("erff"), _float_erf,
          tflite=None, export=None)


def _clip_params(g, op) -> dict:
    (si, zi), (so, zo) = _zps(g, op)
    m, sh = fp.relu_multiplier(si, so)

    def q(f: float) -> int:
        v = float(_f32(f) / _f32(so))
        return int(zo) + int(np.copysign(np.floor(abs(v) + 0.5), v))
    lo, hi = op.attrs["min"], op.attrs["max"]
    info = np.iinfo(g.tensors[op.outputs[0]].dtype)     # int16: RELU's int16 descriptor, bounds alike
    low, high = int(info.min), int(info.max)
    act_min = low if lo == -np.inf else min(max(low, q(lo)), high)
    act_max = high if hi == np.inf else max(min(high, q(hi)), act_min)
    return dict(input_zp=zi, output_zp=zo, multiplier=m, shift=sh, act_min=act_min, act_max=act_max)


def _export_clip(wr, op, outs) -> None:
    """Float only (a layer kept in float on the CPU, :mod:`libnpu.compiler.cpu_float`):
    TFLite has no CLIP of any bounds, so ``MINIMUM(MAXIMUM(x, min), max)`` (an infinite
    bound left out)."""
    x, out = wr.src.tensors[op.inputs[0]], wr.src.tensors[op.outputs[0]]
    if x.quant is not None:
        raise TFLiteExportError(f"cannot export the quantized {op.describe()} to TFLite")
    steps = [(kind, float(op.attrs[bound])) for kind, bound in (("MAXIMUM", "min"), ("MINIMUM", "max"))
             if np.isfinite(op.attrs[bound])]
    current = wr.name(x.name)
    if not steps:     # CLIP(-inf, inf): the value itself
        steps = [("MAXIMUM", -np.finfo(np.float32).max)]
    for k, (kind, bound) in enumerate(steps):
        last = k == len(steps) - 1
        target = outs[0] if last else wr.tidx(Tensor(f"{out.name}__{kind.lower()}", out.shape, "float32"))
        limit = wr.tidx(Tensor(f"{out.name}__{kind.lower()}_bound", (), "float32", None, np.asarray(bound, np.float32)))
        wr.add(kind, [current, limit], [target], {})
        current = target


register(Operator("CLIP", ("min", "max"),
                  float_ref=lambda op, ins, out: np.clip(ins[0], op.attrs["min"], op.attrs["max"]).astype(np.float32),
                  params=_clip_params, lower=lambda low, op, p: low.flat("RELU", op, p), export=_export_clip,
                  int16=True))  # RELU's int16 kernel with the bounds on the int16 grid


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
    _unary_with("ELU", dict(alpha=float(attrs.get("alpha", 1.0))))(im, node, where)


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
    if any(name and name not in im.consts for name in node.input[1:3]):
        clip_by_tensors(im, node, where)     # a bound computed at run time
        return
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


@onnx("Reciprocal")
def _onnx_reciprocal(im, node, attrs, where):
    nhwc = im.is_nhwc(node.input[0])
    one = im.g.add_const(f"{node.output[0]}__one", np.ones((1,), np.float32)).name
    im.emit("DIV", [one, im.value(node.input[0], None, where)], node.output[0], nhwc, where, dict(activation="NONE"))


@onnx("Pow")
def _onnx_pow(im, node, attrs, where):
    exponent = np.asarray(im.const(node.input[1], where), np.float64)
    if exponent.size != 1 or float(exponent.reshape(-1)[0]) not in (1.0, 2.0, 3.0, 0.5):
        raise onnx_import.ONNXImportError(f"{where}: Pow by {exponent.tolist()} (only 3, 2, 1 and 0.5) "
                                          "is not supported")
    e = float(exponent.reshape(-1)[0])
    nhwc = im.is_nhwc(node.input[0])
    x = im.value(node.input[0], None, where)
    if e == 2.0:
        im.emit("MUL", [x, x], node.output[0], nhwc, where, dict(activation="NONE"))
    elif e == 3.0:    # the tanh GELU's x^3 (torch.pow(x, 3)): gelu_fusion reads it as MULs
        square = im.g.add_tensor(Tensor(im.g.unique_name(f"{node.output[0]}__square"), im.g.tensors[x].shape,
                                        "float32")).name
        im.g.add_op(Op("MUL", [x, x], [square], dict(activation="NONE")))
        im.emit("MUL", [square, x], node.output[0], nhwc, where, dict(activation="NONE"))
    elif e == 0.5:
        im.emit("SQRT", [x], node.output[0], nhwc, where)
    else:
        _with_constant("MUL", 1.0)(im, node, attrs, where)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(ABS=None, ELU=None, EXP=None, GELU='GeluOptions', HARD_SWISH=None, LEAKY_RELU='LeakyReluOptions',
               LOG=None, NEG=None, RSQRT=None, SQRT=None)
