"""int8 matrix products of two activations, batched, as LiteRT's reference kernel:
int32 sums of ``(lhs - lhs_zp) * (rhs - rhs_zp)``, requantized with
MultiplyByQuantizedMultiplier (gemmlowp double rounding), plus the output zero point,
clamped. The batch axes broadcast like numpy. The sums are exact: float64 products of
values below 2^8 summed over fewer than 2^36 terms stay integers below 2^53."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .output import check_int8_param, store_int8

__all__ = ["matmul_int8", "matmul_shape"]


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
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    acc = wrap_int32(np.matmul(a, b).astype(np.int64))
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("shift must be in [-31, 30]")
    raw = multiply_by_quantized_multiplier(acc, int(multiplier), int(shift))
    if out is not None and (out.dtype != np.int8 or out.shape != shape):
        raise InvalidCommand(f"out must be int8 {shape}")
    return store_int8(raw, check_int8_param("output_zp", output_zp), check_int8_param("act_min", act_min),
                      check_int8_param("act_max", act_max), out)
