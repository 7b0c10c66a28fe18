"""int8 2-D convolution and depthwise convolution (NHWC), as TFLite's reference kernels.

``reference_integer_ops::ConvPerChannel`` / ``DepthwiseConvPerChannel``: points outside the
image are skipped, which equals padding with the input zero point; int32 accumulation;
per-channel fixed-point requantization (``MultiplyByQuantizedMultiplier``, double rounding).

Speed: the input is shifted by its zero point into float32 (or float64 when the sums could
pass 2**24), padded once, and read through ``sliding_window_view``. Conv is one BLAS GEMM
over an im2col matrix (1x1 stride-1 convs skip im2col); depthwise is KH*KW vectorized
multiply-adds. All partial sums are integers below the float's exact range, so the
results are exact.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .gemm import exact_float_type, max_abs
from .output import check_int8_param, store_int8

__all__ = ["conv2d", "depthwise_conv2d"]


def _pair(name: str, v) -> tuple[int, int]:
    if len(v) != 2:
        raise ValueError(f"{name} must be a pair (h, w), got {v!r}")
    return int(v[0]), int(v[1])


def _float_type(k: int, input_zp: int, w: np.ndarray) -> type:
    ftype = exact_float_type(k, max(abs(-128 - input_zp), abs(127 - input_zp)), max_abs(w))
    if ftype is None:
        raise ValueError(f"reduction depth {k} is too large for exact accumulation")
    return ftype


def _check_common(x: np.ndarray, w: np.ndarray, stride, dilation, padding, out_hw,
                  input_zp: int, output_zp: int, act_min: int, act_max: int) -> tuple:
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise TypeError(f"input and filter must be int8, got {x.dtype} and {w.dtype}")
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"input and filter must be 4-D, got {x.shape} and {w.shape}")
    sh, sw = _pair("stride", stride)
    dh, dw = _pair("dilation", dilation)
    pt, pl = _pair("padding", padding)
    oh, ow = _pair("out_hw", out_hw)
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, oh, ow) < 0:
        raise ValueError("stride/dilation must be >= 1, padding/output size >= 0")
    check_int8_param("input_zp", input_zp)
    check_int8_param("output_zp", output_zp)
    check_int8_param("act_min", act_min)
    check_int8_param("act_max", act_max)
    if act_min > act_max:
        raise ValueError(f"act_min {act_min} > act_max {act_max}")
    return sh, sw, dh, dw, pt, pl, oh, ow


def _check_quant(n_out: int, bias, multiplier, shift) -> tuple[np.ndarray, np.ndarray]:
    multiplier, shift = np.asarray(multiplier), np.asarray(shift)
    if multiplier.shape != shift.shape or multiplier.shape not in ((n_out,), (1,)):
        raise ValueError(f"multiplier/shift must both be ({n_out},) or (1,), "
                         f"got {multiplier.shape} and {shift.shape}")
    if bias is not None and (bias.dtype != np.int32 or bias.shape != (n_out,)):
        raise ValueError(f"bias must be int32 ({n_out},), got {bias.dtype} {bias.shape}")
    return multiplier, shift


def _windows(x: np.ndarray, input_zp: int, ftype: type, kh: int, kw: int,
             sh: int, sw: int, dh: int, dw: int, pt: int, pl: int,
             oh: int, ow: int) -> np.ndarray:
    """(N, OH, OW, C, KH, KW) view of the zero-point-shifted, zero-padded input."""
    n, h, w_, c = x.shape
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    pb, pr = max(0, need_h - h - pt), max(0, need_w - w_ - pl)
    xf = np.zeros((n, pt + h + pb, pl + w_ + pr, c), dtype=ftype)
    np.subtract(x, ftype(input_zp), out=xf[:, pt:pt + h, pl:pl + w_, :], dtype=ftype)
    xf = xf[:, :max(need_h, 1), :max(need_w, 1), :]
    win = sliding_window_view(xf, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    return win[:, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, :, ::dh, ::dw]


def _finish(acc_f: np.ndarray, bias, multiplier, shift, output_zp, act_min, act_max, out):
    acc = acc_f.astype(np.int64)
    if bias is not None:
        acc += bias
    acc = wrap_int32(acc)
    scaled = multiply_by_quantized_multiplier(acc, multiplier, shift)
    return store_int8(scaled, output_zp, act_min, act_max, out)


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
           stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
           out_hw: tuple[int, int], input_zp: int, output_zp: int,
           multiplier: np.ndarray, shift: np.ndarray,
           act_min: int = -128, act_max: int = 127,
           out: np.ndarray | None = None) -> np.ndarray:
    """int8 NHWC convolution, grouped when ``w``'s input depth divides ``x``'s.

    x: int8 (N, H, W, Cin); w: int8 (Cout, KH, KW, Cin / groups), zero point 0;
    bias: int32 (Cout,) or None; stride/dilation (h, w); padding (top, left) before the
    image (see ``spec.ops.conv_geometry``); out_hw the output (OH, OW);
    multiplier/shift int32 (Cout,) or (1,). Returns int8 (N, OH, OW, Cout).
    """
    sh, sw, dh, dw, pt, pl, oh, ow = _check_common(
        x, w, stride, dilation, padding, out_hw, input_zp, output_zp, act_min, act_max)
    n, _, _, cin = x.shape
    cout, kh, kw, cin_g = w.shape
    if cin_g == 0 or cin % cin_g or cout % (cin // cin_g):
        raise ValueError(f"filter {w.shape} does not group input depth {cin}")
    groups = cin // cin_g
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    if out is not None and (out.dtype != np.int8 or out.shape != (n, oh, ow, cout)):
        raise ValueError(f"out must be int8 {(n, oh, ow, cout)}, got {out.dtype} {out.shape}")

    k = kh * kw * cin_g
    ftype = _float_type(k, input_zp, w)
    if kh == kw == 1 and sh == sw == 1 and pt == pl == 0 and (oh, ow) == x.shape[1:3]:
        cols = (x.reshape(-1, cin).astype(ftype) - ftype(input_zp)).reshape(-1, groups, cin_g)
    else:
        win = _windows(x, input_zp, ftype, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow)
        # (N, OH, OW, C, KH, KW) -> rows of (group, KH, KW, Cin_g) to match the filter layout.
        win = win.reshape(n, oh, ow, groups, cin_g, kh, kw).transpose(0, 1, 2, 3, 5, 6, 4)
        cols = win.reshape(n * oh * ow, groups, k)
    wf = w.reshape(groups, cout // groups, k).astype(ftype)
    if groups == 1:
        acc_f = cols[:, 0, :] @ wf[0].T
    else:
        acc_f = np.einsum("mgk,gok->mgo", cols, wf, optimize=True).reshape(-1, cout)
    res = _finish(acc_f, bias, multiplier, shift, output_zp, act_min, act_max,
                  None if out is None else out.reshape(-1, cout))
    return out if out is not None else res.reshape(n, oh, ow, cout)


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                     stride: tuple[int, int], dilation: tuple[int, int],
                     padding: tuple[int, int], out_hw: tuple[int, int],
                     input_zp: int, output_zp: int,
                     multiplier: np.ndarray, shift: np.ndarray,
                     act_min: int = -128, act_max: int = 127,
                     out: np.ndarray | None = None) -> np.ndarray:
    """int8 NHWC depthwise convolution with depth multiplier ``Cout / Cin``.

    x: int8 (N, H, W, Cin); w: int8 (1, KH, KW, Cout) with output channel
    ``c * multiplier + m`` reading input channel ``c``; other arguments as :func:`conv2d`.
    """
    sh, sw, dh, dw, pt, pl, oh, ow = _check_common(
        x, w, stride, dilation, padding, out_hw, input_zp, output_zp, act_min, act_max)
    n, _, _, cin = x.shape
    one, kh, kw, cout = w.shape
    if one != 1 or cin == 0 or cout % cin:
        raise ValueError(f"depthwise filter {w.shape} does not fit input depth {cin}")
    dm = cout // cin
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    if out is not None and (out.dtype != np.int8 or out.shape != (n, oh, ow, cout)):
        raise ValueError(f"out must be int8 {(n, oh, ow, cout)}, got {out.dtype} {out.shape}")

    ftype = _float_type(kh * kw, input_zp, w)
    win = _windows(x, input_zp, ftype, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow)
    wf = w.reshape(kh, kw, cin, dm).astype(ftype)
    acc_f = np.zeros((n, oh, ow, cin, dm), dtype=ftype)
    tmp = np.empty_like(acc_f)
    for i in range(kh):  # KH*KW taps, each a whole-tensor multiply-add
        for j in range(kw):
            np.multiply(win[:, :, :, :, i, j, None], wf[i, j], out=tmp)
            acc_f += tmp
    res = _finish(acc_f.reshape(n, oh, ow, cout), bias, multiplier, shift, output_zp,
                  act_min, act_max, out)
    return res
