"""Data-movement ops on int8 (or int16) tensors: CONCATENATION, RESHAPE, TRANSPOSE, PAD, STRIDED_SLICE.

They never change values (TFLite's int8 CONCATENATION requires every input to share the
output's scale and zero point), so each is a numpy copy into the output.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidCommand
from .int16x8 import check_int16_param
from .output import check_int8_param, emit

__all__ = ["concat", "reshape", "transpose", "pad", "strided_slice", "strided_slice_view", "strided_slice_shape",
           "gather"]



def concat(inputs: Sequence[np.ndarray], axis: int, out: np.ndarray | None = None) -> np.ndarray:
    """Concatenate along ``axis`` (negative counts from the end)."""
    if not inputs:
        raise InvalidCommand("concat needs at least one input")
    try:
        res = np.concatenate(list(inputs), axis=axis)
    except (ValueError, np.exceptions.AxisError) as exc:
        raise InvalidCommand(f"cannot concatenate: {exc}") from None
    return emit(res, out)


def reshape(x: np.ndarray, shape: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
    """Same bytes, new shape (element counts must match)."""
    shape = tuple(int(d) for d in shape)
    if int(np.prod(shape)) != x.size:
        raise InvalidCommand(f"cannot reshape {x.shape} into {shape}")
    return emit(x.reshape(shape), out)


def transpose(x: np.ndarray, perm: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
    """Permute axes: output axis i is input axis ``perm[i]``."""
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise InvalidCommand(f"perm {perm} is not a permutation of {x.ndim} axes")
    return emit(x.transpose(perm), out)


def pad(x: np.ndarray, paddings: Sequence[Sequence[int]], pad_value: int,
        out: np.ndarray | None = None) -> np.ndarray:
    """Constant padding: ``paddings[i] = (before, after)``; ``pad_value`` is the quantized
    value to fill with (the output zero point for PAD, the given constant for PADV2)."""
    pads = [(int(a), int(b)) for a, b in paddings]
    if len(pads) != x.ndim or any(a < 0 or b < 0 for a, b in pads):
        raise InvalidCommand(f"paddings {paddings} do not fit rank {x.ndim} or are negative")
    if x.dtype == np.int16:
        fill = check_int16_param("pad_value", pad_value)
    else:
        fill = check_int8_param("pad_value", pad_value)
    return emit(np.pad(x, pads, constant_values=fill), out)


def _slice_axis(size: int, begin: int, end: int, stride: int, begin_masked: bool,
                end_masked: bool, shrink: bool) -> slice | int:
    """One axis of TFLite's StridedSliceStartForAxis / EndForAxis as a Python index."""
    if shrink:
        idx = begin + size if begin < 0 else begin
        if not 0 <= idx < size:
            raise InvalidCommand(f"shrink index {begin} out of range for size {size}")
        return idx
    if stride == 0:
        raise InvalidCommand("strided_slice stride must be non-zero")
    # Indices are clamped into the valid range for the direction of travel.
    lo, hi = (0, size) if stride > 0 else (-1, size - 1)

    def clamp(v: int, masked: bool, default: int) -> int:
        if masked:
            return default
        v = v + size if v < 0 else v
        return min(max(v, lo), hi)

    b = clamp(begin, begin_masked, lo if stride > 0 else hi)
    e = clamp(end, end_masked, hi if stride > 0 else lo)
    if b < 0:  # a backwards slice that starts before element 0 is empty
        return slice(0, 0)
    return slice(b, e if e >= 0 else None, stride)


def _slice_index(shape: Sequence[int], begin, end, strides, begin_mask: int, end_mask: int,
                 shrink_axis_mask: int) -> tuple:
    n = len(shape)
    if not len(begin) == len(end) == len(strides) == n:
        raise InvalidCommand(f"begin/end/strides need {n} entries each")
    return tuple(_slice_axis(int(shape[i]), int(begin[i]), int(end[i]), int(strides[i]),
                             bool(begin_mask >> i & 1), bool(end_mask >> i & 1),
                             bool(shrink_axis_mask >> i & 1)) for i in range(n))


def strided_slice(x: np.ndarray, begin: Sequence[int], end: Sequence[int],
                  strides: Sequence[int], *, begin_mask: int = 0, end_mask: int = 0,
                  shrink_axis_mask: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """STRIDED_SLICE with begin/end/shrink masks (one entry per input axis).

    Ellipsis and new-axis masks are left to the compiler, which rewrites them to plain
    per-axis ranges before emitting the task.
    """
    return emit(strided_slice_view(x, begin, end, strides, begin_mask=begin_mask, end_mask=end_mask,
                                   shrink_axis_mask=shrink_axis_mask), out)


def strided_slice_view(x: np.ndarray, begin: Sequence[int], end: Sequence[int], strides: Sequence[int], *,
                       begin_mask: int = 0, end_mask: int = 0, shrink_axis_mask: int = 0) -> np.ndarray:
    """:func:`strided_slice`'s result as a view of ``x`` (what a copy reads)."""
    return x[_slice_index(x.shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask)]


def strided_slice_shape(shape: Sequence[int], begin: Sequence[int], end: Sequence[int],
                        strides: Sequence[int], *, begin_mask: int = 0, end_mask: int = 0,
                        shrink_axis_mask: int = 0) -> tuple[int, ...]:
    """Output shape of :func:`strided_slice` for an input of ``shape``."""
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=tuple(shape),
                                            strides=(0,) * len(shape))
    index = _slice_index(shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask)
    return probe[index].shape


def gather(x: np.ndarray, indices: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x`` viewed as (outer, axis, inner): rows of the middle axis picked by ``indices``."""
    if x.ndim != 3:
        raise InvalidCommand(f"gather input must be (outer, axis, inner), got {x.shape}")
    idx = np.asarray(indices).astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[1]):
        raise InvalidCommand(f"gather index outside [0, {x.shape[1]})")
    return emit(x[:, idx, :], out)
