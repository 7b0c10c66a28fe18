"""Bound calls of the C normalization kernels (``norm_kernels.c``): int8 L2_NORMALIZATION
and LOG_SOFTMAX, the reruns of ``kernels.normalization.l2_normalization`` and
``log_softmax`` (which run first and stay the reference)."""
from __future__ import annotations

import numpy as np

from . import ffi, library
from .calls import BoundCall
from .data_calls import in_place_or_apart

__all__ = ["bind_l2_normalization", "bind_log_softmax"]


def bind_l2_normalization(x: np.ndarray, out: np.ndarray, *, input_zp: int) -> BoundCall | None:
    """int8 L2_NORMALIZATION of ``x`` over its last axis into ``out`` (the same shape) as a
    call; None unless both are C-contiguous int8 arrays, in place or apart."""
    if (library() is None or x.dtype != np.int8 or out.dtype != np.int8 or x.shape != out.shape or x.ndim < 1
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not out.flags.writeable
            or not in_place_or_apart(x, out) or not -128 <= input_zp <= 127):
        return None
    depth = x.shape[-1]
    buffers = (ffi.from_buffer("int8_t[]", x), ffi.from_buffer("int8_t[]", out, require_writable=True))
    call = ffi.new("struct npu_l2norm_call *", {"x": buffers[0], "rows": x.size // depth if depth else 0,
                                                 "depth": depth, "input_zp": input_zp, "out": buffers[1]})
    return BoundCall(library().NPU_STEP_L2NORM, call, (x, out), buffers)


def bind_log_softmax(x: np.ndarray, out: np.ndarray, tables: tuple[np.ndarray, np.ndarray], *,
                     reverse_scaling_divisor: int, reverse_scaling_right_shift: int, diff_min: int) -> BoundCall | None:
    """int8 LOG_SOFTMAX of ``x`` over its last axis into ``out`` with a parameter set's
    ``tables`` (``normalization.log_softmax_tables``) as a call; None unless both are
    C-contiguous int8 arrays of one shape, in place or apart, and the parameters int32."""
    diff_q5_t, terms_t = (np.ascontiguousarray(t, dtype=np.int32) for t in tables)
    if (library() is None or x.dtype != np.int8 or out.dtype != np.int8 or x.shape != out.shape or x.ndim < 1
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not out.flags.writeable
            or not in_place_or_apart(x, out) or diff_q5_t.shape != (256,) or terms_t.shape != (256,)
            or not all(-(1 << 31) <= v < 1 << 31 for v in (reverse_scaling_divisor, diff_min))):
        return None
    depth = x.shape[-1]
    buffers = (ffi.from_buffer("int8_t[]", x), ffi.from_buffer("int32_t[]", diff_q5_t),
               ffi.from_buffer("int32_t[]", terms_t), ffi.from_buffer("int8_t[]", out, require_writable=True))
    call = ffi.new("struct npu_log_softmax_call *", {
        "x": buffers[0], "rows": x.size // depth if depth else 0, "depth": depth, "diff_q5_t": buffers[1],
        "terms_t": buffers[2], "reverse_scaling_divisor": reverse_scaling_divisor,
        "reverse_scaling_right_shift": reverse_scaling_right_shift, "diff_min": diff_min, "out": buffers[3]})
    return BoundCall(library().NPU_STEP_LOG_SOFTMAX, call, (x, out, diff_q5_t, terms_t), buffers)
