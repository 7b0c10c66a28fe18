"""int8 and int16 transposed convolution (NHWC), as LiteRT's reference kernels: every input
pixel scatters ``(x - input_zp) * w`` into an accumulator at ``y * stride - pad + k``
(positions outside the output dropped), then bias and per-channel requantization.
int8: int32 accumulator, MultiplyByQuantizedMultiplier (double rounding), the output zero
point and the clamp. int16 (TFLite's 16x8 scheme, ``reference_integer_ops::TransposeConv``
for int16): zero points 0, int64 accumulator and bias, the int64 MultiplyByQuantizedMultiplier
(``int16x8.multiply_by_quantized_multiplier_int64``) and the int16 clamp.
The products are summed in float64, exact: every partial sum is an integer far below 2^53."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .int16x8 import check_int16_param, multiply_by_quantized_multiplier_int64, store_int16
from .native import calls as native_calls
from .output import check_int8_param, store_int8

__all__ = ["transpose_conv2d", "transpose_conv2d_bound"]


def transpose_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, stride: tuple[int, int],
                     padding: tuple[int, int], out_hw: tuple[int, int], input_zp: int, output_zp: int,
                     multiplier: np.ndarray, shift: np.ndarray, act_min: int = -128, act_max: int = 127,
                     out: np.ndarray | None = None) -> np.ndarray:
    """x int8 or int16 (N, H, W, Cin); w int8 (Cout, KH, KW, Cin); bias (int32 for int8 x,
    int64 for int16 x) (Cout,) or None; multiplier/shift int32 (Cout,) or (1,); returns
    (N, OH, OW, Cout) of x's dtype (int16: zero points 0)."""
    wide = x.dtype == np.int16
    if x.dtype not in (np.int8, np.int16) or w.dtype != np.int8 or x.ndim != 4 or w.ndim != 4:
        raise InvalidCommand("transpose_conv needs int8 or int16 NHWC input and int8 OHWI weights")
    n, h, wd, cin = x.shape
    cout, kh, kw, wcin = w.shape
    (sh, sw), (pt, pl), (oh, ow) = (tuple(int(v) for v in p) for p in (stride, padding, out_hw))
    if wcin != cin or min(sh, sw, kh, kw) < 1 or min(pt, pl) < 0 or min(oh, ow) < 1:
        raise InvalidCommand(f"transpose_conv geometry: x {x.shape}, w {w.shape}, stride {stride}, "
                             f"padding {padding}, out {out_hw}")
    bias_type = np.int64 if wide else np.int32
    if bias is not None and (bias.shape != (cout,) or bias.dtype != bias_type):
        raise InvalidCommand(f"bias must be {np.dtype(bias_type).name} ({cout},)")
    mult, sft = np.asarray(multiplier, np.int64).reshape(-1), np.asarray(shift, np.int64).reshape(-1)
    if mult.size not in (1, cout) or sft.size != mult.size or np.any(sft < -31) or np.any(sft > 30):
        raise InvalidCommand("multiplier/shift must have 1 or Cout entries, shift in [-31, 30]")
    if wide and (input_zp or output_zp):
        raise InvalidCommand("int16 transpose_conv takes zero points 0")
    xf = x.astype(np.float64) - (0 if wide else check_int8_param("input_zp", input_zp))
    wf = w.astype(np.float64)
    # Only the output window receives anything: per filter tap, the input rows and
    # columns that land inside it (so the working memory follows the output, whatever
    # the stride, padding or filter size a descriptor names).
    acc = np.zeros((n, oh, ow, cout), np.float64)
    for ky in range(kh):
        rows = _landing(h, sh, ky - pt, oh)
        if rows is None:
            continue
        for kx in range(kw):
            cols = _landing(wd, sw, kx - pl, ow)
            if cols is None:
                continue
            (y0, y1, oy), (x0, x1, ox) = rows, cols
            part = xf[:, y0:y1, x0:x1] @ wf[:, ky, kx].T
            acc[:, oy:oy + (y1 - y0 - 1) * sh + 1:sh, ox:ox + (x1 - x0 - 1) * sw + 1:sw] += part
    if out is not None and (out.dtype != x.dtype or out.shape != (n, oh, ow, cout)):
        raise InvalidCommand(f"out must be {x.dtype} {(n, oh, ow, cout)}")
    if wide:
        total = acc.astype(np.int64)
        if bias is not None:
            total += bias
        raw = multiply_by_quantized_multiplier_int64(total, mult, sft)
        return store_int16(raw, 0, check_int16_param("act_min", act_min), check_int16_param("act_max", act_max),
                           out)
    total = wrap_int32(acc.astype(np.int64))
    if bias is not None:
        total = wrap_int32(total + bias.astype(np.int64))
    raw = multiply_by_quantized_multiplier(total, mult, sft)
    return store_int8(raw, check_int8_param("output_zp", output_zp), check_int8_param("act_min", act_min),
                      check_int8_param("act_max", act_max), out)


def transpose_conv2d_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, out: np.ndarray,
                           **params) -> native_calls.BoundCall | None:
    """``transpose_conv2d`` into ``out``, then a call that reruns it in C on the same arrays
    (``transpose_conv_kernels.c``); None when the C kernels cannot take it."""
    transpose_conv2d(x, w, bias, out=out, **params)
    stride, padding = (tuple(int(v) for v in params[k]) for k in ("stride", "padding"))
    return native_calls.bind_transpose_conv(
        x, w, bias, stride=stride, padding=padding, input_zp=int(params["input_zp"]),
        output_zp=int(params["output_zp"]), multiplier=params["multiplier"], shift=params["shift"],
        act_min=int(params.get("act_min", -128)), act_max=int(params.get("act_max", 127)), out=out)


def _landing(size: int, stride: int, offset: int, out_size: int) -> tuple[int, int, int] | None:
    """Input positions ``i`` in ``[first, end)`` whose ``i * stride + offset`` lies in
    ``[0, out_size)``, and the first one's output position; None when there are none."""
    first = max(0, -(offset // stride))              # ceil(-offset / stride)
    end = min(size, (out_size - 1 - offset) // stride + 1) if out_size - 1 - offset >= 0 else 0
    if first >= end:
        return None
    return first, end, first * stride + offset
