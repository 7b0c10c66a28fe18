"""gemmlowp's fixed-point logistic and tanh on int16 raw values, as LiteRT's integer LSTM
runs them (``tensor_utils::ApplySigmoid`` on Q3.12, ``ApplyTanh<IntegerBits>``), tabulated:
an int16 input has 65536 values, so each function is one table, computed once per format
with gemmlowp's own int16 arithmetic and then looked up.

The arithmetic is gemmlowp's ``fixedpoint.h`` for ``std::int16_t``: additions wrap to int16
(C++ stores the promoted sum back into an int16), ``*`` is the int16
``SaturatingRoundingDoublingHighMul``, constants are the int32 ones rounded by 16 bits
(``RescaleConstantInitializer``), and only ``AddSaturatingIf16Bit`` saturates. Values are
held in int64 arrays.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["logistic_q3_table", "tanh_table"]

_MIN, _MAX = -(1 << 15), (1 << 15) - 1


def _wrap(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _mul(a: np.ndarray, b) -> np.ndarray:
    """int16 SaturatingRoundingDoublingHighMul: trunc((a*b + nudge) / 2**15)."""
    b = np.asarray(b, np.int64)
    ab = a * b
    v = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(v >= 0, v >> 15, -((-v) >> 15))      # C division truncates toward zero
    return np.where((a == _MIN) & (b == _MIN), _MAX, q)


def _rdbpot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def _sat_shift_left(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a positive exponent, int16."""
    threshold = (1 << (15 - exponent)) - 1
    return np.where(x > threshold, _MAX, np.where(x < -threshold, _MIN, x << exponent))


def _rescale(x: np.ndarray, src_bits: int, dst_bits: int) -> np.ndarray:
    e = src_bits - dst_bits
    return _sat_shift_left(x, e) if e > 0 else (_rdbpot(x, -e) if e < 0 else x)


def _const(int32_value: int) -> int:
    """RescaleConstantInitializer: an int32 fixed-point constant rounded to 16 bits."""
    return int(_rdbpot(np.int64(int32_value), 16))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    constant_term, one_third = _const(1895147668), _const(715827883)
    x = _wrap(a + (1 << 12))                        # + 1/8 in Q0.15
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = _rdbpot(x4, 2)
    poly = _rdbpot(_wrap(_mul(_wrap(x4_over_4 + x3), one_third) + x2), 1)
    return np.clip(constant_term + _mul(np.int64(constant_term), _wrap(x + poly)), _MIN, _MAX)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
           (4, 242))


def _exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    fractional = 15 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod = _wrap((a & (quarter - 1)) - quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(_rescale(a_mod, integer_bits, 0))
    remainder = _wrap(a_mod - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = _wrap(np.int64(1 << (fractional + exponent)))
            result = np.where((remainder & bit) != 0, _mul(result, _const(multiplier)), result)
    if integer_bits > 5:
        clamp = _const(-(1 << (36 - integer_bits)))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, _MAX, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """x ~ 1 / half_denominator in Q2.13 after gemmlowp's three Newton-Raphson steps."""
    s = a + _MAX
    half = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))   # RoundingHalfSum, C division
    x = _wrap(_const(1515870810) + _mul(half, _const(-1010580540)))
    one = 1 << 13
    for _ in range(3):
        x = _wrap(x + _rescale(_mul(x, _wrap(one - _mul(half, x))), 4, 2))
    return x


def _one_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    return _rescale(_newton_reciprocal(a), 1, 0)


def _one_minus_x_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    return _rescale(_wrap(_newton_reciprocal(a) - (1 << 13)), 2, 0)


def _logistic(a: np.ndarray, integer_bits: int) -> np.ndarray:
    positive = a > 0
    magnitude = np.where(positive, a, _wrap(-a))
    if_positive = _one_over_one_plus_x(_exp_on_negative_values(_wrap(-magnitude), integer_bits))
    return np.where(a == 0, _const(1 << 30), np.where(positive, if_positive, _wrap(_MAX - if_positive)))


def _tanh(a: np.ndarray, integer_bits: int) -> np.ndarray:
    negative = a < 0
    n = np.where(negative, a, _wrap(-a))
    t = _one_minus_x_over_one_plus_x(_exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, 0, np.where(negative, _wrap(-t), t))


_ALL = np.arange(_MIN, _MAX + 1, dtype=np.int64)


@functools.cache
def logistic_q3_table() -> np.ndarray:
    """int16[65536]: ``gemmlowp::logistic`` of a Q3.12 value (index ``raw + 32768``), Q0.15."""
    return _logistic(_ALL, 3).astype(np.int16)


@functools.cache
def tanh_table(integer_bits: int) -> np.ndarray:
    """int16[65536]: ``gemmlowp::tanh`` of a Q``integer_bits`` value (index ``raw + 32768``), Q0.15."""
    if not 0 <= integer_bits <= 6:
        raise ValueError(f"tanh input with {integer_bits} integer bits (LiteRT's kernel takes 0..6)")
    return _tanh(_ALL, integer_bits).astype(np.int16)
