"""The common tail of every int8 kernel: add the output zero point, clamp, store as int8."""
from __future__ import annotations

import numpy as np

__all__ = ["store_int8", "check_int8_param"]


def check_int8_param(name: str, value: int) -> int:
    """Return ``value`` as int after checking it fits int8 (zero points, clamp bounds)."""
    v = int(value)
    if not -128 <= v <= 127:
        raise ValueError(f"{name} must be in [-128, 127], got {value}")
    return v


def store_int8(scaled: np.ndarray, output_zp: int, act_min: int, act_max: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """``clamp(scaled + output_zp, act_min, act_max)`` as int8, into ``out`` when given.

    ``scaled`` is an int64 array of int32 values; the zero-point addition wraps in int32
    as TFLite's C code does.
    """
    v = scaled + np.int64(output_zp)
    v = np.asarray(((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31))
    if v.ndim:
        np.clip(v, act_min, act_max, out=v)
    else:  # 0-d results (a reduction to a scalar) are numpy scalars after arithmetic
        v = np.asarray(np.clip(v, act_min, act_max))
    if out is None:
        return v.astype(np.int8)
    np.copyto(out, v, casting="unsafe")
    return out
