"""Where the compiler picks a scale: every rule that turns a range or a tensor's values into
quantization parameters (:class:`~libnpu.compiler.ir.QuantParams`), written once.

* int8 activations (:func:`choose_activation_scale`): asymmetric, the calibrated range
  (widened to hold 0) on 256 steps, TFLite's int8 spec;
* int8 weights (:func:`quantize_weights`): symmetric, per channel, ``max |w| / 127`` steps;
* int16 activations (:func:`choose_int16_scale`): symmetric, zero point 0, a reach on
  ``INT16_MAX`` steps (TFLite's 16x8 spec); mixed precision chooses the reach
  (:func:`libnpu.compiler.mixed_precision.int16_quant`, per channel
  :func:`libnpu.compiler.channel_grids.channel_quant`);
* int16 weights (:func:`quantize_weights16`): symmetric, per channel, ``max |w| / 32767``
  steps, never so fine that the chip's arithmetic loses the channel, each a hair coarser
  so that the channel's requantization multiplier is one the chip applies exactly;
* biases (:func:`bias_scale`): input scale x weight scale, per channel.

:func:`symmetric` makes zero-point-0 parameters from scales chosen elsewhere (a grid moved
with its channels, scales folded into weights).

Tensors a float graph lists together under ``metadata[SHARED_GRIDS]`` get one grid, from
the range of all their values: an unrolled recurrence's steps (``compiler.ops.recurrent``),
whose per-step tensors each see a fraction of the calibration data.
"""
from __future__ import annotations

import math

import numpy as np

from npu_hw import fixedpoint as fp

from .ir import QuantParams

__all__ = ["SHARED_GRIDS", "INT16_MAX", "MIN_MULTIPLIER", "BIAS16_BITS", "SMALLEST_SCALE", "symmetric",
           "choose_activation_scale", "choose_int16_scale", "bias_scale", "quantize_weights", "quantize_weights16"]

INT16_MAX = 32767
#: Float graph metadata key: a list of groups (lists of tensor names) quantized with one grid.
SHARED_GRIDS = "shared_grids"
#: The smallest requantization multiplier the chip's Q31 + shift holds (below 2**-32 it is 0).
MIN_MULTIPLIER = 2.0 ** -31
#: int16 weights keep an int64 bias within this many bits (the chip saturates sums at 2**47).
BIAS16_BITS = 44
#: The finest step a float32 scale holds as a normal number. A step computed finer is stored
#: as 0 or a denormal: a channel of denormal weights (1e-42, as trained models carry) made a
#: weight scale, or its bias scale (input scale x weight scale), 0 in float32, and the
#: compile failed with "scales must be finite and > 0".
SMALLEST_SCALE = float(np.finfo(np.float32).tiny)


def symmetric(scale: float | np.ndarray, axis: int = 0) -> QuantParams:
    """Zero-point-0 parameters with ``scale`` (one, or one per channel along ``axis``), stored as float32.

    A scale finer than ``SMALLEST_SCALE`` (a product of scales, such as a bias's, that
    float32 would store as 0 or a denormal) is that scale: its values are that close to 0."""
    scale = np.atleast_1d(np.asarray(scale, np.float64))
    scale = np.where((scale >= 0) & (scale < SMALLEST_SCALE), SMALLEST_SCALE, scale).astype(np.float32)
    return QuantParams(scale, np.zeros(scale.size, np.int64), axis)


def choose_activation_scale(lo: float, hi: float) -> QuantParams:
    """int8 parameters for an activation whose values span ``[lo, hi]``: the range widened to
    hold 0 (exactly representable, as TFLite requires) over 255 steps, the zero point rounded.
    A range that is not finite raises ValueError (its caller names the tensor)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"the range [{lo}, {hi}] is not finite: no int8 grid holds it")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = (hi - lo) / 255.0
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return QuantParams(np.float32(scale), zp)


def choose_int16_scale(reach: float | np.ndarray, axis: int = 0) -> QuantParams:
    """Symmetric int16 parameters covering ``[-reach, reach]`` (one reach, or one per channel along
    ``axis``). A reach of 0 (a tensor or channel that is always 0) or finer than float32
    holds gets ``SMALLEST_SCALE``, which represents its values (zeros) exactly; a reach that
    is not finite raises ValueError."""
    reach = np.asarray(reach, np.float64)
    if not np.all(np.isfinite(reach)):
        raise ValueError(f"int16 reach {reach.max()} is not finite: no int16 grid holds it")
    return symmetric(np.maximum(reach / INT16_MAX, SMALLEST_SCALE).astype(np.float32), axis)


def bias_scale(in_scale: float, weight_scale: np.ndarray) -> np.ndarray:
    """The scale of a bias added to an input's products with weights: input scale x weight
    scale (per channel), in float64 (exact, both being float32); stored as float32."""
    return np.asarray(weight_scale, np.float64) * np.float64(np.float32(in_scale))


def quantize_weights(w: np.ndarray, axis: int | None, bias: np.ndarray | None,
                     in_scale: float) -> tuple[np.ndarray, QuantParams]:
    """Symmetric int8 weights, per channel along ``axis`` (None: per tensor): ``max |w| / 127``
    steps, coarser where the int32 bias (``bias / (in_scale x step)``) would not fit, and never
    so fine that the bias scale ``in_scale x step`` falls below ``SMALLEST_SCALE`` (denormal
    weights round to 0, as the chip's products with them would). Weights or a bias that are
    not finite raise ValueError (its caller names the tensor)."""
    w = w.astype(np.float64)
    if not np.all(np.isfinite(w)) or bias is not None and not np.all(np.isfinite(bias)):
        raise ValueError("weights or bias hold values that are not finite (inf or NaN)")
    if axis is None:
        maxabs = np.array([np.abs(w).max() if w.size else 0.0])
    else:
        maxabs = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
    scale = maxabs / 127.0
    if bias is not None:
        # Keep the int32 bias in range: bias / (in_scale * w_scale) must fit in int32.
        need = np.abs(bias.astype(np.float64)) / (in_scale * (2 ** 31 - 1)) * 1.01
        scale = np.maximum(scale, need if axis is not None else need.max(initial=0.0))
    scale = np.where(scale > 0, scale, 1.0 / 127.0)
    scale = np.maximum(scale, SMALLEST_SCALE / float(np.float32(in_scale)))
    if not np.all(scale < np.finfo(np.float32).max):
        raise ValueError(f"no int8 weight step holds it: its bias (up to {np.abs(bias).max():.3g}) on an input "
                         f"grid of step {in_scale:.3g} needs a step beyond float32's range for an int32 bias")
    scale = scale.astype(np.float32)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, symmetric(scale, axis if axis is not None else 0)


def quantize_weights16(w: np.ndarray, axis: int | None, bias: np.ndarray | None, in_scale: float,
                       out_scale: float | np.ndarray) -> tuple[np.ndarray, QuantParams]:
    """Symmetric int16 weights (a16w16), per channel along ``axis`` (None: per tensor),
    ``max |w| / 32767`` steps, rounded to nearest.

    A channel's step is never so fine that its multiplier ``in x w / out`` falls below
    ``MIN_MULTIPLIER`` (flushed to 0 on the chip) or its int64 bias (``bias``: the float
    bias) above 2**``BIAS16_BITS`` (the sums saturate at 2**47): hand_landmark_full's dead
    channels (weights ~1e-9, biases ~1) did both, and its handedness went 0.15 off on the
    device. Those channels' weights round to a few steps or none, as they would in int8.
    Each step is then widened (by at most 2**-14) until the multiplier is one the chip's
    int64 requantization applies without rounding it to Q15 (:func:`npu_hw.fixedpoint.q15_ceil`):
    that rounding scaled a channel's every output alike, and 106 such layers put a face
    mesh's presence logit 0.11 off float (the float simulation saw 0.01).
    ``out_scale``: one per output channel or one."""
    w = np.asarray(w, np.float64)
    if axis is not None:
        maxabs = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
    else:
        maxabs = np.array([np.abs(w).max(initial=0.0)])
    floor = MIN_MULTIPLIER * out_scale / in_scale
    if bias is not None:
        magnitude = np.abs(np.asarray(bias, np.float64)).reshape(-1)
        magnitude = magnitude if maxabs.size == magnitude.size else np.array([magnitude.max(initial=0.0)])
        floor = np.maximum(floor, magnitude / (in_scale * 2.0 ** BIAS16_BITS))
    scale = np.maximum(maxabs / INT16_MAX, floor * 1.01)
    scale = np.where(scale > 0, scale, 1.0 / INT16_MAX).astype(np.float32)
    scale = _q15_exact_steps(scale, in_scale, out_scale)
    qp = symmetric(scale, axis if axis is not None else 0)
    shape = qp.broadcast_shape(w.ndim)
    data = np.clip(np.round(w / scale.astype(np.float64).reshape(shape)), -INT16_MAX, INT16_MAX)
    return data.astype(np.int16), qp


def _q15_exact_steps(step: np.ndarray, in_scale: float, out_scale: float | np.ndarray) -> np.ndarray:
    """Weight steps at or just above ``step`` (float32) whose multipliers ``in x step / out``
    the int64 requantization keeps exactly (a per-tensor step with several output scales: the
    step is left as it is, no one step serves them all)."""
    out = np.asarray(np.asarray(out_scale, np.float32), np.float64)
    if step.size != out.size and out.size > 1:
        return step
    in_s = np.float64(np.float32(in_scale))
    exact = fp.q15_ceil(in_s * step.astype(np.float64) / out) * out / in_s
    return np.where(exact >= step, exact, step).astype(np.float32)
