"""int16-activation, int16-weight kernels ("16x16", descriptor flag ``OPF_WEIGHTS16``).

LiteRT has no 16x16 convolution or fully connected kernel, so this is our own formula
(docs/hardware.md, "int16 weights"), built to be the 16x8 kernels' arithmetic with wider
weights:

* activations int16, symmetric (zero point 0); weights int16, symmetric, in
  [-32767, 32767], per output channel or per tensor; bias int64;
* ``acc = sum(x * w) + bias`` in int64, exact (the products are below 2**30 in magnitude
  and a dot product has at most ``MAX_DEPTH`` terms, so the float64 BLAS sums are exact
  integers), then saturated to [-2**47, 2**47 - 1], the range TFLite's int64
  ``MultiplyByQuantizedMultiplier`` assumes;
* CONV_2D and DEPTHWISE_CONV_2D requantize like their 16x8 kernels (the Q31 multiplier
  reduced to Q15, one rounding: ``int16x8.multiply_by_quantized_multiplier_int64``);
  FULLY_CONNECTED like its 16x8 kernel, ``round(acc * scale)`` in float64 (ties away from
  zero); then clamped to ``[act_min, act_max]`` as int16.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .conv import conv_groups
from .fixedpoint import requantize_double
from .int16x8 import (
    INT16_MAX,
    INT16_MIN,
    check_requantization,
    check_window_geometry,
    grouped_conv_sums,
    multiply_by_quantized_multiplier_int64,
    store_int16,
)
from .output import check_act_range

__all__ = ["check_conv_16x16", "conv2d_16x16", "depthwise_conv2d_16x16", "check_fully_connected_16x16",
           "fully_connected_16x16", "ACC_MIN", "ACC_MAX",
           "MAX_DEPTH", "saturate_accumulator"]

ACC_MIN, ACC_MAX = -(1 << 47), (1 << 47) - 1
#: The most terms one output sums: 2**22 products below 2**30 stay below 2**53 (exact in float64).
MAX_DEPTH = 1 << 22


def _check_operands(x: np.ndarray, w: np.ndarray, depth: int) -> None:
    if x.dtype != np.int16 or w.dtype != np.int16:
        raise TypeError(f"input and weights must be int16, got {x.dtype} and {w.dtype}")
    if np.any(w == INT16_MIN):
        raise InvalidCommand("int16 weights are symmetric: -32768 is not allowed")
    if depth > MAX_DEPTH:
        raise InvalidCommand(f"an output sums {depth} products, more than {MAX_DEPTH}")


def _check_quant(n_out: int, bias: np.ndarray | None, multiplier, shift) -> tuple[np.ndarray, np.ndarray]:
    multiplier, shift = np.asarray(multiplier), np.asarray(shift)
    if multiplier.shape != shift.shape or multiplier.shape not in ((n_out,), (1,)):
        raise InvalidCommand(f"multiplier/shift must both be ({n_out},) or (1,), "
                             f"got {multiplier.shape} and {shift.shape}")
    _check_bias(n_out, bias)
    return multiplier.astype(np.int64), shift.astype(np.int64)


def _check_bias(n_out: int, bias: np.ndarray | None) -> None:
    if bias is not None and (bias.dtype != np.int64 or bias.shape != (n_out,)):
        raise InvalidCommand(f"bias must be int64 ({n_out},), got {bias.dtype} {bias.shape}")


def saturate_accumulator(acc_f: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """The int64 accumulators: the exact float64 sums plus the bias, saturated to
    [ACC_MIN, ACC_MAX]."""
    acc = acc_f.astype(np.int64)
    if bias is not None:  # |sums| < 2**53: a bias clipped to 2**62 cannot wrap, and saturates alike
        acc += np.clip(bias, -(1 << 62), 1 << 62)
    return np.clip(acc, ACC_MIN, ACC_MAX)


def _finish(acc_f: np.ndarray, bias: np.ndarray | None, multiplier: np.ndarray, shift: np.ndarray,
            act_min: int, act_max: int, out: np.ndarray | None) -> np.ndarray:
    scaled = multiply_by_quantized_multiplier_int64(saturate_accumulator(acc_f, bias), multiplier, shift)
    return store_int16(scaled, 0, act_min, act_max, out)


def _windows(x: np.ndarray, kh: int, kw: int, stride, dilation, padding, out_hw) -> np.ndarray:
    """(N, OH, OW, C, KH, KW) float64 windows of the zero-padded input (the zero point is 0,
    so padding with zeros equals skipping the outside taps)."""
    (sh, sw, dh, dw, pt, pl, oh, ow), need_h, need_w = check_window_geometry(
        x.shape, kh, kw, stride, dilation, padding, out_hw)
    n, h, w, c = x.shape
    eff_h, eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    xp = np.zeros((n, max(need_h, pt + h), max(need_w, pl + w), c), np.float64)
    xp[:, pt:pt + h, pl:pl + w] = x
    win = np.lib.stride_tricks.sliding_window_view(xp[:, :need_h, :need_w], (eff_h, eff_w), axis=(1, 2))
    return win[:, ::sh, ::sw, :, ::dh, ::dw][:, :oh, :ow]


def conv2d_16x16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                 stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                 out_hw: tuple[int, int], multiplier: np.ndarray, shift: np.ndarray,
                 act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                 out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int16 NHWC convolution (grouped when ``w``'s depth divides ``x``'s).

    x: int16 (N, H, W, Cin); w: int16 (Cout, KH, KW, Cin / groups); bias: int64 (Cout,)
    or None; multiplier/shift: (Cout,) or (1,). Returns int16."""
    act_min, act_max, multiplier, shift = check_conv_16x16(
        x, w, bias, depthwise=False, stride=stride, dilation=dilation, padding=padding, out_hw=out_hw,
        multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max)
    cout, kh, kw, cin_g = w.shape
    win = _windows(x, kh, kw, stride, dilation, padding, out_hw)
    return _finish(grouped_conv_sums(win, w, conv_groups(x.shape[3], w.shape)), bias, multiplier, shift,
                   act_min, act_max, out)


def check_conv_16x16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, depthwise: bool,
                     stride, dilation, padding, out_hw, multiplier, shift, act_min: int,
                     act_max: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Every check :func:`conv2d_16x16` (:func:`depthwise_conv2d_16x16` with ``depthwise``)
    makes of its operands, in its order, without the sums: what the chip runs before a
    first run in C (``units.conv``). Returns the clamp bounds and the requantization's
    multipliers and shifts as int64."""
    if x.ndim != 4 or w.ndim != 4:
        raise InvalidCommand(f"input and filter must be 4-D, got {x.shape} and {w.shape}")
    if depthwise:
        one, kh, kw, cout = w.shape
        _check_operands(x, w, kh * kw)
    else:
        cout, kh, kw, cin_g = w.shape
        _check_operands(x, w, kh * kw * cin_g)
    act_min, act_max = check_act_range(act_min, act_max, INT16_MIN, INT16_MAX)
    cin = x.shape[3]
    if not depthwise:
        conv_groups(cin, w.shape)
    elif one != 1 or cin == 0 or cout % cin:
        raise InvalidCommand(f"depthwise filter {w.shape} does not fit input depth {cin}")
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    check_window_geometry(x.shape, kh, kw, stride, dilation, padding, out_hw)
    check_requantization(multiplier, shift)
    return act_min, act_max, multiplier, shift


def depthwise_conv2d_16x16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                           stride: tuple[int, int], dilation: tuple[int, int],
                           padding: tuple[int, int], out_hw: tuple[int, int],
                           multiplier: np.ndarray, shift: np.ndarray,
                           act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                           out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int16 NHWC depthwise convolution; w: int16 (1, KH, KW, Cout), output
    channel ``c * (Cout / Cin) + m`` reading input channel ``c``."""
    act_min, act_max, multiplier, shift = check_conv_16x16(
        x, w, bias, depthwise=True, stride=stride, dilation=dilation, padding=padding, out_hw=out_hw,
        multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max)
    cin = x.shape[3]
    one, kh, kw, cout = w.shape
    dm = cout // cin
    xr = np.repeat(x, dm, axis=3) if dm > 1 else x
    win = _windows(xr, kh, kw, stride, dilation, padding, out_hw)
    wf = w[0].astype(np.float64)
    acc = np.zeros(win.shape[:4], np.float64)
    for i in range(kh):
        for j in range(kw):
            acc += win[..., i, j] * wf[i, j]
    return _finish(acc, bias, multiplier, shift, act_min, act_max, out)


def check_fully_connected_16x16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, scale, act_min: int,
                                act_max: int) -> tuple[int, int, np.ndarray]:
    """Every check :func:`fully_connected_16x16` makes of its operands, without the sums
    (what a first run in C needs first); the clamp bounds and ``scale`` as float64."""
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise InvalidCommand(f"x must be (M, K) and w (N, K), got {x.shape} and {w.shape}")
    _check_operands(x, w, x.shape[1])
    act_min, act_max = check_act_range(act_min, act_max, INT16_MIN, INT16_MAX)
    n_out = w.shape[0]
    scale = np.asarray(scale, dtype=np.float64)
    if scale.shape not in ((n_out,), (1,)) or not np.all(np.isfinite(scale)):
        raise InvalidCommand(f"scale must be finite ({n_out},) or (1,), got {scale.shape}")
    _check_bias(n_out, bias)
    return act_min, act_max, scale


def fully_connected_16x16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                          scale: np.ndarray, act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                          out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int16 fully connected: x (M, K), w (N, K), bias int64 (N,); requantized
    by ``round(acc * scale)`` in float64, ``scale`` (N,) or (1,)."""
    act_min, act_max, scale = check_fully_connected_16x16(x, w, bias, scale=scale, act_min=act_min,
                                                          act_max=act_max)
    acc = saturate_accumulator(x.astype(np.float64) @ w.astype(np.float64).T, bias)
    return store_int16(requantize_double(acc, scale), 0, act_min, act_max, out)
