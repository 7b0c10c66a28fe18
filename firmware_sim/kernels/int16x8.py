"""int16-activation kernels ("16x8" quantization), as LiteRT's reference kernels.

TFLite's 16x8 scheme: activations int16, symmetric (zero point 0); weights int8,
symmetric, per channel; the bias of CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED is
int64 and the accumulator is int64 (exact here: the sums run in float64 BLAS, whose
partial sums are integers far below 2**53, then int64).

Requantization of the int64 accumulators is the int64 ``MultiplyByQuantizedMultiplier``
of the default (``TFLITE_SINGLE_ROUNDING=0``) build: the Q31 multiplier is first reduced
to Q15 (``(m + 2**15) >> 16``, saturated at ``0x7FFF``), then one rounding
``(x * m15 + 2**(14 - shift)) >> (15 - shift)`` (ties toward +inf), truncated to int32.
ADD, SUB and MUL keep the int8 arithmetic (``elementwise``) with ADD's left shift 15 instead of
20 (the ``pot_scale_int16 = false`` general path), and int16 clamping.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from npu_hw.ops import MAX_FILTER_EXTENT

from ..errors import InvalidCommand
from .conv import conv_groups
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    quantize_quotient,
    requantize_double,
    wrap_int32,
)
from .native import int16_calls
from .native.calls import BoundCall
from .output import broadcast_out_shape, check_act_range, check_int_param, emit

__all__ = ["softmax_int16", "softmax_int16_bound", "int16_lut", "lut_lookup_int16", "INT16_MIN", "INT16_MAX",
           "ADD_LEFT_SHIFT_INT16", "check_int16_param", "check_zero_points", "store_int16",
           "multiply_by_quantized_multiplier_int64", "check_requantization", "check_window_geometry",
           "check_conv_16x8", "conv2d_16x8", "depthwise_conv2d_16x8", "check_fully_connected_16x8",
           "check_add_int16", "check_mul_int16",
           "fully_connected_16x8", "add_int16", "add_int16_per_channel", "sub_int16", "channel_columns",
           "mul_int16", "requantize", "quantize_int16",
           "dequantize_int16"]

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
ADD_LEFT_SHIFT_INT16 = 15
_QMIN = {np.dtype(np.int8): -128, np.dtype(np.int16): INT16_MIN}
_QMAX = {np.dtype(np.int8): 127, np.dtype(np.int16): INT16_MAX}


def check_int16_param(name: str, value: int) -> int:
    """``value`` as int after checking it fits int16 (clamp bounds, fill values)."""
    return check_int_param(name, value, INT16_MIN, INT16_MAX)


def _check_act(act_min: int, act_max: int) -> tuple[int, int]:
    return check_act_range(act_min, act_max, INT16_MIN, INT16_MAX)


def check_zero_points(**zero_points: int) -> None:
    """Every zero point of an int16 tensor is 0 in TFLite's 16x8 scheme."""
    for name, zp in zero_points.items():
        if int(zp) != 0:
            raise InvalidCommand(f"{name} must be 0 for int16 activations, got {zp}")


def store_int16(scaled: np.ndarray, output_zp: int, act_min: int, act_max: int,
                out: np.ndarray | None = None) -> np.ndarray:
    """``clamp(scaled + output_zp, act_min, act_max)`` as int16 (the addition wraps in
    int32 as TFLite's C code does), into ``out`` when given."""
    v = np.array(wrap_int32(np.asarray(scaled, dtype=np.int64) + np.int64(output_zp)), np.int64)
    np.clip(v, act_min, act_max, out=v)
    return emit(v.astype(np.int16), out)


def _store(v: np.ndarray, dtype: np.dtype, out: np.ndarray | None) -> np.ndarray:
    dtype = np.dtype(dtype)
    np.clip(v, _QMIN[dtype], _QMAX[dtype], out=v)
    return emit(v.astype(dtype), out)


def multiply_by_quantized_multiplier_int64(x: np.ndarray, multiplier: np.ndarray,
                                           shift: np.ndarray) -> np.ndarray:
    """TFLite's ``MultiplyByQuantizedMultiplier(int64_t x, ...)``, default build.

    ``multiplier`` Q31 (>= 0), ``shift`` in [-31, 14] (positive = left); ``x`` int64
    accumulators (TFLite assumes |x| < 2**47). Returns int32 values as int64.
    """
    x = np.asarray(x, dtype=np.int64)
    m, s = check_requantization(multiplier, shift)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - s
    with np.errstate(over="ignore"):
        v = x * reduced + (np.int64(1) << (total - 1))
    return wrap_int32(v >> total)


def check_requantization(multiplier, shift) -> tuple[np.ndarray, np.ndarray]:
    """The int64 requantization's multipliers (Q31, >= 0) and shifts ([-31, 14]) as int64,
    checked (InvalidCommand)."""
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    if np.any(m < 0):
        raise InvalidCommand("int16 requantization multipliers must be non-negative")
    if np.any((s < -31) | (s > 14)):
        raise InvalidCommand("int16 requantization shift must be in [-31, 14]")
    return m, s


def _check_quant(n_out: int, bias: np.ndarray | None, multiplier, shift
                 ) -> tuple[np.ndarray, np.ndarray]:
    multiplier, shift = np.asarray(multiplier), np.asarray(shift)
    if multiplier.shape != shift.shape or multiplier.shape not in ((n_out,), (1,)):
        raise InvalidCommand(f"multiplier/shift must both be ({n_out},) or (1,), "
                             f"got {multiplier.shape} and {shift.shape}")
    if bias is not None and (bias.dtype != np.int64 or bias.shape != (n_out,)):
        raise InvalidCommand(f"bias must be int64 ({n_out},), got {bias.dtype} {bias.shape}")
    return multiplier.astype(np.int64), shift.astype(np.int64)


def _finish(acc_f: np.ndarray, bias: np.ndarray | None, multiplier: np.ndarray,
            shift: np.ndarray, act_min: int, act_max: int, out: np.ndarray | None) -> np.ndarray:
    acc = acc_f.astype(np.int64)
    if bias is not None:
        acc += bias
    scaled = multiply_by_quantized_multiplier_int64(acc, multiplier, shift)
    return store_int16(scaled, 0, act_min, act_max, out)


def _check_conv_operands(x: np.ndarray, w: np.ndarray) -> None:
    if x.dtype != np.int16 or w.dtype != np.int8:
        raise TypeError(f"input must be int16 and filter int8, got {x.dtype} and {w.dtype}")
    if x.ndim != 4 or w.ndim != 4:
        raise InvalidCommand(f"input and filter must be 4-D, got {x.shape} and {w.shape}")


def check_window_geometry(shape: tuple[int, ...], kh: int, kw: int, stride, dilation, padding,
                          out_hw) -> tuple[tuple[int, ...], int, int]:
    """A convolution's geometry over an NHWC input of ``shape``, checked (InvalidCommand):
    (stride, dilation, padding, output size as one 8-tuple of ints, the padded input's
    rows and columns the output reads)."""
    (sh, sw), (dh, dw), (pt, pl), (oh, ow) = (tuple(int(v) for v in p)
                                              for p in (stride, dilation, padding, out_hw))
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, oh, ow) < 0:
        raise InvalidCommand("stride/dilation must be >= 1, padding/output size >= 0")
    h, w = shape[1], shape[2]
    eff_h, eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    need_h, need_w = (oh - 1) * sh + eff_h, (ow - 1) * sw + eff_w
    if max(eff_h, eff_w) > MAX_FILTER_EXTENT or pt >= eff_h or pl >= eff_w:
        raise InvalidCommand(f"padding must be smaller than the dilated filter (<= {MAX_FILTER_EXTENT})")
    if need_h - pt - h >= eff_h or need_w - pl - w >= eff_w:
        raise InvalidCommand("padding after the image must be smaller than the dilated filter")
    return (sh, sw, dh, dw, pt, pl, oh, ow), need_h, need_w


def _padded_windows(x: np.ndarray, kh: int, kw: int, stride, dilation, padding,
                    out_hw) -> np.ndarray:
    """(N, OH, OW, C, KH, KW) float64 windows of the zero-padded input (zero padding equals
    TFLite's skipping of outside taps: the zero point is 0)."""
    (sh, sw, dh, dw, pt, pl, oh, ow), need_h, need_w = check_window_geometry(
        x.shape, kh, kw, stride, dilation, padding, out_hw)
    n, h, w, c = x.shape
    eff_h, eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    xp = np.zeros((n, max(need_h, pt + h), max(need_w, pl + w), c), np.float64)
    xp[:, pt:pt + h, pl:pl + w] = x
    win = sliding_window_view(xp[:, :need_h, :need_w], (eff_h, eff_w), axis=(1, 2))
    return win[:, ::sh, ::sw, :, ::dh, ::dw][:, :oh, :ow]


def conv2d_16x8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                out_hw: tuple[int, int], multiplier: np.ndarray, shift: np.ndarray,
                act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int8 NHWC convolution (grouped when ``w``'s depth divides ``x``'s).

    x: int16 (N, H, W, Cin), zero point 0; w: int8 (Cout, KH, KW, Cin / groups);
    bias: int64 (Cout,) or None; multiplier/shift: (Cout,) or (1,). Returns int16.
    """
    act_min, act_max, multiplier, shift = check_conv_16x8(
        x, w, bias, depthwise=False, stride=stride, dilation=dilation, padding=padding, out_hw=out_hw,
        multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max)
    cout, kh, kw = w.shape[:3]
    win = _padded_windows(x, kh, kw, stride, dilation, padding, out_hw)
    return _finish(grouped_conv_sums(win, w, conv_groups(x.shape[3], w.shape)), bias, multiplier, shift,
                   act_min, act_max, out)


def check_conv_16x8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, depthwise: bool,
                    stride, dilation, padding, out_hw, multiplier, shift, act_min: int,
                    act_max: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Every check :func:`conv2d_16x8` (:func:`depthwise_conv2d_16x8` with ``depthwise``)
    makes of its operands, in its order, without the sums: what the chip runs before a
    first run in C (``units.conv``). Returns the clamp bounds and the requantization's
    multipliers and shifts as int64."""
    _check_conv_operands(x, w)
    act_min, act_max = _check_act(act_min, act_max)
    cin = x.shape[3]
    if depthwise:
        one, kh, kw, cout = w.shape
        if one != 1 or cin == 0 or cout % cin:
            raise InvalidCommand(f"depthwise filter {w.shape} does not fit input depth {cin}")
    else:
        cout, kh, kw = w.shape[:3]
        conv_groups(cin, w.shape)
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    check_window_geometry(x.shape, kh, kw, stride, dilation, padding, out_hw)
    check_requantization(multiplier, shift)
    return act_min, act_max, multiplier, shift


def grouped_conv_sums(win: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """Exact convolution sums (float64, (N, OH, OW, Cout)) of windows ``win`` (N, OH, OW,
    Cin, KH, KW) and filters ``w`` (Cout, KH, KW, Cin / groups): (N, OH, OW, groups, KH,
    KW, Cin_g) rows against (groups, KH*KW*Cin_g, Cout_g) filters. Exact while every sum
    stays within 2**53 (int16 x int16 over any real filter does)."""
    n, oh, ow = win.shape[:3]
    cout, kh, kw, cin_g = w.shape
    rows = win.reshape(n * oh * ow, groups, cin_g, kh, kw).transpose(1, 0, 3, 4, 2)
    rows = rows.reshape(groups, n * oh * ow, kh * kw * cin_g)
    wf = w.astype(np.float64).reshape(groups, cout // groups, kh * kw * cin_g).transpose(0, 2, 1)
    acc = np.concatenate([rows[g] @ wf[g] for g in range(groups)], axis=1)
    return acc.reshape(n, oh, ow, cout)


def depthwise_conv2d_16x8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                          stride: tuple[int, int], dilation: tuple[int, int],
                          padding: tuple[int, int], out_hw: tuple[int, int],
                          multiplier: np.ndarray, shift: np.ndarray,
                          act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                          out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int8 NHWC depthwise convolution; w: int8 (1, KH, KW, Cout) with output
    channel ``c * (Cout / Cin) + m`` reading input channel ``c``."""
    act_min, act_max, multiplier, shift = check_conv_16x8(
        x, w, bias, depthwise=True, stride=stride, dilation=dilation, padding=padding, out_hw=out_hw,
        multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max)
    cin = x.shape[3]
    one, kh, kw, cout = w.shape
    dm = cout // cin
    xr = np.repeat(x, dm, axis=3) if dm > 1 else x  # output channel c * dm + m reads channel c
    win = _padded_windows(xr, kh, kw, stride, dilation, padding, out_hw)  # (N, OH, OW, Cout, KH, KW)
    wf = w[0].astype(np.float64)
    acc = np.zeros(win.shape[:4], np.float64)
    for i in range(kh):  # one multiply-add over the whole output per tap
        for j in range(kw):
            acc += win[..., i, j] * wf[i, j]
    return _finish(acc, bias, multiplier, shift, act_min, act_max, out)


def fully_connected_16x8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                         scale: np.ndarray, act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                         out: np.ndarray | None = None) -> np.ndarray:
    """int16 x int8 fully connected: x int16 (M, K), w int8 (N, K), bias int64 (N,).

    LiteRT's reference kernel requantizes in double here too, like its int8 one:
    ``round(acc * scale)`` with ``scale`` float64 ``effective_scale(...)``, (N,) or (1,).
    """
    act_min, act_max, scale = check_fully_connected_16x8(x, w, bias, scale=scale, act_min=act_min, act_max=act_max)
    acc = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64)
    if bias is not None:
        acc += bias
    return store_int16(requantize_double(acc, scale), 0, act_min, act_max, out)


def check_fully_connected_16x8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, scale, act_min: int,
                               act_max: int) -> tuple[int, int, np.ndarray]:
    """Every check :func:`fully_connected_16x8` makes of its operands, without the sums (what
    a first run in C needs first); the clamp bounds and ``scale`` as float64."""
    if x.dtype != np.int16 or w.dtype != np.int8:
        raise TypeError(f"x must be int16 and w int8, got {x.dtype} and {w.dtype}")
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise InvalidCommand(f"x must be (M, K) and w (N, K), got {x.shape} and {w.shape}")
    act_min, act_max = _check_act(act_min, act_max)
    n_out = w.shape[0]
    scale = np.asarray(scale, dtype=np.float64)
    if scale.shape not in ((n_out,), (1,)) or not np.all(np.isfinite(scale)):
        raise InvalidCommand(f"scale must be finite ({n_out},) or (1,), got {scale.shape}")
    if bias is not None and (bias.dtype != np.int64 or bias.shape != (n_out,)):
        raise InvalidCommand(f"bias must be int64 ({n_out},), got {bias.dtype} {bias.shape}")
    return act_min, act_max, scale


def _broadcast(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> None:
    for name, v in (("a", a), ("b", b)):
        if v.dtype != np.int16:
            raise TypeError(f"{name} must be int16, got {v.dtype}")
    broadcast_out_shape(a, b, out, np.int16)


def add_int16(a: np.ndarray, b: np.ndarray, *, left_shift: int, input1_multiplier: int,
              input1_shift: int, input2_multiplier: int, input2_shift: int,
              output_multiplier: int, output_shift: int, act_min: int = INT16_MIN,
              act_max: int = INT16_MAX, out: np.ndarray | None = None, subtract: bool = False) -> np.ndarray:
    """int16 ADD (zero points 0); parameters from ``spec.fixedpoint.add_params`` with
    ``left_shift=15``. The multipliers and shifts may also be arrays along the output's
    last axis (:func:`add_int16_per_channel`). ``subtract``: ``a - b`` (:func:`sub_int16`)."""
    act_min, act_max = check_add_int16(a, b, out, left_shift=left_shift, shifts=(input1_shift, input2_shift,
                                       output_shift), multipliers=(input1_multiplier, input2_multiplier,
                                       output_multiplier), act_min=act_min, act_max=act_max)
    shifts = [np.asarray(v, np.int64) for v in (input1_shift, input2_shift, output_shift)]
    s1 = multiply_by_quantized_multiplier(a.astype(np.int64) << left_shift, input1_multiplier, shifts[0])
    s2 = multiply_by_quantized_multiplier(b.astype(np.int64) << left_shift, input2_multiplier, shifts[1])
    raw = multiply_by_quantized_multiplier(wrap_int32(s1 - s2 if subtract else s1 + s2), output_multiplier, shifts[2])
    return store_int16(raw, 0, act_min, act_max, out)


def check_add_int16(a: np.ndarray, b: np.ndarray, out: np.ndarray | None, *, left_shift: int, shifts,
                    multipliers, act_min: int, act_max: int) -> tuple[int, int]:
    """Every check :func:`add_int16` makes of its operands and parameters, without adding
    (what a first run in C needs first); the clamp bounds."""
    _broadcast(a, b, out)
    act_min, act_max = _check_act(act_min, act_max)
    if not 0 <= left_shift <= 16:
        raise InvalidCommand("int16 ADD left_shift must be in [0, 16]")
    shifts = [np.asarray(v, np.int64) for v in shifts]
    if any(np.any(v > 0) for v in shifts):
        raise InvalidCommand("ADD shifts must be <= 0 (multipliers below one)")
    if any(np.any(np.asarray(m, np.int64) < 0) for m in multipliers):
        raise InvalidCommand("ADD multipliers must be non-negative")
    for shift in shifts:
        if np.any((shift < -31) | (shift > 30)):
            raise InvalidCommand("requantization shift must be in [-31, 30]")
    return act_min, act_max


def check_mul_int16(a: np.ndarray, b: np.ndarray, out: np.ndarray | None, *, shift: int, act_min: int,
                    act_max: int) -> tuple[int, int]:
    """Every check :func:`mul_int16` makes, without multiplying; the clamp bounds."""
    _broadcast(a, b, out)
    act_min, act_max = _check_act(act_min, act_max)
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("requantization shift must be in [-31, 30]")
    return act_min, act_max


def sub_int16(a: np.ndarray, b: np.ndarray, *, left_shift: int, input1_multiplier: int,
              input1_shift: int, input2_multiplier: int, input2_shift: int,
              output_multiplier: int, output_shift: int, act_min: int = INT16_MIN,
              act_max: int = INT16_MAX, out: np.ndarray | None = None) -> np.ndarray:
    """int16 SUB ``a - b`` (zero points 0): LiteRT's general int16 SUB (``pot_scale_int16 =
    false``), :func:`add_int16`'s arithmetic and parameters with the scaled inputs subtracted."""
    return add_int16(a, b, left_shift=left_shift, input1_multiplier=input1_multiplier, input1_shift=input1_shift,
                     input2_multiplier=input2_multiplier, input2_shift=input2_shift,
                     output_multiplier=output_multiplier, output_shift=output_shift, act_min=act_min,
                     act_max=act_max, out=out, subtract=True)


def channel_columns(params: np.ndarray, channels: int, columns: int) -> list[np.ndarray]:
    """The columns of a per-channel parameter array ``[channels, columns]`` (int32), after
    checking its shape against the output's channel count."""
    params = np.asarray(params)
    if params.dtype != np.int32 or params.shape != (channels, columns):
        raise InvalidCommand(f"per-channel parameters must be int32 ({channels}, {columns}), "
                             f"got {params.dtype} {params.shape}")
    return [params[:, k].astype(np.int64) for k in range(columns)]


def add_int16_per_channel(a: np.ndarray, b: np.ndarray, *, left_shift: int, params: np.ndarray,
                          act_min: int = INT16_MIN, act_max: int = INT16_MAX,
                          out: np.ndarray | None = None) -> np.ndarray:
    """int16 ADD whose output channel c (the last axis) is requantized with ``params[c]``,
    int32 ``[channels, 6]``: ``npu_hw.ops.ADD16_CHANNEL_PARAMS`` (:func:`add_int16`'s
    arithmetic with that channel's multipliers and shifts)."""
    shape = broadcast_out_shape(a, b, out, np.int16)
    m1, s1, m2, s2, mo, so = channel_columns(params, shape[-1] if shape else 1, 6)
    return add_int16(a, b, left_shift=left_shift, input1_multiplier=m1, input1_shift=s1, input2_multiplier=m2,
                     input2_shift=s2, output_multiplier=mo, output_shift=so, act_min=act_min, act_max=act_max,
                     out=out)


def mul_int16(a: np.ndarray, b: np.ndarray, *, multiplier: int, shift: int,
              act_min: int = INT16_MIN, act_max: int = INT16_MAX,
              out: np.ndarray | None = None) -> np.ndarray:
    """int16 MUL (zero points 0): ``requant(a * b)``; multiplier from ``mul_multiplier``."""
    act_min, act_max = check_mul_int16(a, b, out, shift=shift, act_min=act_min, act_max=act_max)
    raw = multiply_by_quantized_multiplier(a.astype(np.int64) * b.astype(np.int64),
                                           multiplier, shift)
    return store_int16(raw, 0, act_min, act_max, out)


def _round(v: float) -> float:
    """C ``round()``: nearest, ties away from zero (exact for every double)."""
    a = abs(v)
    r = math.floor(a)
    return math.copysign(r + 1.0 if a - r >= 0.5 else r, v)


def int16_lut(fn, input_scale: float, input_zp: int, output_scale: float, output_zp: int) -> np.ndarray:
    """The 513-entry int16 table TFLite's ``LUTPopulateInt16<double>`` builds for ``fn``.

    512 samples of ``fn`` over the input range, each lowered by half the error a linear
    interpolation to the next sample makes at the midpoint, plus the last value; all in
    double, rounding half away from zero, clamped to int16.
    """
    in_min = input_scale * float(INT16_MIN - input_zp)
    in_max = input_scale * float(INT16_MAX - input_zp)
    out_min = output_scale * float(INT16_MIN - output_zp)
    out_max = output_scale * float(INT16_MAX - output_zp)
    steps = 512
    step = (in_max - in_min) / steps
    half = step / 2
    inv = float(INT16_MAX - INT16_MIN + 1) / (out_max - out_min)
    lut = np.empty(steps + 1, np.int16)
    for i in range(steps):
        val, mid, nxt = fn(in_min + i * step), fn(in_min + i * step + half), fn(in_min + (i + 1) * step)
        sample = _round(val * inv)
        interpolated = _round((nxt * inv + _round(val * inv)) / 2)
        bias = _round((interpolated - _round(mid * inv)) / 2)
        lut[i] = int(min(max(sample - bias, float(INT16_MIN)), float(INT16_MAX)))
    lut[steps] = int(min(max(_round(fn(in_max) * inv), float(INT16_MIN)), float(INT16_MAX)))
    return lut


def lut_lookup_int16(x: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """TFLite's int16 ``LUTLookup``: the top 9 bits index the 513-entry table, the low 7
    interpolate (rounded); int16 arithmetic wraps as in C."""
    v = x.astype(np.int64)
    index = 256 + (v >> 7)
    base = lut[index].astype(np.int64)
    slope = ((lut[index + 1].astype(np.int64) - base + (1 << 15)) & 0xFFFF) - (1 << 15)
    delta = (slope * (v & 0x7F) + 64) >> 7
    return (((base + delta + (1 << 15)) & 0xFFFF) - (1 << 15)).astype(np.int16)


_RANGE = INT16_MAX - INT16_MIN
_SOFTMAX_LUTS: list[np.ndarray] = []


def _softmax_luts() -> tuple[np.ndarray, np.ndarray]:
    """exp on [-10, 0] and 1 / (1 + x) on [0, 1], both to [-1, 1] (built once)."""
    if not _SOFTMAX_LUTS:
        _SOFTMAX_LUTS.append(int16_lut(math.exp, 10.0 / _RANGE, INT16_MAX, 2.0 / _RANGE, 0))
        _SOFTMAX_LUTS.append(int16_lut(lambda v: 1.0 / (1.0 + v), 1.0 / _RANGE, INT16_MIN, 2.0 / _RANGE, 0))
    return _SOFTMAX_LUTS[0], _SOFTMAX_LUTS[1]


def softmax_int16(x: np.ndarray, *, input_multiplier: int, input_left_shift: int,
                  out: np.ndarray | None = None) -> np.ndarray:
    """int16 SOFTMAX over the last axis of ``x`` (rows, depth), output scale 2**-15.

    Differences to the row maximum, rescaled (``softmax_int16_params``) so that [-65535, 0]
    is [-10, 0], go through the exp table; their sum is normalized by its leading zeros and
    inverted through the 1 / (1 + x) table; each exp times that reciprocal, rounded, is the
    output (clamped to [0, 32767]).
    """
    if x.dtype != np.int16 or x.ndim != 2 or x.shape[1] == 0:
        raise InvalidCommand(f"softmax input must be int16 (rows, depth), got {x.dtype} {x.shape}")
    if not -31 <= int(input_left_shift) <= 30:
        raise InvalidCommand("input_left_shift must be in [-31, 30]")
    exp_lut, recip_lut = _softmax_luts()
    diff = x.astype(np.int64) - x.max(axis=1, keepdims=True)
    scaled = multiply_by_quantized_multiplier(diff, input_multiplier, input_left_shift)
    exps = lut_lookup_int16(np.clip(scaled + 32767, INT16_MIN, INT16_MAX), exp_lut).astype(np.int64)
    total = wrap_int32(exps.sum(axis=1, keepdims=True))
    if np.any(total <= 0):
        raise InvalidCommand("softmax: the exponentials sum to zero (bad input multiplier)")
    headroom = 32 - np.frompyfunc(int.bit_length, 1, 1)(total).astype(np.int64)  # leading zeros
    shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
    recip = lut_lookup_int16(np.clip(shifted - (1 << 15) - (1 << 16), INT16_MIN, INT16_MAX), recip_lut)
    right = 31 - headroom
    result = (exps * recip.astype(np.int64) + (np.int64(1) << (right - 1))) >> right
    return emit(np.clip(result, 0, INT16_MAX).astype(np.int16), out)


def softmax_int16_bound(x: np.ndarray, *, input_multiplier: int, input_left_shift: int,
                        out: np.ndarray) -> BoundCall | None:
    """``softmax_int16`` into ``out``, then a call that reruns it in C on the same arrays
    with the same tables (``softmax16_kernels.c``); None when the C kernels cannot take it."""
    softmax_int16(x, input_multiplier=input_multiplier, input_left_shift=input_left_shift, out=out)
    return int16_calls.bind_softmax16(x, out, *_softmax_luts(), multiplier=input_multiplier,
                                      left_shift=input_left_shift)


def requantize(x: np.ndarray, out_dtype: type | np.dtype, *, input_zp: int, output_zp: int,
               multiplier: int, shift: int, out: np.ndarray | None = None) -> np.ndarray:
    """QUANTIZE between int8 and int16 (either way, or int16 -> int16):
    ``clamp(out_zp + MultiplyByQuantizedMultiplier(x - in_zp))``; ``rescale_multiplier``."""
    out_dtype = np.dtype(out_dtype)
    if x.dtype not in _QMIN or out_dtype not in _QMIN:
        raise TypeError(f"requantize converts int8/int16, got {x.dtype} -> {out_dtype}")
    for name, zp, dt in (("input_zp", input_zp, x.dtype), ("output_zp", output_zp, out_dtype)):
        if not _QMIN[dt] <= int(zp) <= _QMAX[dt]:
            raise InvalidCommand(f"{name} {zp} does not fit {dt}")
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("requantization shift must be in [-31, 30]")
    if out is not None and (out.dtype != out_dtype or out.shape != x.shape):
        raise InvalidCommand(f"out must be {out_dtype} {x.shape}")
    raw = multiply_by_quantized_multiplier(x.astype(np.int64) - int(input_zp), multiplier, shift)
    return _store(wrap_int32(raw + int(output_zp)), out_dtype, out)


def quantize_int16(x: np.ndarray, *, scale: float, zero_point: int = 0,
                   out: np.ndarray | None = None) -> np.ndarray:
    """float32 -> int16: ``clamp(round(x / scale) + zp)``, the division in float32 (values
    whose quotient leaves int32, and NaN, become INT16_MIN as on x86)."""
    if x.dtype != np.float32:
        raise TypeError(f"x must be float32, got {x.dtype}")
    zero_point = check_int16_param("zero_point", zero_point)
    if out is not None and (out.dtype != np.int16 or out.shape != x.shape):
        raise InvalidCommand(f"out must be int16 {x.shape}")
    qi = quantize_quotient(x, scale)
    return store_int16(qi, zero_point, INT16_MIN, INT16_MAX, out)


def dequantize_int16(x: np.ndarray, *, scale: float, zero_point: int = 0,
                     out: np.ndarray | None = None) -> np.ndarray:
    """int16 -> float32: ``float32(double(scale) * (x - zp))``."""
    if x.dtype != np.int16:
        raise TypeError(f"x must be int16, got {x.dtype}")
    zero_point = check_int16_param("zero_point", zero_point)
    res = (np.float64(np.float32(scale)) * (x.astype(np.float64) - zero_point)).astype(np.float32)
    return emit(res, out)

