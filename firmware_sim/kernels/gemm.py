"""Exact integer matrix products through float BLAS.

Float BLAS is exact when every partial sum is an integer below 2**24 (float32) or 2**53
(float64), whatever order the library sums in. ``int_matmul`` bounds the sums from the
operands and picks the fastest exact path: float32, float64, or (for absurdly long rows)
numpy's int64 matmul.
"""
from __future__ import annotations

import numpy as np

__all__ = ["int_matmul", "max_abs", "exact_float_type"]

_F32_EXACT = 1 << 24
_F64_EXACT = 1 << 53


def max_abs(a: np.ndarray) -> int:
    """Largest magnitude in an integer array (0 when empty), without int8 abs overflow."""
    if a.size == 0:
        return 0
    return max(-int(a.min()), int(a.max()))


def exact_float_type(k: int, bound_a: int, bound_b: int) -> type | None:
    """float32 or float64 if sums of ``k`` products of magnitudes ``bound_a * bound_b`` stay
    exact in it, else None (no float type is exact)."""
    bound = k * bound_a * bound_b
    if bound < _F32_EXACT:
        return np.float32
    if bound < _F64_EXACT:
        return np.float64
    return None


def int_matmul(a: np.ndarray, b: np.ndarray, a_offset: int = 0) -> np.ndarray:
    """Return ``(a + a_offset) @ b.T`` exactly as int64.

    ``a`` is an integer array (M, K), ``b`` an integer array (N, K). Row/column layout
    follows the weights of a fully connected layer so that ``b`` is used as stored.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"int_matmul shapes do not match: {a.shape} x {b.shape}.T")
    k = a.shape[1]
    # Bound |a + a_offset| from the int8 range (cheap) and |b| from the data (weights).
    lo, hi = (np.iinfo(a.dtype).min, np.iinfo(a.dtype).max)
    bound_a = max(abs(lo + a_offset), abs(hi + a_offset))
    ftype = exact_float_type(k, bound_a, max_abs(b))
    if ftype is None:
        return (a.astype(np.int64) + a_offset) @ b.astype(np.int64).T
    af = a.astype(ftype)
    if a_offset:
        af += ftype(a_offset)
    return (af @ b.astype(ftype).T).astype(np.int64)
