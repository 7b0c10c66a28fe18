"""How the chip encodes a real-valued requantization multiplier.

A real multiplier ``m`` is stored as an int32 significand ``q`` and a shift ``s`` so that
``m ~= q * 2**(s - 31)`` with ``q`` in ``[2**30, 2**31)`` (or 0). The shift follows TFLite's
convention: positive means shift left. This is the encoding TFLite's ``QuantizeMultiplier``
produces (double-precision ``frexp``, round half away from zero) in the default build
that LiteRT's wheels use, so a compiler that uses it gets byte-identical results to the
TFLite reference kernels.

LiteRT's fully connected reference kernel does not use the fixed-point form: it scales
the accumulator by the double ``effective_scale(...)``. The FC task therefore carries that
double as well (see ``firmware_sim.kernels.fully_connected``).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["quantize_multiplier", "quantize_multiplier_array", "effective_scale",
           "fused_activation_range",
           "ACT_NONE", "ACT_RELU", "ACT_RELU_N1_TO_1", "ACT_RELU6"]

_Q31 = 1 << 31


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Encode ``real`` as ``(multiplier, shift)`` exactly like TFLite's ``QuantizeMultiplier``.

    Multipliers whose magnitude is below about 2**-31 flush to ``(0, 0)``.
    Raises ``ValueError`` for a non-finite input.
    """
    real = float(real)
    if not math.isfinite(real):
        raise ValueError(f"multiplier must be finite, got {real!r}")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    # q * 2**31 is exact in double; TFLite rounds half away from zero (std::round).
    q_fixed = int(math.copysign(math.floor(abs(q) * _Q31 + 0.5), q))
    if abs(q_fixed) == _Q31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multiplier_array(real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized :func:`quantize_multiplier` for per-channel multipliers.

    Returns ``(multiplier, shift)`` as two int32 arrays of ``real``'s shape.
    """
    real = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(real)):
        raise ValueError("multipliers must be finite")
    q, shift = np.frexp(real)
    q_fixed = (np.sign(q) * np.floor(np.abs(q) * _Q31 + 0.5)).astype(np.int64)
    full = np.abs(q_fixed) == _Q31
    q_fixed = np.where(full, q_fixed // 2, q_fixed)
    shift = np.where(full, shift + 1, shift).astype(np.int64)
    tiny = (shift < -31) | (real == 0.0)
    q_fixed = np.where(tiny, 0, q_fixed)
    shift = np.where(tiny, 0, shift)
    return q_fixed.astype(np.int32), shift.astype(np.int32)


def effective_scale(input_scale: float, filter_scales: np.ndarray | float,
                    output_scale: float) -> np.ndarray:
    """``input_scale * filter_scale / output_scale`` exactly as TFLite computes it.

    TFLite stores scales as float32 and evaluates the product and quotient in double,
    left to right. Returns a float64 array (one value per filter scale).
    """
    f32 = np.float32
    in_s = np.float64(f32(input_scale))
    out_s = np.float64(f32(output_scale))
    filt = np.atleast_1d(np.asarray(filter_scales, dtype=f32)).astype(np.float64)
    if in_s <= 0 or out_s <= 0 or np.any(filt <= 0):
        raise ValueError("scales must be positive")
    return in_s * filt / out_s


# Fused activation functions, numbered as in the TFLite schema's ActivationFunctionType.
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6 = 0, 1, 2, 3


def fused_activation_range(activation: int, scale: float, zero_point: int,
                           qmin: int = -128, qmax: int = 127) -> tuple[int, int]:
    """Clamp bounds ``(act_min, act_max)`` of a fused activation on a quantized output.

    Same arithmetic as TFLite's ``CalculateActivationRangeQuantized``: the bound is
    ``zero_point + round(f / scale)`` with the division done in float32 and rounding half
    away from zero, then intersected with ``[qmin, qmax]``.
    """
    if scale <= 0 or not math.isfinite(scale):
        raise ValueError(f"output scale must be positive and finite, got {scale!r}")

    def q(f: float) -> int:
        v = float(np.float32(f) / np.float32(scale))
        return int(zero_point) + int(math.copysign(math.floor(abs(v) + 0.5), v))

    if activation == ACT_NONE:
        return qmin, qmax
    if activation == ACT_RELU:
        return max(qmin, q(0.0)), qmax
    if activation == ACT_RELU6:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if activation == ACT_RELU_N1_TO_1:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    raise ValueError(f"unsupported fused activation {activation}")
