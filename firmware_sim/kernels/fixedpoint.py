"""Vectorized requantization arithmetic of TFLite's reference kernels.

All integer functions take and return numpy int64 arrays holding int32 values (int64
leaves room for the intermediate products).

Which rounding LiteRT uses depends on the op (measured in ``tests/kernels`` against
``ai-edge-litert`` 2.3.0 BUILTIN_REF, and read in its source):

* Most int8 ops call ``MultiplyByQuantizedMultiplier``. The pip wheels are built with the
  default ``TFLITE_SINGLE_ROUNDING=0``: gemmlowp's double rounding, here
  :func:`multiply_by_quantized_multiplier`. The single-rounding build is
  :func:`multiply_by_quantized_multiplier_single_round`.
* The fully connected reference kernel (since April 2025) requantizes in double:
  ``round(double(acc) * (in_scale * filter_scale / out_scale))``, ties away from zero;
  here :func:`requantize_double`. :func:`multiply_by_quantized_multiplier_round_away` is
  its closest fixed-point form (one rounding of the 64-bit product, ties away from zero).
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand

__all__ = [
    "quantize_quotient",
    "INT32_MIN",
    "INT32_MAX",
    "wrap_int32",
    "saturating_rounding_doubling_high_mul",
    "rounding_divide_by_pot",
    "multiply_by_quantized_multiplier",
    "requantize_fixed_inplace",
    "F64Requant",
    "multiply_by_quantized_multiplier_single_round",
    "multiply_by_quantized_multiplier_round_away",
    "round_half_away",
    "requantize_double",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _i64(a: np.ndarray | int) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Wrap int64 values to int32 two's complement, as int32 arithmetic does on real hardware."""
    x = _i64(x)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: round(a * b / 2**31), saturated.

    gemmlowp computes ``trunc((a*b + nudge) / 2**31)`` with ``nudge = 2**30`` for a
    non-negative product and ``1 - 2**30`` otherwise; for a negative product that
    truncation equals ``floor((a*b + 2**30) / 2**31)``, so one formula covers both signs.
    The only overflow case, ``a == b == INT32_MIN``, returns ``INT32_MAX``.
    """
    a, b = _i64(a), _i64(b)
    ab = a * b  # |a*b| <= 2**62: exact in int64
    ab += 1 << 30
    ab >>= 31
    if np.any(a == INT32_MIN) and np.any(b == INT32_MIN):
        ab = np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, ab)
    return ab


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: x / 2**exponent rounded half away from zero.

    gemmlowp adds one when the remainder exceeds ``mask/2`` (+1 for negative x); that is
    ``(x + 2**(e-1) - [x < 0]) >> e`` for e > 0, and x itself for e = 0.
    """
    x, exponent = _i64(x), _i64(exponent)
    if np.any((exponent < 0) | (exponent > 31)):
        raise InvalidCommand("rounding_divide_by_pot exponent must be in [0, 31]")
    r = x + ((np.int64(1) << exponent) >> 1)
    negative = x < 0
    if exponent.ndim == 0:
        if exponent > 0:
            r -= negative
    else:
        r -= negative & (exponent > 0)
    r >>= exponent
    return r


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray,
                                     shift: np.ndarray) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier``, default build (double rounding).

    ``x`` int32 values; ``multiplier``/``shift`` broadcast against ``x`` (per-channel
    arrays along the last axis work as they are). Positive shift = left shift, which
    wraps in int32 like the C code does on x86. ``shift`` must be in [-31, 30].
    """
    x, multiplier, shift = _i64(x), _i64(multiplier), _i64(shift)
    _check_shift(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(x << left) if np.any(left) else x
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def requantize_fixed_inplace(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                             addend: int = 0) -> np.ndarray:
    """``multiply_by_quantized_multiplier(x, multiplier, shift) + addend`` in fewer passes.

    ``x`` must be an int64 array of int32 values; it is overwritten and returned. The two
    roundings fold into one shift (``floor(floor(a / 2**31) / 2**e) = floor(a / 2**(31+e))``):
    ``(x*m + 2**30 + c * 2**31) >> (31 + e)`` with ``c = 2**(e-1) - [x*m < -2**30]`` for
    e > 0 and ``c = 0`` for e = 0; ``addend * 2**(31+e)`` joins the constant when that
    cannot overflow. Falls back to the step-by-step form for left shifts and the
    INT32_MIN * INT32_MIN saturation case.
    """
    multiplier, shift = _i64(multiplier), _i64(shift)
    _check_shift(shift)
    if np.any(shift > 0) or np.any(multiplier == INT32_MIN) or multiplier.ndim > 1:
        return multiply_by_quantized_multiplier(x, multiplier, shift) + addend
    right = -shift
    total = 31 + right
    const = (1 << 30) + (((np.int64(1) << right) >> 1) << 31)
    fold = int(np.max(total)) + 8 < 62
    if fold:
        const = const + (np.int64(addend) << total)
    x *= multiplier  # |x * m| < 2**62
    negative = x < -(1 << 30)
    if right.ndim == 0:
        if right == 0:
            negative = None
    elif np.any(right == 0):
        negative &= right > 0
    x += const
    if negative is not None:
        x -= np.left_shift(negative, 31, dtype=np.int64)
    x >>= total
    if not fold and addend:
        x += addend
    return x


class F64Requant:
    """``multiply_by_quantized_multiplier(acc + bias, m, shift) + addend`` in float64, with
    bias, rounding terms and addend folded into one per-channel constant.

    ``(acc + b) * m + 2**30 + c * 2**31 + addend * 2**T`` floored by ``2**T`` (``T = 31 +
    e``, ``c = 2**(e-1) - [(acc + b) * m < -2**30]``, see ``requantize_fixed_inplace``).
    Exact while every intermediate is an integer below 2**53, which holds for
    ``|acc| <= self.limit`` (0 when the parameters never allow it: left shifts, negative
    multipliers, huge constants).
    """

    def __init__(self, multiplier: np.ndarray, shift: np.ndarray, bias: np.ndarray | None,
                 addend: int = 0):
        m, sh = _i64(multiplier).reshape(-1), _i64(shift).reshape(-1)
        self.limit = 0.0
        self._tiles: dict[int, tuple[np.ndarray, ...]] = {}
        if np.any(sh > 0) or np.any(m < 0) or np.any(sh < -31):
            return
        right = -sh
        total = 31 + right
        half = np.where(right > 0, np.exp2(right - 1.0), 0.0)
        b = np.zeros(1) if bias is None else _i64(bias).astype(np.float64)
        mf = m.astype(np.float64)
        # Fold the addend in only while it stays small; otherwise add it after the floor.
        folded = abs(addend) * float(np.max(np.exp2(total))) < 2.0 ** 50
        self.late_addend = 0 if folded else int(addend)
        fold = float(addend) * np.exp2(total) if folded else np.zeros(1)
        base = 2.0 ** 30 + half * 2.0 ** 31
        if max(float(np.max(np.abs(b) * mf)), float(np.max(base))) >= 2.0 ** 51:
            return
        const = b * mf + base + fold
        room = 2.0 ** 53 - float(np.max(np.abs(const))) - 2.0 ** 32
        self.limit = min(max(0.0, room / max(1.0, float(np.max(mf)))), 2.0 ** 31 - 1)
        self.m, self.const = mf, const
        # (acc + b) * m < -2**30  <=>  folded value < threshold; never for e == 0 channels.
        self.threshold = np.where(right > 0, half * 2.0 ** 31 + fold, -np.inf)
        self.scale = np.exp2(-total.astype(np.float64))
        # The same arithmetic pre-scaled by 2**-T: every intermediate is an integer below
        # 2**53 times a power of two, so each step stays exact and one pass is saved.
        self._m_s, self._const_s = self.m * self.scale, self.const * self.scale
        self._threshold_s, self._step_s = self.threshold * self.scale, 2.0 ** 31 * self.scale

    _TILE_ELEMS = 2048

    def apply(self, acc: np.ndarray) -> np.ndarray:
        """Integral float64 results for accumulators (float32/float64) with ``|acc| <=
        limit``; broadcasts the per-channel constants along the last axis."""
        x = acc.astype(np.float64, order="C")   # C order: the regrouping below is a view
        consts = (self._m_s, self._const_s, self._threshold_s, self._step_s)
        c = self._m_s.size
        view = x
        if 1 < c < self._TILE_ELEMS // 2 and x.ndim and x.shape[-1] == c:
            # Per-channel constants broadcast along a short last axis make each pass loop
            # over C elements at a time; regroup k rows (k a power of two dividing the row
            # count) against constants tiled k times for one long inner loop.
            rows = x.size // c
            k = min(rows & -rows, 1 << ((self._TILE_ELEMS // c).bit_length() - 1))
            if k > 1:
                view = x.reshape(rows // k, k * c)
                consts = self._tiled(k)
        m_s, const_s, threshold_s, step_s = consts
        view *= m_s
        view += const_s
        view -= (view < threshold_s) * step_s
        np.floor(x, out=x)
        if self.late_addend:
            x += self.late_addend
        return x

    def _tiled(self, k: int) -> tuple[np.ndarray, ...]:
        tiles = self._tiles.get(k)
        if tiles is None:
            tiles = self._tiles[k] = tuple(
                np.tile(np.broadcast_to(v, self._m_s.shape), k)
                for v in (self._m_s, self._const_s, self._threshold_s, self._step_s))
        return tiles


def _check_shift(shift: np.ndarray) -> None:
    if np.any((shift < -31) | (shift > 30)):
        raise InvalidCommand("requantization shift must be in [-31, 30]")


def multiply_by_quantized_multiplier_single_round(x: np.ndarray, multiplier: np.ndarray,
                                                  shift: np.ndarray) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` of ``TFLITE_SINGLE_ROUNDING`` builds.

    ``(x * m + 2**(t-1)) >> t`` with ``t = 31 - shift``: ties toward +inf.
    """
    x, multiplier, shift = _i64(x), _i64(multiplier), _i64(shift)
    _check_shift(shift)
    total = 31 - shift
    # |x * multiplier| < 2**62 and the rounding term is <= 2**61: no int64 overflow.
    return wrap_int32((x * multiplier + (np.int64(1) << (total - 1))) >> total)


def multiply_by_quantized_multiplier_round_away(x: np.ndarray, multiplier: np.ndarray,
                                                shift: np.ndarray) -> np.ndarray:
    """One rounding of ``x * m / 2**(31 - shift)``, ties away from zero.

    The fixed-point counterpart of :func:`requantize_double`; it can differ from it only
    when the exact product lies within ~2**-31 (relative) of a half-integer.
    """
    x, multiplier, shift = _i64(x), _i64(multiplier), _i64(shift)
    _check_shift(shift)
    total = 31 - shift
    p = x * multiplier
    half = np.int64(1) << (total - 1)
    mag = (np.abs(p) + half) >> total
    return wrap_int32(np.where(p < 0, -mag, mag))


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C ``round()`` on doubles: nearest integer, ties away from zero (exact, unlike v+0.5)."""
    a = np.abs(v)
    r = np.floor(a)
    r += (a - r) >= 0.5  # a - r is exact for |a| < 2**52
    return np.copysign(r, v)


def quantize_quotient(x: np.ndarray, scale: float) -> np.ndarray:
    """float32 ``x`` -> ``round(x / scale)`` (the division in float32, ties away from zero)
    as int64 values of int32; quotients that leave int32, and NaN, become INT32_MIN as
    x86's conversion gives. QUANTIZE adds the zero point and clamps."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = round_half_away(x / np.float32(scale))
        bad = ~((q >= -2.0 ** 31) & (q < 2.0 ** 31))
        return np.where(bad, INT32_MIN, q).astype(np.int64)


def requantize_double(acc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """LiteRT's fully connected reference requantization: ``(int32)round(acc * scale)``.

    ``acc`` int32 values, ``scale`` float64 effective scales broadcast along the last axis.
    A result outside int32 becomes INT32_MIN, as x86's double-to-int conversion does.
    """
    v = round_half_away(np.asarray(acc, dtype=np.float64) * np.asarray(scale, dtype=np.float64))
    out_of_range = (v < INT32_MIN) | (v > INT32_MAX)
    if np.any(out_of_range):
        v = np.where(out_of_range, INT32_MIN, v)
    return v.astype(np.int64)
