"""int16 LOGISTIC and TANH as LiteRT's reference kernels compute them (16x8 scheme).

Input symmetric int16 (zero point 0), output scale 2**-15 (zero point 0). LiteRT rescales
the input to a grid where 12288 (3 * 4096) is 1.0 and linearly interpolates a 256-entry
table of ``sigmoid(i / 24)`` in 0.16 fixed point; TANH uses the same table through
``tanh(x) = 2 * sigmoid(2x) - 1`` on a twice finer step.

The table is built here from the function (:func:`sigmoid_table`): each entry is the
sample, lowered by half the error the chord of its segment makes at the segment's
midpoint (the chord of a concave curve lies under it), rounded; the last entry is full
scale, 0xFFFF. This reproduces the table in LiteRT's source entry for entry.

The chip runs both through the ``LUT`` descriptor with ``OPF_INT16``: the compiler
tabulates :func:`activation_lut_int16` over all 65536 inputs (int16[65536] indexed by
``uint16(x)``), as it tabulates the int8 ones over 256.
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np

from .fixedpoint import LUT_LOGISTIC, LUT_TANH

__all__ = ["sigmoid_table", "input_scaling", "logistic_int16", "tanh_int16", "activation_lut_int16",
           "INT16_LUT_SIZE", "OUTPUT_SCALE"]

INT16_LUT_SIZE = 1 << 16
#: The output scale the int16 spec fixes for both (zero point 0).
OUTPUT_SCALE = 1.0 / 32768
_INPUT_INTEGER_BITS = 3      # Prepare: the POT input scale the kernels take as they are is 2**-12
_ONE = 4096.0 * 3.0          # the rescaled input grid: 1.0 is 12288 (so +-2**17 is +-10.7)
_STEPS_PER_UNIT = 24         # table entry i is sigmoid(i / 24)


@cache
def sigmoid_table() -> np.ndarray:
    """``uint16[256]``: ``sigmoid(i / 24)`` in 0.16 fixed point, each sample corrected by
    half its segment's chord error at the midpoint; the last entry 0xFFFF."""
    i = np.arange(256, dtype=np.float64)
    h = 1.0 / _STEPS_PER_UNIT

    def f(x: np.ndarray) -> np.ndarray:
        return 65536.0 / (1.0 + np.exp(-x))

    val, nxt, mid = f(i * h), f((i + 1) * h), f((i + 0.5) * h)
    corrected = val - ((val + nxt) / 2 - mid) / 2
    table = np.floor(corrected + 0.5).astype(np.int64)   # positive: round half away from zero
    table[-1] = 0xFFFF
    table = np.minimum(table, 0xFFFF).astype(np.uint16)
    table.flags.writeable = False
    return table


def _checked_log2(x: float) -> tuple[bool, int]:
    """LiteRT's ``CheckedLog2`` (float32 arithmetic): whether ``x`` is within 1e-3 of a
    power of two in log2, and that rounded log2."""
    f32 = np.float32
    log2 = f32(np.log(f32(x))) * (f32(1.0) / f32(np.log(f32(2.0))))
    rounded = f32(math.copysign(math.floor(abs(float(log2)) + 0.5), float(log2)))
    return bool(abs(f32(log2 - rounded)) < f32(1e-3)), int(rounded)


def input_scaling(kind: int, input_scale: float, output_scale: float = OUTPUT_SCALE) -> tuple[int, int]:
    """``(input_multiplier, input_left_shift)`` of LiteRT's int16 Prepare for LOGISTIC or TANH.

    A multiplier of 0 means a power-of-two input scale the kernel rescales by 3 itself
    (LOGISTIC: 2**-12; TANH: 2**-12 or 2**-11). Raises ``ValueError`` for an output scale
    other than 2**-15 (LiteRT refuses it) or an input scale whose rescaling would overflow
    the kernel's int32 product (above 5.3: no calibrated int16 tensor has one).
    """
    if kind not in (LUT_LOGISTIC, LUT_TANH):
        raise ValueError(f"unknown int16 activation kind {kind}")
    out_pot, out_log2 = _checked_log2(output_scale)
    if not out_pot or out_log2 != -15 or (kind == LUT_LOGISTIC and float(np.float32(output_scale)) != OUTPUT_SCALE):
        raise ValueError(f"int16 LOGISTIC / TANH need output scale 2**-15, got {output_scale}")
    scale = float(np.float32(input_scale))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"input scale must be positive and finite, got {input_scale}")
    pot, log2 = _checked_log2(scale)
    left_shift = (15 - _INPUT_INTEGER_BITS) + log2
    if pot and (left_shift == 0 or (kind == LUT_TANH and left_shift == 1)):
        return 0, left_shift
    multiplier, left_shift = scale * _ONE, 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift += 1
        multiplier *= 2.0
    if multiplier >= 65536:
        raise ValueError(f"int16 LOGISTIC / TANH: input scale {input_scale} is too large (rescaling overflows)")
    return int(multiplier), left_shift


def _rescaled(x: np.ndarray, multiplier: int, left_shift: int) -> np.ndarray:
    """The input on the 1/12288 grid: ``(x * multiplier + round) >> left_shift`` (int64 holds it)."""
    if not (0 <= multiplier < 65536 and 0 <= left_shift <= 31):
        raise ValueError(f"int16 activation multiplier / shift out of range: {multiplier}, {left_shift}")
    if multiplier == 0:   # power-of-two scale: the kernel rescales by 3 itself
        multiplier, left_shift = 3 << left_shift, 0
    rounding = (1 << (left_shift - 1)) if left_shift > 0 else 0
    return (x.astype(np.int64) * multiplier + rounding) >> left_shift


def _interpolate(magnitude: np.ndarray, fraction_bits: int) -> np.ndarray:
    """The table interpolated at ``magnitude`` (``fraction_bits`` below each entry), in
    units of ``2**-fraction_bits`` of the table's; segments at or past the last entry are
    left to the caller (``-1``)."""
    table = sigmoid_table().astype(np.int64)
    index = magnitude >> fraction_bits
    inside = index < 255
    lo = table[np.where(inside, index, 0)]
    hi = table[np.where(inside, index + 1, 0)]
    frac = magnitude & ((1 << fraction_bits) - 1)
    return np.where(inside, (lo << fraction_bits) + frac * (hi - lo), -1)


def logistic_int16(x: np.ndarray, multiplier: int, left_shift: int) -> np.ndarray:
    """``reference_integer_ops::Logistic`` on int16 ``x`` (:func:`input_scaling`): output
    scale 2**-15."""
    v = _rescaled(x, multiplier, left_shift)
    interp = _interpolate(np.abs(v), 9)
    result = np.where(interp < 0, 0x7FFF << 10, interp)
    result = np.where(v >= 0, result + (1 << 9), (1 << 25) - result + (1 << 9) - 1)
    return (result >> 10).astype(np.int16)


def tanh_int16(x: np.ndarray, multiplier: int, left_shift: int) -> np.ndarray:
    """``reference_integer_ops::Tanh`` on int16 ``x`` (:func:`input_scaling`): output
    scale 2**-15."""
    v = _rescaled(x, multiplier, left_shift)
    interp = _interpolate(np.abs(v), 8)
    result = np.where(interp < 0, 0xFFFF << 8, interp)
    result = np.where(v >= 0, result - (1 << 23) + (1 << 7), -result + (1 << 23) + (1 << 7) - 1)
    return (result >> 8).astype(np.int16)


def activation_lut_int16(kind: int, input_scale: float, output_scale: float = OUTPUT_SCALE) -> np.ndarray:
    """The ``LUT`` descriptor's int16 table for LOGISTIC or TANH: ``int16[65536]``, entry
    ``uint16(x)`` holding the output for input ``x``."""
    multiplier, left_shift = input_scaling(kind, input_scale, output_scale)
    x = np.arange(INT16_LUT_SIZE, dtype=np.uint16).view(np.int16)
    fn = logistic_int16 if kind == LUT_LOGISTIC else tanh_int16
    return fn(x, multiplier, left_shift)
