"""int8 binary ops beyond ADD and MUL, as LiteRT's reference kernels compute them, with
numpy broadcasting (up to 6-D) and the 256 x 256 result tables of ``binary_table``.

* ``prelu``: ``reference_ops::BroadcastPrelu4DSlow`` (x >= 0: one multiplier; x < 0:
  ``x * alpha`` through a second). Also int16 (x, alpha and output symmetric int16, zero
  points 0; LiteRT has no int16 PRELU): the same arithmetic with int16 bounds
  (``|x * alpha| <= 2**30`` fits the int32 product); ``prelu_int16_per_channel``: the
  same with each output channel's own multipliers and shifts.
* ``squared_difference``: inputs scaled up by ``2**left_shift`` (7) to a common scale,
  subtracted, squared, rescaled.
* ``sub``: ADD's arithmetic with the rescaled inputs subtracted.
* ``maximum`` / ``minimum``: compare the bytes (inputs and output share one quantization).
* ``div``: ``reference_ops::Div`` (fixed-point reciprocal of the divisor, headroom shift).
  Its final right shift can reach 31 bits or more (undefined in C, garbage in LiteRT);
  the chip clamps it to 31. LiteRT leaves a divisor at its zero point undefined (a debug
  check); the chip gives ``act_max`` for a positive dividend, ``act_min`` for a negative
  one and the output zero point (clamped) for a zero one.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import InvalidCommand
from . import binary_table
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)
from .gemmlowp import get_reciprocal
from .int16x8 import INT16_MAX, INT16_MIN, channel_columns, check_zero_points, store_int16
from .output import broadcast_out_shape, check_act_range, check_int8_param, check_int_param, store_int8

__all__ = ["prelu", "prelu_int16_per_channel", "squared_difference", "sub", "maximum", "minimum", "div"]

Compute = Callable[..., np.ndarray]


def _prepare(a: np.ndarray, b: np.ndarray, out: np.ndarray | None,
             dtypes: tuple[type, ...] = (np.int8,)) -> tuple[int, ...]:
    for name, arr in (("input1", a), ("input2", b)):
        if arr.dtype not in dtypes or arr.dtype != a.dtype:
            raise TypeError(f"{name} must be {' or '.join(np.dtype(t).name for t in dtypes)} "
                            f"(both alike), got {arr.dtype}")
    return broadcast_out_shape(a, b, out, a.dtype.type)


def _run(key: tuple, compute: Compute, a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    shape = _prepare(a, b, out)
    table = binary_table.table_for(key, int(np.prod(shape, dtype=np.int64)), compute)
    if table is None:
        return compute(a, b, out)
    return binary_table.lookup(table, a, b, shape, out)


def _zps(*pairs: tuple[str, int]) -> list[int]:
    return [check_int8_param(name, v) for name, v in pairs]


def _shift(name: str, value: int, low: int = -31, high: int = 30) -> int:
    return check_int_param(name, value, low, high)


def prelu(x: np.ndarray, alpha: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
          output_multiplier_1: int, output_shift_1: int, output_multiplier_2: int,
          output_shift_2: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 PRELU of ``x`` with slopes ``alpha`` (``input1_zp``: x's zero point, ``input2_zp``: alpha's),
    or int16 PRELU when ``x`` is int16 (``alpha`` int16 too, every zero point 0)."""
    if x.dtype == np.int16:
        return _prelu_int16(x, alpha, zero_points=(input1_zp, input2_zp, output_zp),
                            multipliers=(output_multiplier_1, output_multiplier_2),
                            shifts=(output_shift_1, output_shift_2), out=out)
    zx, za, zo = _zps(("input1_zp", input1_zp), ("input2_zp", input2_zp), ("output_zp", output_zp))
    s1, s2 = _shift("output_shift_1", output_shift_1), _shift("output_shift_2", output_shift_2)
    m1, m2 = int(output_multiplier_1), int(output_multiplier_2)

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        xv = a.astype(np.int64) - zx
        pos = multiply_by_quantized_multiplier(xv, m1, s1)
        neg = multiply_by_quantized_multiplier(wrap_int32(xv * (b.astype(np.int64) - za)), m2, s2)
        return store_int8(np.where(xv >= 0, pos, neg), zo, -128, 127, out)

    return _run(("prelu", zx, za, zo, m1, s1, m2, s2), compute, x, alpha, out)


def _prelu_int16(x: np.ndarray, alpha: np.ndarray, *, zero_points: tuple[int, int, int],
                 multipliers: tuple, shifts: tuple, out: np.ndarray | None) -> np.ndarray:
    """int16 PRELU; the multipliers and shifts are ints or arrays along the output's last axis."""
    if alpha.dtype != np.int16:
        raise TypeError(f"input2 (alpha) must be int16 with an int16 input1, got {alpha.dtype}")
    check_zero_points(input1_zp=zero_points[0], input2_zp=zero_points[1], output_zp=zero_points[2])
    s1, s2 = (np.asarray(v, np.int64) for v in shifts)
    for name, v in (("output_shift_1", s1), ("output_shift_2", s2)):
        if np.any((v < -31) | (v > 30)):
            raise InvalidCommand(f"{name} must be in [-31, 30]")
    shape = broadcast_out_shape(x, alpha, out, np.int16)
    xv = np.broadcast_to(x.astype(np.int64), shape)
    pos = multiply_by_quantized_multiplier(xv, np.asarray(multipliers[0], np.int64), s1)
    neg = multiply_by_quantized_multiplier(xv * alpha.astype(np.int64), np.asarray(multipliers[1], np.int64), s2)
    return store_int16(np.where(xv >= 0, pos, neg), 0, INT16_MIN, INT16_MAX, out)


def prelu_int16_per_channel(x: np.ndarray, alpha: np.ndarray, *, params: np.ndarray, input1_zp: int = 0,
                            input2_zp: int = 0, output_zp: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """int16 PRELU whose output channel c (the last axis) uses ``params[c]``, int32
    ``[channels, 4]``: ``npu_hw.ops.PRELU16_CHANNEL_PARAMS`` (the int16 PRELU's arithmetic
    with that channel's multipliers and shifts)."""
    if x.dtype != np.int16:
        raise TypeError(f"input1 must be int16, got {x.dtype}")
    shape = broadcast_out_shape(x, alpha, out, np.int16)
    m1, s1, m2, s2 = channel_columns(params, shape[-1] if shape else 1, 4)
    return _prelu_int16(x, alpha, zero_points=(input1_zp, input2_zp, output_zp), multipliers=(m1, m2),
                        shifts=(s1, s2), out=out)


def _add_style(left_shift: int, max_left_shift: int, shifts: tuple[int, int, int],
               multipliers: tuple[int, int, int]) -> tuple[list[int], list[int]]:
    """ADD-style requantization (``spec.fixedpoint.add_params``): ``left_shift`` checked
    against ``[0, max_left_shift]``; the input1, input2 and output shifts (checked to be
    right shifts) and multipliers as ints."""
    if not 0 <= int(left_shift) <= max_left_shift:
        raise InvalidCommand(f"left_shift must be in [0, {max_left_shift}]")
    names = ("input1_shift", "input2_shift", "output_shift")
    return [_shift(n, v, -31, 0) for n, v in zip(names, shifts, strict=True)], [int(v) for v in multipliers]


def squared_difference(a: np.ndarray, b: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
                       left_shift: int, input1_multiplier: int, input1_shift: int,
                       input2_multiplier: int, input2_shift: int, output_multiplier: int,
                       output_shift: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 SQUARED_DIFFERENCE (parameters as LiteRT's Prepare derives them)."""
    z1, z2, zo = _zps(("input1_zp", input1_zp), ("input2_zp", input2_zp), ("output_zp", output_zp))
    sh, m = _add_style(left_shift, 15, (input1_shift, input2_shift, output_shift),
                       (input1_multiplier, input2_multiplier, output_multiplier))

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        v1 = multiply_by_quantized_multiplier((a.astype(np.int64) - z1) << int(left_shift), m[0], sh[0])
        v2 = multiply_by_quantized_multiplier((b.astype(np.int64) - z2) << int(left_shift), m[1], sh[1])
        diff = v1 - v2
        return store_int8(multiply_by_quantized_multiplier(wrap_int32(diff * diff), m[2], sh[2]), zo,
                          -128, 127, out)

    return _run(("squared_difference", z1, z2, zo, int(left_shift), *m, *sh), compute, a, b, out)


def sub(a: np.ndarray, b: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
        left_shift: int, input1_multiplier: int, input1_shift: int, input2_multiplier: int,
        input2_shift: int, output_multiplier: int, output_shift: int, act_min: int = -128,
        act_max: int = 127, out: np.ndarray | None = None) -> np.ndarray:
    """int8 SUB: ADD's parameters (``spec.fixedpoint.add_params``), inputs subtracted."""
    z1, z2, zo = _zps(("input1_zp", input1_zp), ("input2_zp", input2_zp), ("output_zp", output_zp))
    lo, hi = check_act_range(act_min, act_max)
    sh, m = _add_style(left_shift, 30, (input1_shift, input2_shift, output_shift),
                       (input1_multiplier, input2_multiplier, output_multiplier))

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        v1 = multiply_by_quantized_multiplier(wrap_int32((a.astype(np.int64) - z1) << int(left_shift)), m[0], sh[0])
        v2 = multiply_by_quantized_multiplier(wrap_int32((b.astype(np.int64) - z2) << int(left_shift)), m[1], sh[1])
        return store_int8(multiply_by_quantized_multiplier(wrap_int32(v1 - v2), m[2], sh[2]), zo, lo, hi, out)

    return _run(("sub", z1, z2, zo, int(left_shift), *m, *sh, lo, hi), compute, a, b, out)


def _compare(name: str, fn: Callable) -> Compute:
    def kernel(a: np.ndarray, b: np.ndarray, *, input1_zp: int = 0, input2_zp: int = 0, output_zp: int = 0,
               out: np.ndarray | None = None) -> np.ndarray:
        shape = _prepare(a, b, out, (np.int8, np.int16))
        if out is None:
            return np.ascontiguousarray(np.broadcast_to(fn(a, b), shape))
        fn(a, b, out=out)
        return out
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"int8 or int16 {name.upper()}: elementwise {name} of the values (one shared quantization)."
    return kernel


maximum = _compare("maximum", np.maximum)
minimum = _compare("minimum", np.minimum)


def _leading_sign_bits(v: np.ndarray) -> np.ndarray:
    """TFLite ``CountLeadingSignBits`` of int32 values."""
    u = np.where(v >= 0, v, ~v)
    _, bit_length = np.frexp(u.astype(np.float64))
    return 31 - bit_length.astype(np.int64)


def div(a: np.ndarray, b: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
        output_multiplier: int, output_shift: int, act_min: int = -128, act_max: int = 127,
        out: np.ndarray | None = None) -> np.ndarray:
    """int8 DIV; ``output_multiplier``/``output_shift`` encode ``in1 / (in2 * out)``."""
    z1, z2, zo = _zps(("input1_zp", input1_zp), ("input2_zp", input2_zp), ("output_zp", output_zp))
    lo, hi = check_act_range(act_min, act_max)
    shift = _shift("output_shift", output_shift)
    mult = int(output_multiplier)

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        v1, v2 = np.broadcast_arrays(a.astype(np.int64) - z1, b.astype(np.int64) - z2)
        sign = np.where(v2 < 0, -1, 1)
        v1, v2 = v1 * sign, v2 * sign
        safe = np.where(v2 == 0, 1, v2)
        inv, recip_shift = get_reciprocal(safe, 31)
        headroom = _leading_sign_bits(v1)
        quotient = saturating_rounding_doubling_high_mul(v1 << headroom, inv)
        total = shift - recip_shift - headroom
        raw = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(quotient, mult),
                                     np.clip(-total, 0, 31))
        raw = np.where(v2 == 0, np.where(v1 > 0, 1 << 20, np.where(v1 < 0, -(1 << 20), 0)), raw)
        return store_int8(raw, zo, lo, hi, out)

    return _run(("div", z1, z2, zo, mult, shift, lo, hi), compute, a, b, out)
