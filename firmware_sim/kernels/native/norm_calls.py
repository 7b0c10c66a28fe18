"""Bound calls of the C normalization kernels (``norm_kernels.c``): int8 L2_NORMALIZATION,
the rerun of ``kernels.normalization.l2_normalization`` (which runs first and stays the
reference)."""
from __future__ import annotations

import numpy as np

from . import ffi, library
from .calls import BoundCall
from .data_calls import in_place_or_apart

__all__ = ["bind_l2_normalization"]


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
