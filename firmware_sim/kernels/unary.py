"""int8 unary ops whose LiteRT kernel is an integer formula of one input byte.

Each result depends only on the input byte and the op's parameters, so a kernel computes
its formula once on all 256 bytes (with LiteRT's exact int32/int16 arithmetic) and then
looks every element up in that table; tables are kept per parameter set.

* ``hard_swish``: ``reference_ops::HardSwish`` (int16 fixed point, ``x * relu6(x+3) / 6``).
  Also on int16 activations (ours: LiteRT has no int16 HARD_SWISH; docs/hardware.md):
  a Q15 "reluish" factor, the int32 product ``x * reluish``, one requantization.
* ``leaky_relu``: ``QuantizeLeakyRelu`` (one multiplier for x >= 0, one for x < 0).
* ``rsqrt``: int8 ``RsqrtEvalQuantizedInt8`` (Newton-Raphson ``GetInvSqrtQuantizedMultiplierExp``);
  an input at the zero point gives 127, as LiteRT's does. LiteRT fails the whole
  invocation on an input below the zero point; the chip computes it as the zero point.
* ``abs_``: ``AbsEvalQuantized`` (``|x - zp|``, rescaled when the scales differ).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from firmware_sim import caches

from ..errors import InvalidCommand
from .activations import lut_lookup
from .fixedpoint import multiply_by_quantized_multiplier, rounding_divide_by_pot
from .int16x8 import INT16_MAX, INT16_MIN, check_zero_points, store_int16
from .output import check_int8_param

__all__ = ["hard_swish", "leaky_relu", "rsqrt", "abs_", "table_of", "clear", "inv_sqrt_multiplier_exp"]

_BYTES = np.arange(-128, 128, dtype=np.int64)   # every int8 value, in order
_tables: OrderedDict[Hashable, np.ndarray] = OrderedDict()
_lock = threading.Lock()
MAX_TABLES = 1024


def table_of(key: Hashable, formula: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The int8[256] table (indexed by uint8(x)) of ``formula`` for parameter set ``key``.

    ``formula`` maps int64 values -128..127 to int32 results, clamped here to int8."""
    with _lock:
        table = _tables.get(key)
        if table is not None:
            _tables.move_to_end(key)
            return table
    values = np.clip(formula(_BYTES.copy()), -128, 127).astype(np.int8)
    table = np.empty(256, np.int8)
    table[_BYTES.astype(np.int8).view(np.uint8)] = values
    table.flags.writeable = False
    with _lock:
        _tables[key] = table
        while len(_tables) > MAX_TABLES:
            _tables.popitem(last=False)
    return table


def clear() -> None:
    """Forget every table."""
    with _lock:
        _tables.clear()


caches.register("unary_tables", "int8 unary-op tables by parameters (contents only: never "
                "invalidated)", None, clear, entries=lambda: len(_tables))


def _check(x: np.ndarray) -> None:
    if x.dtype != np.int8:
        raise TypeError(f"x must be int8, got {x.dtype}")


def _shift(name: str, value: int, low: int = -31, high: int = 30) -> int:
    v = int(value)
    if not low <= v <= high:
        raise InvalidCommand(f"{name} must be in [{low}, {high}], got {value}")
    return v


# int16 gemmlowp arithmetic (HARD_SWISH) -----------------------------------------------

_I16_MIN, _I16_MAX = -(1 << 15), (1 << 15) - 1


def _wrap16(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 15)) & 0xFFFF) - (1 << 15)


def _trunc_div(a: np.ndarray, d: int) -> np.ndarray:
    """C integer division (toward zero)."""
    q = np.abs(a) // d
    return np.where(a < 0, -q, q)


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16."""
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    r = _wrap16(_trunc_div(ab + nudge, 1 << 15))
    return np.where((a == _I16_MIN) & (b == _I16_MIN), _I16_MAX, r)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite's non-rounding ``SaturatingDoublingHighMul`` on int16."""
    r = _wrap16(_trunc_div(a * b, 1 << 15))
    return np.where((a == _I16_MIN) & (b == _I16_MIN), _I16_MAX, r)


def _saturating_left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    return np.clip(x * (1 << amount), _I16_MIN, _I16_MAX)


def hard_swish(x: np.ndarray, *, input_zp: int, output_zp: int, output_multiplier: int,
               output_shift: int, reluish_multiplier: int, reluish_shift: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 HARD_SWISH; multipliers are int16 fixed point (the compiler derives them as LiteRT's HardSwishPrepare).

    int16 ``x``: :func:`hard_swish_int16` (Q31 multipliers, zero points 0)."""
    if x.dtype == np.int16:
        check_zero_points(input_zp=input_zp, output_zp=output_zp)
        return hard_swish_int16(x, output_multiplier=output_multiplier, output_shift=output_shift,
                                reluish_multiplier=reluish_multiplier, reluish_shift=reluish_shift, out=out)
    _check(x)
    input_zp, output_zp = check_int8_param("input_zp", input_zp), check_int8_param("output_zp", output_zp)
    out_shift = _shift("output_shift", output_shift, -15, 0)
    rel_shift = _shift("reluish_shift", reluish_shift, -15, 15)
    out_mult, rel_mult = int(output_multiplier), int(reluish_multiplier)
    if not (0 <= out_mult <= _I16_MAX and 0 <= rel_mult <= _I16_MAX):
        raise InvalidCommand("HARD_SWISH multipliers must be int16 fixed point in [0, 32767]")

    def formula(v: np.ndarray) -> np.ndarray:
        hires = _wrap16(_wrap16(v - input_zp) * (1 << 7))
        preshift_out = _srdhm16(hires, out_mult)
        reluish = hires
        if rel_shift > 0:
            reluish = _saturating_left_shift16(reluish, rel_shift - 1)
        reluish = _srdhm16(reluish, rel_mult)
        if rel_shift > 0:
            reluish = _saturating_left_shift16(reluish, 1)
        if rel_shift < 0:
            reluish = rounding_divide_by_pot(reluish, -rel_shift)
        reluish = (reluish + (1 << 15)) >> 1
        preshift = _sdhm16(reluish, preshift_out)
        return _wrap16(rounding_divide_by_pot(preshift, -out_shift) + output_zp)

    key = ("hard_swish", input_zp, output_zp, out_mult, out_shift, rel_mult, rel_shift)
    return lut_lookup(x, table_of(key, formula), out)


#: The int16 HARD_SWISH's reluish factor ``relu6(x + 3) / 6`` is Q15: 1.0 is 2**15.
HARD_SWISH_INT16_ONE = 1 << 15


def hard_swish_int16(x: np.ndarray, *, output_multiplier: int, output_shift: int, reluish_multiplier: int,
                     reluish_shift: int, out: np.ndarray | None = None) -> np.ndarray:
    """int16 HARD_SWISH (symmetric, zero points 0): ``reluish = clamp(MBQM(x, reluish) + 2**14,
    0, 2**15)`` (Q15 of ``relu6(x + 3) / 6``), then ``clamp(MBQM(x * reluish, output))`` to
    int16. ``(reluish_multiplier, reluish_shift)`` quantize ``in_scale * 2**15 / 6``,
    ``(output_multiplier, output_shift)`` ``in_scale / (out_scale * 2**15)``; Q31, as
    ``spec.fixedpoint.quantize_multiplier`` gives them."""
    if x.dtype != np.int16 or out is not None and (out.dtype != np.int16 or out.shape != x.shape):
        raise InvalidCommand(f"x must be int16 and out int16 {x.shape}")
    rel_shift = _shift("reluish_shift", reluish_shift, -31, 15)   # |x| << 15 fits int32
    out_shift = _shift("output_shift", output_shift, -31, 0)      # |x * reluish| <= 2**30
    rel_mult, out_mult = int(reluish_multiplier), int(output_multiplier)
    if not (0 <= rel_mult < 1 << 31 and 0 <= out_mult < 1 << 31):
        raise InvalidCommand("HARD_SWISH int16 multipliers must be Q31 in [0, 2**31)")
    xv = x.astype(np.int64)
    half = HARD_SWISH_INT16_ONE // 2
    reluish = np.clip(multiply_by_quantized_multiplier(xv, rel_mult, rel_shift) + half, 0, HARD_SWISH_INT16_ONE)
    scaled = multiply_by_quantized_multiplier(xv * reluish, out_mult, out_shift)
    return store_int16(scaled, 0, INT16_MIN, INT16_MAX, out)


def leaky_relu(x: np.ndarray, *, input_zp: int, output_zp: int, multiplier_identity: int,
               shift_identity: int, multiplier_alpha: int, shift_alpha: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 LEAKY_RELU: ``out_zp + requant(x - in_zp)`` with the identity multiplier for
    ``x >= in_zp`` and the alpha one below (a negative alpha multiplier negates); int16
    when ``x`` is int16 (zero points 0, LiteRT's ``QuantizeLeakyRelu`` on int16, computed)."""
    s_id, s_al = _shift("shift_identity", shift_identity), _shift("shift_alpha", shift_alpha)
    m_id, m_al = int(multiplier_identity), int(multiplier_alpha)
    if x.dtype == np.int16:
        if input_zp or output_zp:
            raise InvalidCommand("int16 LEAKY_RELU takes zero points 0")
        d = x.astype(np.int64)
        pos = multiply_by_quantized_multiplier(d, m_id, s_id)
        neg = multiply_by_quantized_multiplier(d, abs(m_al), s_al)
        result = np.clip(np.where(d >= 0, pos, -neg if m_al < 0 else neg), INT16_MIN, INT16_MAX).astype(np.int16)
        if out is None:
            return result
        out[...] = result
        return out
    _check(x)
    input_zp, output_zp = check_int8_param("input_zp", input_zp), check_int8_param("output_zp", output_zp)

    def formula(v: np.ndarray) -> np.ndarray:
        d = v - input_zp
        pos = multiply_by_quantized_multiplier(d, m_id, s_id)
        neg = multiply_by_quantized_multiplier(d, abs(m_al), s_al)
        return output_zp + np.where(d >= 0, pos, -neg if m_al < 0 else neg)

    key = ("leaky_relu", input_zp, output_zp, m_id, s_id, m_al, s_al)
    return lut_lookup(x, table_of(key, formula), out)


def inv_sqrt_multiplier_exp(value: int) -> tuple[int, int]:
    """TFLite ``GetInvSqrtQuantizedMultiplierExp(value, kReverseShift)`` for value > 0."""
    int32_max, int32_min = (1 << 31) - 1, -(1 << 31)

    def mul(a: int, b: int) -> int:            # SaturatingRoundingDoublingHighMul
        if a == b == int32_min:
            return int32_max
        ab = a * b
        q = (abs(ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30)))) >> 31
        return q if ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30)) >= 0 else -q

    def sat_shift(a: int, exponent: int) -> int:  # SaturatingRoundingMultiplyByPOT, exponent > 0
        return max(int32_min, min(int32_max, a << exponent))

    if value <= 1:
        return int32_max, 0
    shift = 11
    while value >= (1 << 29):
        value //= 4
        shift += 1
    clz = 32 - value.bit_length()
    pairs = (clz - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    x_in = value >> 1
    half_input = int(rounding_divide_by_pot(np.int64(x_in), 1))
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28
    for _ in range(5):
        x3 = sat_shift(mul(mul(x, x), x), 6)
        x = sat_shift(mul(half_three, x) - mul(half_input, x3), 3)
    x = mul(x, 1518500250)
    if shift < 0:
        x = ((x << -shift) + (1 << 31)) % (1 << 32) - (1 << 31)
        shift = 0
    return x, -shift


def rsqrt(x: np.ndarray, *, input_zp: int, output_zp: int, multiplier: int, shift: int,
          out: np.ndarray | None = None) -> np.ndarray:
    """int8 RSQRT; ``multiplier``/``shift`` encode ``1 / (sqrt(in_scale) * out_scale)``."""
    _check(x)
    input_zp, output_zp = check_int8_param("input_zp", input_zp), check_int8_param("output_zp", output_zp)
    shift = _shift("shift", shift, -11, 30)
    k_shift = 20

    def formula(v: np.ndarray) -> np.ndarray:
        d = np.maximum(v - input_zp, 0)
        pairs = [inv_sqrt_multiplier_exp(int(value)) for value in d.tolist()]
        inv = np.array([p[0] for p in pairs], np.int64)
        inv_shift = np.array([p[1] for p in pairs], np.int64)
        data = multiply_by_quantized_multiplier(np.ones_like(d), inv, inv_shift + k_shift)
        res = multiply_by_quantized_multiplier(data, multiplier, shift - k_shift) + output_zp
        return np.where(d == 0, 127, res)

    key = ("rsqrt", input_zp, output_zp, int(multiplier), shift)
    return lut_lookup(x, table_of(key, formula), out)


def abs_(x: np.ndarray, *, input_zp: int, output_zp: int, rescale: int, multiplier: int, shift: int,
         out: np.ndarray | None = None) -> np.ndarray:
    """int8 ABS: ``out_zp + |x - in_zp|``, through ``multiplier``/``shift`` when ``rescale``;
    int16 when ``x`` is int16 (zero points 0, LiteRT's ``AbsEvalQuantized`` on int16, computed:
    ``|x|`` requantized likewise, saturated to int16)."""
    shift = _shift("shift", shift)
    if x.dtype == np.int16:
        if input_zp or output_zp:
            raise InvalidCommand("int16 ABS takes zero points 0")
        d = np.abs(x.astype(np.int64))
        scaled = multiply_by_quantized_multiplier(d, int(multiplier), shift) if rescale else d
        result = np.clip(scaled, INT16_MIN, INT16_MAX).astype(np.int16)
        if out is None:
            return result
        out[...] = result
        return out
    _check(x)
    input_zp, output_zp = check_int8_param("input_zp", input_zp), check_int8_param("output_zp", output_zp)

    def formula(v: np.ndarray) -> np.ndarray:
        d = np.abs(v - input_zp)
        return output_zp + (multiply_by_quantized_multiplier(d, multiplier, shift) if rescale else d)

    key = ("abs", input_zp, output_zp, bool(rescale), int(multiplier), shift)
    return lut_lookup(x, table_of(key, formula), out)
