"""int8 reductions over any axes: sum (LiteRT's reference arithmetic), max, min, and the
L2 norm (no LiteRT kernel: the formula is the chip's own, docs/hardware.md; also on int16).

SUM is LiteRT's integer arithmetic (the sum of ``x - input_zp`` in int32, requantized by
MultiplyByQuantizedMultiplier, plus the output zero point, saturated) on int8 values;
LiteRT 2.3's reference kernel reads and writes the int8 bytes as uint8 (docs/hardware.md),
which the chip does not copy. MAX and MIN need one quantization in and out and pick a value.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .output import check_int8_param, emit, store_int8

__all__ = ["reduce_sum", "reduce_max", "reduce_min", "reduce_l2", "index_of_max", "index_of_min"]


def _axes(x: np.ndarray, axes, dtypes=(np.int8,)) -> tuple[int, ...]:
    if x.dtype not in dtypes:
        raise InvalidCommand(f"reduce input must be {' or '.join(np.dtype(d).name for d in dtypes)}, got {x.dtype}")
    result = tuple(sorted({int(a) % x.ndim for a in axes})) if x.ndim else ()
    if not result:
        raise InvalidCommand("a reduction needs at least one axis")
    if any(x.shape[a] == 0 for a in result):
        raise InvalidCommand("reduction over an empty axis")
    return result


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's ``round`` in ``v``'s own precision (``v - trunc(v)`` is exact)."""
    t = np.trunc(v)
    return t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0).astype(v.dtype)


def reduce_sum(x: np.ndarray, axes, *, input_zp: int, output_zp: int, multiplier: int, shift: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 SUM over ``axes`` (kept as size 1): ``sum(x - input_zp)`` requantized by
    ``multiplier``/``shift`` (``spec.fixedpoint.rescale_multiplier``), clamped to int8."""
    axes = _axes(x, axes)
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.sum(axis=axes, keepdims=True, dtype=np.int64) - check_int8_param("input_zp", input_zp) * count
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("shift must be in [-31, 30]")
    raw = multiply_by_quantized_multiplier(wrap_int32(total), int(multiplier), int(shift))
    return store_int8(raw, check_int8_param("output_zp", output_zp), -128, 127, out)


def reduce_max(x: np.ndarray, axes, *, out: np.ndarray | None = None) -> np.ndarray:
    """int8 REDUCE_MAX over ``axes`` (kept as size 1)."""
    return emit(x.max(axis=_axes(x, axes), keepdims=True), out)


def reduce_min(x: np.ndarray, axes, *, out: np.ndarray | None = None) -> np.ndarray:
    """int8 REDUCE_MIN over ``axes`` (kept as size 1)."""
    return emit(x.min(axis=_axes(x, axes), keepdims=True), out)


def reduce_l2(x: np.ndarray, axes, *, input_zp: int, output_zp: int, scale: float,
              out: np.ndarray | None = None) -> np.ndarray:
    """L2 norm over ``axes``: ``clamp(output_zp + round_half_away(sqrt(acc) * scale))``
    with ``acc = sum((x - input_zp)^2)`` exact and ``sqrt``, ``*`` in float64; int8, or
    int16 (symmetric: both zero points 0) in and out."""
    axes = _axes(x, axes, (np.int8, np.int16))
    if x.dtype == np.int16:
        if input_zp or output_zp:
            raise InvalidCommand(f"int16 L2 norm: zero points must be 0, got {input_zp}, {output_zp}")
        lo, hi = -(1 << 15), (1 << 15) - 1
    else:
        input_zp, output_zp = check_int8_param("input_zp", input_zp), check_int8_param("output_zp", output_zp)
        lo, hi = -128, 127
    d = x.astype(np.int64) - input_zp
    acc = (d * d).sum(axis=axes, keepdims=True)   # int16: 2^30 per term, 2^33 terms before int64 wraps
    val = np.sqrt(acc.astype(np.float64)) * np.float64(scale)
    q = np.clip(_round_half_away(val) + output_zp, lo, hi)
    return emit(q.astype(x.dtype), out)


def _arg(x: np.ndarray, axis: int, pick, out: np.ndarray | None, dtype) -> np.ndarray:
    if x.dtype != np.int8 or not 0 <= int(axis) < x.ndim or x.shape[int(axis)] == 0:
        raise InvalidCommand(f"arg index: int8 input with a non-empty axis needed, got {x.dtype} {x.shape} "
                             f"axis {axis}")
    return emit(pick(x, axis=int(axis)).astype(dtype), out)


def index_of_max(x: np.ndarray, axis: int, *, dtype=np.int32, out: np.ndarray | None = None) -> np.ndarray:
    """The first index of the largest value along ``axis`` (the axis dropped)."""
    return _arg(x, axis, np.argmax, out, dtype)


def index_of_min(x: np.ndarray, axis: int, *, dtype=np.int32, out: np.ndarray | None = None) -> np.ndarray:
    """The first index of the smallest value along ``axis`` (the axis dropped)."""
    return _arg(x, axis, np.argmin, out, dtype)
