"""int8 L2 normalization over the last axis (``reference_integer_ops::L2Normalization``).

Output scale 1/128, zero point 0: ``x_i * invsqrt(sum x^2)`` in fixed point, where the
inverse square root is TFLite's Newton-Raphson ``GetInvSqrtQuantizedMultiplierExp``.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import multiply_by_quantized_multiplier
from .output import check_int8_param, emit
from .unary import inv_sqrt_multiplier_exp

__all__ = ["l2_normalization"]

_OUTPUT_SCALE_BITS = 7


def l2_normalization(x: np.ndarray, *, input_zp: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 L2_NORMALIZATION of ``x`` ([rows, depth] or any shape: over the last axis)."""
    if x.dtype != np.int8:
        raise TypeError(f"x must be int8, got {x.dtype}")
    if x.ndim < 1:
        raise InvalidCommand("l2 normalization needs at least one dimension")
    zp = check_int8_param("input_zp", input_zp)
    v = x.astype(np.int64) - zp
    acc = (v * v).sum(axis=-1)
    flat = acc.reshape(-1).tolist()
    pairs = [inv_sqrt_multiplier_exp(int(a)) for a in flat]
    mult = np.array([p[0] for p in pairs], np.int64).reshape(acc.shape)[..., None]
    shift = np.array([p[1] for p in pairs], np.int64).reshape(acc.shape)[..., None] + _OUTPUT_SCALE_BITS
    res = np.clip(multiply_by_quantized_multiplier(v, mult, shift), -128, 127).astype(np.int8)
    return emit(res, out)
