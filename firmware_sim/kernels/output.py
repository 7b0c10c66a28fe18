"""The common tail of every int8 kernel: add the output zero point, clamp, store as int8."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand

__all__ = ["store_int8", "check_int_param", "check_int8_param", "check_act_range",
           "broadcast_out_shape", "accumulate_bias"]


def check_int_param(name: str, value: int, low: int, high: int) -> int:
    """Return ``value`` as int after checking ``low <= value <= high``."""
    v = int(value)
    if not low <= v <= high:
        raise InvalidCommand(f"{name} must be in [{low}, {high}], got {value}")
    return v


def check_int8_param(name: str, value: int) -> int:
    """Return ``value`` as int after checking it fits int8 (zero points, clamp bounds)."""
    return check_int_param(name, value, -128, 127)


def check_act_range(act_min: int, act_max: int, low: int = -128,
                    high: int = 127) -> tuple[int, int]:
    """The clamp bounds as ints after checking each fits ``[low, high]`` and ``act_min <= act_max``."""
    lo, hi = check_int_param("act_min", act_min, low, high), check_int_param("act_max", act_max, low, high)
    if lo > hi:
        raise InvalidCommand(f"act_min {lo} > act_max {hi}")
    return lo, hi


def broadcast_out_shape(a: np.ndarray, b: np.ndarray, out: np.ndarray | None,
                        dtype: type = np.int8) -> tuple[int, ...]:
    """The shape ``a`` and ``b`` broadcast to, after checking they do and that ``out`` (when
    given) is a ``dtype`` array of that shape."""
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise InvalidCommand(f"shapes {a.shape} and {b.shape} do not broadcast") from None
    if out is not None and (out.dtype != dtype or out.shape != shape):
        raise InvalidCommand(f"out must be {np.dtype(dtype)} {shape}")
    return shape


def store_int8(scaled: np.ndarray, output_zp: int, act_min: int, act_max: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """``clamp(scaled + output_zp, act_min, act_max)`` as int8, into ``out`` when given.

    ``scaled`` is an int64 array of int32 values; the zero-point addition wraps in int32
    as TFLite's C code does (the int64 -> int32 cast is modular).
    """
    v = np.asarray(np.asarray(scaled, dtype=np.int64) + np.int64(output_zp)).astype(np.int32)
    np.clip(v, act_min, act_max, out=v)
    if out is None:
        return v.astype(np.int8)
    np.copyto(out, v, casting="unsafe")
    return out


def accumulate_bias(acc_f: np.ndarray, bias: np.ndarray | None, acc_bound: int) -> np.ndarray:
    """Exact float accumulators + int32 bias as int64 int32 values, wrapping like TFLite's
    int32 accumulator (skipped when ``acc_bound`` + the bias cannot leave int32)."""
    acc = acc_f.astype(np.int64)
    if bias is None:
        return acc if acc_bound < (1 << 31) else (((acc + (1 << 31)) & 0xFFFFFFFF) - (1 << 31))
    acc += bias
    if acc_bound + (int(np.abs(bias.astype(np.int64)).max()) if bias.size else 0) >= (1 << 31):
        acc = ((acc + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return acc


def emit(res: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``res`` as a fresh contiguous array (views of inputs are copied), or copied into
    ``out`` (same dtype and shape) and ``out`` returned."""
    if out is None:
        return np.ascontiguousarray(res).reshape(res.shape)  # keeps 0-d results 0-d
    if out.dtype != res.dtype or out.shape != res.shape:
        raise InvalidCommand(f"out must be {res.dtype} {res.shape}, got {out.dtype} {out.shape}")
    np.copyto(out, res)
    return out
