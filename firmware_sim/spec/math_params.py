"""Parameters of the activation and elementwise math descriptors, derived from scales
exactly as each op's Prepare does in LiteRT, and the 256-entry tables of the ops whose
LiteRT int8 kernel is a table built from float (they run on the LUT descriptor).

Float tables follow ``LUTPopulateInt8``: for every int8 ``q``,
``clamp(round_half_away(f(in_scale * (q - in_zp)) * (1 / out_scale)) + out_zp)`` in
float32, with the C library's float functions (``expf``, ``expm1f``, ``logf``,
``erff``, ``erfcf``, ``tanhf``, ``log1pf``) so that the tables match LiteRT bit for bit.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from functools import cache

import numpy as np

from .fixedpoint import quantize_multiplier

__all__ = ["float_lut", "libm", "hard_swish_params", "leaky_relu_params", "prelu_params",
           "squared_difference_params", "rsqrt_params", "abs_params", "div_params", "SQUARED_DIFFERENCE_LEFT_SHIFT",
           "neg_lut", "sqrt_lut", "gelu_transform", "log_transform"]

_f32 = np.float32


@cache
def libm() -> ctypes.CDLL:
    """The C math library with its float (``f``-suffixed) functions typed."""
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in ("expf", "expm1f", "logf", "erff", "erfcf", "tanhf", "log1pf", "sqrtf"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lib


def _round_half_away(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v)


def float_lut(fn: Callable[[np.float32], np.float32], input_scale: float, input_zp: int,
              output_scale: float, output_zp: int) -> np.ndarray:
    """The int8[256] table (indexed by uint8(q)) that ``LUTPopulateInt8`` builds for ``fn``.

    ``fn`` takes and returns a float32 (the dequantized input, the real output)."""
    in_s, inv_out = _f32(input_scale), _f32(1.0) / _f32(output_scale)
    lut = np.empty(256, dtype=np.int8)
    for q in range(-128, 128):
        y = _f32(fn(_f32(in_s * _f32(q - input_zp))))
        r = float(_f32(y * inv_out))
        if not math.isfinite(r):
            value = 127 if r > 0 else -128
        else:
            value = int(_f32(_round_half_away(r)) + _f32(output_zp))
        lut[q & 0xFF] = min(max(value, -128), 127)
    return lut


def sqrt_lut(input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> np.ndarray:
    """SQRT int8: ``trunc(sqrtf(in_scale * (q - in_zp)) / out_scale) + out_zp`` (LiteRT
    truncates here); inputs below the zero point, where LiteRT fails, give ``out_zp``."""
    in_s, out_s = _f32(input_scale), _f32(output_scale)
    lut = np.empty(256, dtype=np.int8)
    for q in range(-128, 128):
        x = _f32(in_s * _f32(q - input_zp))
        y = _f32(libm().sqrtf(max(float(x), 0.0)))
        lut[q & 0xFF] = min(max(int(y / out_s) + output_zp, -128), 127)
    return lut


def neg_lut() -> np.ndarray:
    """NEG int8: the byte negated (``-(-128)`` wraps to -128), whatever the quantization."""
    q = np.arange(256, dtype=np.int64).astype(np.uint8).view(np.int8).astype(np.int64)
    return (-q).astype(np.int8)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier`` then ``DownScaleInt32ToInt16Multiplier``."""
    m, shift = quantize_multiplier(real)
    if m >= (1 << 31) - 1 - (1 << 15):
        return (1 << 15) - 1, shift
    return (m + (1 << 15)) >> 16, shift


def hard_swish_params(input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> dict[str, int]:
    """HARD_SWISH int8 (``HardSwishPrepare``): int16 output and "reluish" multipliers."""
    hires = _f32(1.0 / 128.0) * _f32(input_scale)
    out_m, out_shift = _int16_multiplier(float(hires / _f32(output_scale)))
    if out_shift > 0:
        raise ValueError("HARD_SWISH: output scale too small for the input scale (multiplier > 1)")
    rel_m, rel_shift = _int16_multiplier(float(hires / _f32(3.0 / 32768.0)))
    return dict(input_zp=input_zp, output_zp=output_zp, output_multiplier=out_m, output_shift=out_shift,
                reluish_multiplier=rel_m, reluish_shift=rel_shift)


def leaky_relu_params(input_scale: float, alpha: float, output_scale: float) -> dict[str, int]:
    """LEAKY_RELU int8 (``LeakyReluPrepare``): scales multiplied in float32."""
    s_in, s_out = _f32(input_scale), _f32(output_scale)
    m_a, s_a = quantize_multiplier(float(s_in * _f32(alpha) / s_out))
    m_i, s_i = quantize_multiplier(float(s_in / s_out))
    return dict(multiplier_identity=m_i, shift_identity=s_i, multiplier_alpha=m_a, shift_alpha=s_a)


def prelu_params(input_scale: float, alpha_scale: float, output_scale: float) -> dict[str, int]:
    """PRELU int8 (``PreluPrepare``)."""
    s_in, s_out = _f32(input_scale), _f32(output_scale)
    m1, s1 = quantize_multiplier(float(s_in / s_out))
    m2, s2 = quantize_multiplier(float(s_in * _f32(alpha_scale) / s_out))
    return dict(output_multiplier_1=m1, output_shift_1=s1, output_multiplier_2=m2, output_shift_2=s2)


SQUARED_DIFFERENCE_LEFT_SHIFT = 7


def squared_difference_params(input1_scale: float, input2_scale: float, output_scale: float) -> dict[str, int]:
    """SQUARED_DIFFERENCE int8: inputs to a common scale, the square to the output."""
    twice_max = float(_f32(2) * max(_f32(input1_scale), _f32(input2_scale)))
    m1, s1 = quantize_multiplier(float(_f32(input1_scale)) / twice_max)
    m2, s2 = quantize_multiplier(float(_f32(input2_scale)) / twice_max)
    real_out = twice_max * twice_max / float(_f32(1 << (2 * SQUARED_DIFFERENCE_LEFT_SHIFT)) * _f32(output_scale))
    if real_out >= 1.0:
        raise ValueError("SQUARED_DIFFERENCE: output scale too small for the input scales")
    mo, so = quantize_multiplier(real_out)
    return dict(left_shift=SQUARED_DIFFERENCE_LEFT_SHIFT, input1_multiplier=m1, input1_shift=s1,
                input2_multiplier=m2, input2_shift=s2, output_multiplier=mo, output_shift=so)


def rsqrt_params(input_scale: float, output_scale: float) -> dict[str, int]:
    """RSQRT int8: ``1 / (sqrtf(in_scale) * out_scale)`` (the product in float32)."""
    m, s = quantize_multiplier(1.0 / float(_f32(libm().sqrtf(float(_f32(input_scale)))) * _f32(output_scale)))
    return dict(multiplier=m, shift=s)


def abs_params(input_scale: float, output_scale: float) -> dict[str, int]:
    """ABS int8: no rescaling when the scales are equal, else ``in / out`` in float32."""
    if _f32(input_scale) == _f32(output_scale):
        return dict(rescale=0, multiplier=0, shift=0)
    m, s = quantize_multiplier(float(_f32(input_scale) / _f32(output_scale)))
    return dict(rescale=1, multiplier=m, shift=s)


def div_params(input1_scale: float, input2_scale: float, output_scale: float) -> dict[str, int]:
    """DIV int8: ``in1 / (in2 * out)`` in float32."""
    m, s = quantize_multiplier(float(_f32(input1_scale) / (_f32(input2_scale) * _f32(output_scale))))
    return dict(output_multiplier=m, output_shift=s)


def gelu_transform(approximate: bool) -> Callable[[np.float32], np.float32]:
    """GELU's float function as LiteRT's table uses it (erfc form, or the tanh approximation)."""
    if approximate:
        k = _f32((2.0 / math.sqrt(math.pi)) * math.sqrt(0.5))  # M_2_SQRTPI * M_SQRT1_2

        def gelu(v: np.float32) -> np.float32:
            inner = v + _f32(_f32(_f32(_f32(0.044715) * v) * v) * v)
            return _f32(_f32(_f32(0.5) * v) * _f32(_f32(1.0) + _f32(libm().tanhf(float(_f32(k * inner))))))
        return gelu

    def gelu_erfc(v: np.float32) -> np.float32:
        return _f32(_f32(_f32(0.5) * v) * _f32(libm().erfcf(float(_f32(v * _f32(-math.sqrt(0.5)))))))
    return gelu_erfc


def log_transform(output_scale: float, output_zp: int) -> Callable[[np.float32], np.float32]:
    """LOG's float function for its table: ``logf``, and the lowest output for x <= 0."""
    lowest = _f32(_f32(-128 - output_zp) * _f32(output_scale))

    def log(v: np.float32) -> np.float32:
        return lowest if v <= 0 else _f32(libm().logf(float(v)))
    return log
