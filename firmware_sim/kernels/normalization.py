"""int8 row ops over the last axis.

* ``l2_normalization`` (``reference_integer_ops::L2Normalization``): output scale 1/128,
  zero point 0; ``x_i * invsqrt(sum x^2)`` in fixed point, the inverse square root by
  TFLite's Newton-Raphson ``GetInvSqrtQuantizedMultiplierExp``.
* ``log_softmax`` (``reference_integer_ops::LogSoftmax``): output scale 16/256, zero point
  127; gemmlowp's exp on Q5.26 differences, a Q12 sum and TFLite's fixed-point
  ``log_x_for_x_greater_than_or_equal_to_1``.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import INT32_MAX, INT32_MIN, multiply_by_quantized_multiplier, rounding_divide_by_pot, wrap_int32
from .gemmlowp import _one_over_one_plus_x_s, exp_on_negative_values_q5
from .output import check_int8_param, emit
from .unary import inv_sqrt_multiplier_exp

__all__ = ["l2_normalization", "log_softmax", "log_softmax_tables"]

_OUTPUT_SCALE_BITS = 7


def l2_normalization(x: np.ndarray, *, input_zp: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 L2_NORMALIZATION of ``x`` ([rows, depth] or any shape: over the last axis)."""
    if x.dtype != np.int8:
        raise TypeError(f"x must be int8, got {x.dtype}")
    if x.ndim < 1:
        raise InvalidCommand("l2 normalization needs at least one dimension")
    zp = check_int8_param("input_zp", input_zp)
    v = x.astype(np.int64) - zp
    acc = (v * v).sum(axis=-1)
    flat = acc.reshape(-1).tolist()
    pairs = [inv_sqrt_multiplier_exp(int(a)) for a in flat]
    mult = np.array([p[0] for p in pairs], np.int64).reshape(acc.shape)[..., None]
    shift = np.array([p[1] for p in pairs], np.int64).reshape(acc.shape)[..., None] + _OUTPUT_SCALE_BITS
    res = np.clip(multiply_by_quantized_multiplier(v, mult, shift), -128, 127).astype(np.int8)
    return emit(res, out)


# log_softmax -----------------------------------------------------------------------------------

_INPUT_INTEGER_BITS, _ACCUM_INTEGER_BITS, _OUTPUT_INTEGER_BITS = 5, 12, 4


def _mul(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul on Python ints."""
    if a == b == INT32_MIN:
        return INT32_MAX
    return (a * b + (1 << 30)) >> 31


def _wrap(x: int) -> int:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _sat(x: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, x))


def _mul_by_pot(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT(Param): saturating left shift, or rounding right shift."""
    if exponent == 0:
        return x
    if exponent < 0:
        return int(rounding_divide_by_pot(np.int64(x), -exponent))
    threshold = (1 << (31 - exponent)) - 1
    return INT32_MAX if x > threshold else INT32_MIN if x < -threshold else _wrap(x << exponent)


def _clz(x: int) -> int:
    return 32 - (x & 0xFFFFFFFF).bit_length()


def _log_q5(x_q12: int) -> int:
    """TFLite ``log_x_for_x_greater_than_or_equal_to_1<5>`` of a Q12.19 value; Q5.26 raw."""
    # log_x_for_x_greater_than_or_equal_to_1<OutputIntegerBits=5, InputIntegerBits=12>
    out_bits, in_bits = _INPUT_INTEGER_BITS, _ACCUM_INTEGER_BITS
    accum_bits = out_bits + 1
    log_2, sqrt_sqrt_half, sqrt_half, one_quarter = 1488522236, 1805811301, 1518500250, 536870912
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    shifted_quarter = _mul_by_pot(one_quarter, -accum_bits)
    z_a = x_q12
    z_a_headroom_plus_1 = _clz(z_a)
    r_a_tmp = _mul_by_pot(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = _mul_by_pot(_mul(r_a_tmp, sqrt_half), 1)
    z_a_pow_2_adj = _sat(_mul_by_pot(in_bits - z_a_headroom_plus_1, 31 - accum_bits) + shifted_quarter)
    z_b = _mul(z_a, sqrt_half)
    z_b_headroom = _clz(z_b) - 1
    r_b_raw = _mul_by_pot(z_a, z_b_headroom)
    z_b_pow_2_adj = _sat(_mul_by_pot(in_bits - z_b_headroom, 31 - accum_bits) - shifted_quarter)
    r = min(r_a_raw, r_b_raw)
    z_pow_2_adj = max(z_a_pow_2_adj, z_b_pow_2_adj)
    total = r + sqrt_sqrt_half                      # RoundingHalfSum
    p = (total + (1 if total >= 0 else -1))
    p = p // 2 if p >= 0 else -((-p) // 2)
    q = _wrap(r - sqrt_sqrt_half)
    q = _wrap(q + q)
    common_sq = _mul(q, q)
    num = _wrap(_mul(q, r) + _mul(_mul(q, common_sq), alpha_n))
    denom_minus_one_0 = _wrap(_mul(p, _wrap(_wrap(alpha_i + q) + _mul(alpha_d, common_sq))) + _mul(alpha_f, q))
    recip_denom = _one_over_one_plus_x_s(denom_minus_one_0)
    num_scaled = _mul_by_pot(num, -accum_bits)
    return _mul_by_pot(_wrap(_mul(z_pow_2_adj, log_2) + _mul(num_scaled, recip_denom)), accum_bits - out_bits)


def log_softmax_tables(input_multiplier: int, input_left_shift: int, diff_min: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`log_softmax`'s per-element values by an element's distance below its row's
    maximum (0..255): the scaled difference (Q5.26) and its exponential term (Q12; 0 under
    ``diff_min``), as int32 tables for the C kernel (``npu_log_softmax``)."""
    diff = -np.arange(256, dtype=np.int64)
    diff_q5 = multiply_by_quantized_multiplier(diff, input_multiplier, input_left_shift)
    terms = rounding_divide_by_pot(exp_on_negative_values_q5(diff_q5), _ACCUM_INTEGER_BITS)
    return diff_q5.astype(np.int32), np.where(diff >= diff_min, terms, 0).astype(np.int32)


def log_softmax(x: np.ndarray, *, input_multiplier: int, input_left_shift: int, reverse_scaling_divisor: int,
                reverse_scaling_right_shift: int, diff_min: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 LOG_SOFTMAX over the last axis; parameters as LiteRT's ``LogSoftmaxPrepare``
    (``PreprocessLogSoftmaxScalingExp`` with beta 1, ``CalculateInputRadius``)."""
    if x.dtype != np.int8:
        raise TypeError(f"x must be int8, got {x.dtype}")
    if x.ndim < 1:
        raise InvalidCommand("log softmax needs at least one dimension")
    if not 0 <= int(input_left_shift) <= 30 or not 0 <= int(reverse_scaling_right_shift) <= 31:
        raise InvalidCommand("log softmax shifts out of range")
    diff = x.astype(np.int64) - x.max(axis=-1, keepdims=True)
    diff_q5 = multiply_by_quantized_multiplier(diff, input_multiplier, input_left_shift)
    terms = rounding_divide_by_pot(exp_on_negative_values_q5(diff_q5), _ACCUM_INTEGER_BITS)
    sums = wrap_int32(np.where(diff >= diff_min, terms, 0).sum(axis=-1))
    logs = np.array([_log_q5(int(v)) for v in sums.reshape(-1).tolist()], np.int64).reshape(sums.shape)[..., None]
    adjusted = np.maximum(int(diff_min) - 1, multiply_by_quantized_multiplier(
        wrap_int32(logs + INT32_MIN), reverse_scaling_divisor, -int(reverse_scaling_right_shift)))
    shift = 31 - _INPUT_INTEGER_BITS - _OUTPUT_INTEGER_BITS
    res = np.clip(rounding_divide_by_pot(wrap_int32(diff_q5 - logs), shift) + 127, -128, 127)
    return emit(np.where(diff > adjusted, res, -128).astype(np.int8), out)
