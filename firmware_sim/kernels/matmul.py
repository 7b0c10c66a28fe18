"""Matrix products of two activations, batched, as LiteRT's reference kernels.

int8: int32 sums of ``(lhs - lhs_zp) * (rhs - rhs_zp)``, requantized with
MultiplyByQuantizedMultiplier (gemmlowp double rounding), plus the output zero point,
clamped. int16 (LiteRT's ``BatchMatMul<int16_t, int64_t>``): zero points 0, int64 sums of
``lhs * rhs``, requantized with the int64 MultiplyByQuantizedMultiplier (the multiplier
reduced to Q15, one rounding: :func:`int16x8.multiply_by_quantized_multiplier_int64`),
clamped to int16. The batch axes broadcast like numpy. The sums are exact: float64
products below 2^16 (int8) or 2^30 (int16) summed over fewer than 2^36 or 2^22 terms stay
integers below 2^53; a deeper int16 product sums in int64."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .int16x8 import INT16_MAX, INT16_MIN, check_zero_points, multiply_by_quantized_multiplier_int64, store_int16
from .output import check_act_range, check_int8_param, store_int8

__all__ = ["matmul_int8", "matmul_int16", "matmul_shape"]

#: Below this depth float64 sums of int16 products (< 2^30 each) stay exact integers.
_EXACT_INT16_DEPTH = 1 << 22


def matmul_shape(lhs_shape, rhs_shape, adj_x: bool = False, adj_y: bool = False) -> tuple[int, ...]:
    """The output shape, or :class:`InvalidCommand` when the operands do not fit."""
    lhs_shape, rhs_shape = tuple(int(d) for d in lhs_shape), tuple(int(d) for d in rhs_shape)
    if len(lhs_shape) < 2 or len(lhs_shape) != len(rhs_shape):
        raise InvalidCommand(f"matmul operands {lhs_shape} and {rhs_shape} need one rank >= 2")
    rows, depth = lhs_shape[-1:-3:-1] if adj_x else lhs_shape[-2:]
    rdepth, cols = rhs_shape[-1:-3:-1] if adj_y else rhs_shape[-2:]
    if depth != rdepth:
        raise InvalidCommand(f"matmul depth {depth} != {rdepth}")
    batch = []
    for a, b in zip(lhs_shape[:-2], rhs_shape[:-2]):
        if a != b and 1 not in (a, b):
            raise InvalidCommand(f"batch axes {lhs_shape[:-2]} and {rhs_shape[:-2]} do not broadcast")
        batch.append(max(a, b))
    return (*batch, rows, cols)


def matmul_int8(lhs: np.ndarray, rhs: np.ndarray, *, lhs_zp: int, rhs_zp: int, output_zp: int,
                 multiplier: int, shift: int, act_min: int = -128, act_max: int = 127,
                 adj_x: bool = False, adj_y: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """int8 ``lhs @ rhs`` (``adj_x`` / ``adj_y``: the operand is stored transposed)."""
    if lhs.dtype != np.int8 or rhs.dtype != np.int8:
        raise InvalidCommand("matmul operands must be int8")
    shape = matmul_shape(lhs.shape, rhs.shape, adj_x, adj_y)
    a = lhs.astype(np.float64) - check_int8_param("lhs_zp", lhs_zp)
    b = rhs.astype(np.float64) - check_int8_param("rhs_zp", rhs_zp)
    acc = wrap_int32(_product(a, b, adj_x, adj_y).astype(np.int64))
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("shift must be in [-31, 30]")
    raw = multiply_by_quantized_multiplier(acc, int(multiplier), int(shift))
    if out is not None and (out.dtype != np.int8 or out.shape != shape):
        raise InvalidCommand(f"out must be int8 {shape}")
    return store_int8(raw, check_int8_param("output_zp", output_zp), check_int8_param("act_min", act_min),
                      check_int8_param("act_max", act_max), out)


def matmul_int16(lhs: np.ndarray, rhs: np.ndarray, *, multiplier: int, shift: int,
                 act_min: int = INT16_MIN, act_max: int = INT16_MAX, adj_x: bool = False, adj_y: bool = False,
                 lhs_zp: int = 0, rhs_zp: int = 0, output_zp: int = 0,
                 out: np.ndarray | None = None) -> np.ndarray:
    """int16 ``lhs @ rhs`` (LiteRT's int16 BATCH_MATMUL: every zero point 0, int64 sums)."""
    if lhs.dtype != np.int16 or rhs.dtype != np.int16:
        raise InvalidCommand("int16 matmul operands must be int16")
    check_zero_points(lhs_zp=lhs_zp, rhs_zp=rhs_zp, output_zp=output_zp)
    lo, hi = check_act_range(act_min, act_max, INT16_MIN, INT16_MAX)
    shape = matmul_shape(lhs.shape, rhs.shape, adj_x, adj_y)
    depth = lhs.shape[-2] if adj_x else lhs.shape[-1]
    kind = np.float64 if depth < _EXACT_INT16_DEPTH else np.int64
    acc = _product(lhs.astype(kind), rhs.astype(kind), adj_x, adj_y).astype(np.int64)
    raw = multiply_by_quantized_multiplier_int64(acc, np.int64(multiplier), np.int64(shift))
    if out is not None and (out.dtype != np.int16 or out.shape != shape):
        raise InvalidCommand(f"out must be int16 {shape}")
    return store_int16(raw, 0, lo, hi, out)


def _product(a: np.ndarray, b: np.ndarray, adj_x: bool, adj_y: bool) -> np.ndarray:
    """``a @ b`` with each operand transposed first when its adjoint flag says so."""
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)
