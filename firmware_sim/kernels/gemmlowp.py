"""Vectorized gemmlowp fixed-point transcendental functions (int32 raw values in int64).

Only what TFLite's int8 reference softmax uses: ``exp_on_negative_values`` on Q5.26 input,
``one_over_one_plus_x_for_x_in_0_1`` and TFLite's ``GetReciprocal``. Every int32 addition
wraps like the C code; multiplications are ``SaturatingRoundingDoublingHighMul``.
"""
from __future__ import annotations

import numpy as np

from .fixedpoint import INT32_MAX, INT32_MIN, rounding_divide_by_pot, wrap_int32
from .fixedpoint import saturating_rounding_doubling_high_mul as mul

__all__ = ["exp_on_negative_values_q5", "one_over_one_plus_x_for_x_in_0_1", "get_reciprocal",
           "saturating_left_shift"]


def saturating_left_shift(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT`` with a positive exponent."""
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX,
                    np.where(x < -threshold, INT32_MIN, wrap_int32(x << exponent)))


def _add(a: np.ndarray, b) -> np.ndarray:
    return wrap_int32(a + b)


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    constant_term = 1895147668  # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = _add(a, 1 << 28)  # a + 1/8
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(_add(mul(_add(x4_over_4, x3), constant_1_over_3), x2), 1)
    return _add(constant_term, mul(constant_term, _add(x, poly)))


# Barrel shifter of exp_on_negative_values: (exponent, exp(-2**exponent) in Q0.31).
_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
           (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values_q5(a: np.ndarray) -> np.ndarray:
    """exp(a) for a <= 0 given as Q5.26 raw values; result Q0.31 raw."""
    a = np.asarray(a, dtype=np.int64)
    frac_bits = 26
    one_quarter = 1 << (frac_bits - 2)
    a_mod = (a & (one_quarter - 1)) - one_quarter
    # Rescale<0> from 5 integer bits: saturating multiply by 2**5.
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_left_shift(a_mod, 5))
    remainder = wrap_int32(a_mod - a)
    for exponent, multiplier in _BARREL:
        bit = (remainder & (1 << (frac_bits + exponent))) != 0
        result = np.where(bit, mul(result, multiplier), result)
    return np.where(a == 0, INT32_MAX, result)


def _rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    s = a + b
    v = s + np.where(s >= 0, 1, -1)
    return np.where(v >= 0, v // 2, -((-v) // 2))  # C division truncates


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """1 / (1 + a) for a in [0, 1) as Q0.31 raw values (Newton-Raphson, 3 steps)."""
    half_denominator = _rounding_half_sum(np.asarray(a, dtype=np.int64), INT32_MAX)
    x = _add(1515870810, mul(half_denominator, -1010580540))  # 48/17 - 32/17 * d, Q2.29
    one_q2 = 1 << 29
    for _ in range(3):
        one_minus = _add(one_q2, -mul(half_denominator, x))
        x = _add(x, saturating_left_shift(mul(x, one_minus), 2))
    return saturating_left_shift(x, 1)


def get_reciprocal(x: np.ndarray, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``GetReciprocal``: ``(shifted_scale Q0.31, num_bits_over_unit)`` per value.

    ``x`` must be positive int32 values.
    """
    x = np.asarray(x, dtype=np.int64)
    if x.size <= _SCALAR_MAX:
        pairs = [_get_reciprocal_scalar(v, x_integer_digits) for v in x.reshape(-1).tolist()]
        scale = np.array([p[0] for p in pairs], dtype=np.int64).reshape(x.shape)
        return scale, np.array([p[1] for p in pairs], dtype=np.int64).reshape(x.shape)
    ux = x & 0xFFFFFFFF
    # Count leading zeros of a uint32: frexp's exponent is the exact bit length.
    _, bit_length = np.frexp(ux.astype(np.float64))
    clz = 32 - bit_length.astype(np.int64)
    num_bits_over_unit = x_integer_digits - clz
    shifted_sum_minus_one = wrap_int32(((ux << clz) & 0xFFFFFFFF) - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one), num_bits_over_unit


# A few values (softmax over a handful of rows) are cheaper in Python integers than
# through ~40 numpy calls. The scalar functions below are the same arithmetic; the tests
# compare both forms.
_SCALAR_MAX = 16


def _wrap_s(x: int) -> int:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _mul_s(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    return (a * b + (1 << 30)) >> 31


def _saturating_left_shift_s(x: int, exponent: int) -> int:
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return _wrap_s(x << exponent)


def _one_over_one_plus_x_s(a: int) -> int:
    s = a + INT32_MAX
    v = s + (1 if s >= 0 else -1)
    half_denominator = v // 2 if v >= 0 else -((-v) // 2)
    x = _wrap_s(1515870810 + _mul_s(half_denominator, -1010580540))
    for _ in range(3):
        one_minus = _wrap_s((1 << 29) - _mul_s(half_denominator, x))
        x = _wrap_s(x + _saturating_left_shift_s(_mul_s(x, one_minus), 2))
    return _saturating_left_shift_s(x, 1)


def _get_reciprocal_scalar(x: int, x_integer_digits: int) -> tuple[int, int]:
    ux = x & 0xFFFFFFFF
    clz = 32 - ux.bit_length()
    shifted_sum_minus_one = _wrap_s(((ux << clz) & 0xFFFFFFFF) - (1 << 31))
    return _one_over_one_plus_x_s(shifted_sum_minus_one), x_integer_digits - clz
