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

The int64 accumulators of the int16-activation convolutions (CONV_2D, DEPTHWISE_CONV_2D,
TRANSPOSE_CONV) and of the int16 BATCH_MATMUL are requantized by TFLite's int64
``MultiplyByQuantizedMultiplier``, which first reduces the Q31 significand to Q15
(:func:`reduce_to_q15`): the real multiplier those kernels apply is then up to 2**-15
(3e-5) relatively off the encoded one (:func:`q15_gain`); the chip's kernels
(``int16x8.multiply_by_quantized_multiplier_int64``, ``requant16`` in C) do the same. Small per layer, but coherent: a
channel's every output is scaled alike, and 106 int16 layers of a face mesh added it up to
a presence logit 0.11 off float where the float simulation, which did not know, saw 0.01.
:func:`q15_ceil` gives the nearest multiplier at or above a real one that the reduction
keeps exactly (the compiler picks int16 weight steps with it).
"""
from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["quantize_multiplier", "quantize_multiplier_array", "effective_scale", "reduce_to_q15", "q15_gain",
           "q15_ceil",
           "fused_activation_range", "rescale_multiplier", "relu_multiplier", "mul_multiplier",
           "add_params", "ADD_LEFT_SHIFT", "ADD_LEFT_SHIFT_INT16",
           "softmax_int16_params", "softmax_params", "activation_lut", "LUT_TANH",
           "LUT_LOGISTIC",
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


def reduce_to_q15(multiplier: np.ndarray) -> np.ndarray:
    """The Q15 significand TFLite's int64 ``MultiplyByQuantizedMultiplier`` makes of a Q31
    one: ``(m + 2**15) >> 16``, saturated at ``0x7FFF`` (int64 array)."""
    m = np.asarray(multiplier, np.int64)
    return np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)


def q15_gain(multiplier: np.ndarray) -> np.ndarray:
    """The factor by which that reduction scales each Q31 ``multiplier``: ``q15 * 2**16 / m``
    (float64; 1 where the multiplier is 0)."""
    m = np.asarray(multiplier, np.int64)
    return np.where(m > 0, reduce_to_q15(m) * 65536.0 / np.where(m > 0, m, 1), 1.0)


def q15_ceil(real: np.ndarray) -> np.ndarray:
    """The smallest multiplier at or above each positive ``real`` that the int64
    requantization applies exactly: ``k * 2**(e - 15)`` with ``k`` in ``[2**14, 2**15)``
    (its Q31 encoding reduces to Q15 without rounding)."""
    q, e = np.frexp(np.asarray(real, np.float64))
    k = np.ceil(q * (1 << 15))
    return np.ldexp(k, e - 15)


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


# ---- per-op parameter derivations (each mirrors the op's Prepare in TFLite) ----

def _f32(x: float) -> np.float32:
    return np.float32(x)


def rescale_multiplier(input_scale: float, output_scale: float) -> tuple[int, int]:
    """QUANTIZE (int8 -> int8), MEAN: ``double(in) / double(out)``."""
    return quantize_multiplier(float(_f32(input_scale)) / float(_f32(output_scale)))


def relu_multiplier(input_scale: float, output_scale: float) -> tuple[int, int]:
    """RELU / RELU6 / RELU_N1_TO_1: the ratio is divided in float32 first."""
    return quantize_multiplier(float(_f32(input_scale) / _f32(output_scale)))


def mul_multiplier(input1_scale: float, input2_scale: float,
                   output_scale: float) -> tuple[int, int]:
    """MUL: ``in1 * in2 / out`` evaluated in float32, then encoded."""
    return quantize_multiplier(float(_f32(input1_scale) * _f32(input2_scale) / _f32(output_scale)))


ADD_LEFT_SHIFT = 20  # int8 ADD scales both inputs up by 2**20 before rescaling
ADD_LEFT_SHIFT_INT16 = 15


def add_params(input1_scale: float, input2_scale: float, output_scale: float,
               left_shift: int = ADD_LEFT_SHIFT) -> dict[str, int]:
    """ADD's six multiplier/shift values (TFLite add.cc Prepare): int8 scales the inputs
    up by 2**20, int16 (the general, non power-of-two path) by 2**15."""
    s1, s2, so = _f32(input1_scale), _f32(input2_scale), _f32(output_scale)
    twice_max = float(np.float32(2) * max(s1, s2))
    m1, sh1 = quantize_multiplier(float(s1) / twice_max)
    m2, sh2 = quantize_multiplier(float(s2) / twice_max)
    mo, sho = quantize_multiplier(twice_max / float(np.float32(1 << left_shift) * so))
    return dict(left_shift=left_shift, input1_multiplier=m1, input1_shift=sh1,
                input2_multiplier=m2, input2_shift=sh2, output_multiplier=mo, output_shift=sho)


SOFTMAX_SCALED_DIFF_INTEGER_BITS = 5


def softmax_params(beta: float, input_scale: float) -> tuple[int, int, int]:
    """SOFTMAX int8: ``(input_beta_multiplier, input_beta_left_shift, diff_min)``.

    ``PreprocessSoftmaxScaling`` (capped at 2**31 - 1) and ``CalculateInputRadius``.
    """
    bits = SOFTMAX_SCALED_DIFF_INTEGER_BITS
    real = min(float(_f32(beta)) * float(_f32(input_scale)) * (1 << (31 - bits)),
               float((1 << 31) - 1))
    mult, shift = quantize_multiplier(real)
    if shift < 0:
        raise ValueError("softmax beta * input_scale is too small to encode")
    radius = math.floor(1.0 * ((1 << bits) - 1) * (1 << (31 - bits)) / (1 << shift))
    return mult, shift, -radius


def softmax_int16_params(beta: float, input_scale: float) -> tuple[int, int]:
    """int16 SOFTMAX: ``(input_multiplier, input_left_shift)`` taking an input difference
    to the exp table's grid, where [-65535, 0] stands for [-10, 0] (TFLite's Prepare: the
    product ``input_scale * beta`` is a float32 one)."""
    return quantize_multiplier(float(_f32(input_scale) * _f32(beta)) / (10.0 / 65535.0))


@functools.cache   # find_library runs ldconfig in a subprocess: 6 ms for every table built
def _libm():
    import ctypes
    import ctypes.util

    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in ("tanhf", "expf"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lib


LUT_TANH, LUT_LOGISTIC = 1, 2


def activation_lut(kind: int, input_scale: float, input_zp: int, output_scale: float,
                   output_zp: int) -> np.ndarray:
    """The 256-entry int8 lookup table TFLite builds for int8 TANH / LOGISTIC.

    Indexed by the input byte as uint8. Same float32 arithmetic as ``LUTPopulateInt8``;
    the transcendental functions are the C library's ``tanhf``/``expf`` (the ones TFLite
    calls), so the table matches bit for bit.
    """
    if kind not in (LUT_TANH, LUT_LOGISTIC):
        raise ValueError(f"unknown LUT kind {kind}")
    return _activation_lut(kind, float(input_scale), int(input_zp), float(output_scale), int(output_zp)).copy()


@functools.lru_cache(maxsize=1024)   # 256 libm calls from Python: 5 ms; an unrolled RNN asks again every step
def _activation_lut(kind: int, input_scale: float, input_zp: int, output_scale: float,
                    output_zp: int) -> np.ndarray:
    libm = _libm()
    in_s, inv_out = _f32(input_scale), _f32(1.0) / _f32(output_scale)
    lut = np.empty(256, dtype=np.int8)
    for val in range(-128, 128):
        x = float(in_s * _f32(val - input_zp))
        if kind == LUT_TANH:
            y = _f32(libm.tanhf(x))
        else:
            y = _f32(1.0) / (_f32(1.0) + _f32(libm.expf(_f32(-x))))
        r = float(y * inv_out)
        rounded = _f32(math.copysign(math.floor(abs(r) + 0.5), r))
        q = int(rounded + _f32(output_zp))
        lut[val & 0xFF] = min(max(q, -128), 127)
    return lut
