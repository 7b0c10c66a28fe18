"""Exact integer matrix products through float BLAS, and the row blocking the conv / FC
kernels share.

Float32 BLAS is exact when every partial sum is an integer below 2**24, whatever order the
library sums in. A partial sum of ``x . w_row`` never exceeds ``max|x| * sum|w_row|``, so
with int8 operands one GEMM is exact for most layers; longer reductions are cut into
chunks that each stay exact in float32, and the chunk results are added in float64
(exact below 2**53).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import InvalidCommand
from .blas import limit_blas_threads

__all__ = ["int_matmul", "max_abs", "f32_chunk", "gemm_chunk", "exact_gemm",
           "int8_offset_bound", "ROW_BLOCK_ELEMS", "for_row_blocks"]

_F32_EXACT = 1 << 24
_F64_EXACT = 1 << 53

limit_blas_threads(1)

# Output elements per block: keeps a block's int64 requantization temporaries in cache.
ROW_BLOCK_ELEMS = 1 << 15


def max_abs(a: np.ndarray) -> int:
    """Largest magnitude in an integer array (0 when empty), without int8 abs overflow."""
    if a.size == 0:
        return 0
    return max(-int(a.min()), int(a.max()))


def int8_offset_bound(offset: int) -> int:
    """Largest ``|v + offset|`` over int8 ``v``."""
    return max(abs(-128 + offset), abs(127 + offset))


def f32_chunk(bound_a: int, bound_b: int) -> int:
    """Longest reduction whose sums stay exact in float32."""
    return max(1, (_F32_EXACT - 1) // max(1, bound_a * bound_b))


def gemm_chunk(k: int, bound_x: int, abs_row_sum_max: int, bound_w: int = 128) -> int:
    """K-chunk for :func:`exact_gemm`: every partial sum of ``x . w_row`` is at most
    ``max|x| * sum|w_row|``, whatever the summation order; when that stays below 2**24
    the whole reduction is one exact float32 GEMM."""
    if bound_x * abs_row_sum_max < _F32_EXACT:
        return max(k, 1)
    return f32_chunk(bound_x, bound_w)


def exact_gemm(a: np.ndarray, b_t: np.ndarray, chunk: int) -> np.ndarray:
    """``a @ b_t`` for float32 operands holding integers, exact: float32 BLAS over K-chunks
    of at most ``chunk``, summed in float64 when there is more than one chunk."""
    k = a.shape[-1]
    if k <= chunk:
        return a @ b_t
    acc = a[..., :chunk] @ b_t[:chunk]
    acc = acc.astype(np.float64)
    for c0 in range(chunk, k, chunk):
        acc += a[..., c0:c0 + chunk] @ b_t[c0:c0 + chunk]
    if k * chunk >= _F64_EXACT:  # cannot happen for int8 data; guards misuse
        raise InvalidCommand("reduction too long for exact accumulation")
    return acc


def int_matmul(a: np.ndarray, b: np.ndarray, a_offset: int = 0) -> np.ndarray:
    """Return ``(a + a_offset) @ b.T`` exactly as int64.

    ``a`` is an integer array (M, K), ``b`` an integer array (N, K). Row/column layout
    follows the weights of a fully connected layer so that ``b`` is used as stored.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        # Not InvalidCommand: no descriptor reaches this (the chip never calls it): a caller bug.
        raise ValueError(f"int_matmul shapes do not match: {a.shape} x {b.shape}.T")
    lo, hi = (np.iinfo(a.dtype).min, np.iinfo(a.dtype).max)
    bound_a = max(abs(lo + a_offset), abs(hi + a_offset))
    bound_b = max_abs(b)
    if bound_a >= (1 << 24) or bound_b >= (1 << 24):  # wide integers: no float shortcut
        return (a.astype(np.int64) + a_offset) @ b.astype(np.int64).T
    af = a.astype(np.float32)
    if a_offset:
        af += np.float32(a_offset)
    return exact_gemm(af, b.astype(np.float32).T, f32_chunk(bound_a, bound_b)).astype(np.int64)


def for_row_blocks(n_rows: int, row_elems: int, fn: Callable[[int, int], None]) -> None:
    """Call ``fn(start, stop)`` over row blocks of about ``ROW_BLOCK_ELEMS`` elements."""
    step = max(1, ROW_BLOCK_ELEMS // max(1, row_elems))
    for start in range(0, n_rows, step):
        fn(start, min(start + step, n_rows))
