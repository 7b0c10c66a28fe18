"""Tables the chip's LUT descriptor runs, built from float as LiteRT builds them, and
the int16 multiplier encoding of LiteRT's int16 fixed-point kernels.

Float tables follow ``LUTPopulateInt8``: for every int8 ``q``,
``clamp(round_half_away(f(in_scale * (q - in_zp)) * (1 / out_scale)) + out_zp)`` in
float32, with the C library's float functions (``expf``, ``expm1f``, ``logf``, ``erff``,
``erfcf``, ``tanhf``, ``log1pf``, ``sqrtf``: :func:`libm`) so that a table matches
LiteRT's bit for bit.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from functools import cache

import numpy as np

from .fixedpoint import quantize_multiplier

__all__ = ["float_lut", "libm", "int16_multiplier"]

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


def int16_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier`` then ``DownScaleInt32ToInt16Multiplier``."""
    m, shift = quantize_multiplier(real)
    if m >= (1 << 31) - 1 - (1 << 15):
        return (1 << 15) - 1, shift
    return (m + (1 << 15)) >> 16, shift
