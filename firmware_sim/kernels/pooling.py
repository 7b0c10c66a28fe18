"""int8 / int16 pooling (NHWC) and MEAN, as TFLite's reference kernels.

Max and average pooling consider only window positions inside the image; the average
divides the int32 sum by that count, rounding half away from zero (input and output
share one quantization). MEAN sums over the reduced axes, folds ``1 / count`` into the
multiplier as ``QuantizedMeanOrSum`` does, then requantizes.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import InvalidCommand
from . import native
from .fixedpoint import multiply_by_quantized_multiplier, wrap_int32
from .int16x8 import check_int16_param, store_int16
from .native import calls as native_calls
from .native import data_calls
from .output import check_int8_param, store_int8

__all__ = ["check_pool2d", "max_pool2d", "max_pool2d_bound", "avg_pool2d", "avg_pool2d_bound", "mean", "mean_bound"]


def _pool_geometry(x: np.ndarray, filter_hw, stride, padding, out_hw) -> tuple[int, ...]:
    if x.dtype not in (np.int8, np.int16) or x.ndim != 4:
        raise InvalidCommand(f"pool input must be int8 or int16 NHWC, got {x.dtype} {x.shape}")
    (fh, fw), (sh, sw), (pt, pl), (oh, ow) = (tuple(int(v) for v in p)
                                              for p in (filter_hw, stride, padding, out_hw))
    if min(fh, fw, sh, sw) < 1 or min(pt, pl, oh, ow) < 0:
        raise InvalidCommand("filter/stride must be >= 1, padding/output size >= 0")
    _, h, w, _ = x.shape
    need_h, need_w = (oh - 1) * sh + fh, (ow - 1) * sw + fw
    pb, pr = max(0, need_h - h - pt), max(0, need_w - w - pl)
    if max(fh, fw) > 4096 or pt >= fh or pl >= fw or pb >= fh or pr >= fw:
        raise InvalidCommand("pooling padding must be smaller than the filter (filter <= 4096)")
    return fh, fw, sh, sw, pt, pl, oh, ow, h, w, pb, pr


def _tiles(x: np.ndarray, g: tuple[int, ...]) -> np.ndarray | None:
    """(N, OH, FH, OW, FW, C) when the windows tile the image without padding or overlap
    (global pooling, 2x2/2...): every window is whole, so no padded copy is needed."""
    fh, fw, sh, sw, pt, pl, oh, ow, h, w, pb, pr = g
    if (sh, sw) != (fh, fw) or pt or pl or pb or pr or oh * fh > h or ow * fw > w:
        return None
    n, c = x.shape[0], x.shape[3]
    return x[:, :oh * fh, :ow * fw].reshape(n, oh, fh, ow, fw, c)


def _pool_windows(x: np.ndarray, g: tuple[int, ...], fill: int) -> np.ndarray:
    fh, fw, sh, sw, pt, pl, oh, ow, h, w, pb, pr = g
    n, _, _, c = x.shape
    need_h, need_w = (oh - 1) * sh + fh, (ow - 1) * sw + fw
    xp = np.full((n, pt + h + pb, pl + w + pr, c), fill, dtype=np.int32)
    xp[:, pt:pt + h, pl:pl + w, :] = x
    win = sliding_window_view(xp[:, :need_h, :need_w, :], (fh, fw), axis=(1, 2))
    return win[:, ::sh, ::sw][:, :oh, :ow]


def _count(out: int, f: int, s: int, p: int, size: int) -> np.ndarray:
    """Window positions inside the image along one axis, per output index."""
    origin = np.arange(out) * s - p
    return np.minimum(f, size - origin) - np.maximum(0, -origin)


def _store(v: np.ndarray, dtype: np.dtype, act_min: int, act_max: int,
           out: np.ndarray | None) -> np.ndarray:
    """Clamp and store in the input's type (int16 pooling: TFLite's 16x8 kernels)."""
    if dtype == np.int16:
        return store_int16(v, 0, check_int16_param("act_min", act_min),
                           check_int16_param("act_max", act_max), out)
    return store_int8(v, 0, check_int8_param("act_min", act_min),
                      check_int8_param("act_max", act_max), out)


def max_pool2d(x: np.ndarray, *, filter_hw: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], out_hw: tuple[int, int],
               act_min: int = -128, act_max: int = 127,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 or int16 NHWC max pooling; padding (top, left), output (OH, OW) from ``conv_geometry``."""
    g = _pool_geometry(x, filter_hw, stride, padding, out_hw)
    tiles = _tiles(x, g)
    if tiles is not None:
        m = tiles.max(axis=(2, 4)).astype(np.int64)
    else:
        m = _pool_windows(x, g, fill=-(1 << 20)).max(axis=(-2, -1)).astype(np.int64)
        if np.any(m == -(1 << 20)):
            raise InvalidCommand("a pooling window lies entirely outside the input")
    return _store(m, x.dtype, act_min, act_max, out)


def avg_pool2d(x: np.ndarray, *, filter_hw: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], out_hw: tuple[int, int],
               act_min: int = -128, act_max: int = 127,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 or int16 NHWC average pooling over the in-image part of each window."""
    g = _pool_geometry(x, filter_hw, stride, padding, out_hw)
    fh, fw, sh, sw, pt, pl, oh, ow, h, w, _, _ = g
    tiles = _tiles(x, g)
    if tiles is not None:
        acc = tiles.sum(axis=(2, 4), dtype=np.int64)
        count = np.int64(fh * fw)
    else:
        acc = _pool_windows(x, g, fill=0).sum(axis=(-2, -1), dtype=np.int64)
        count = np.outer(_count(oh, fh, sh, pt, h), _count(ow, fw, sw, pl, w))[None, :, :, None]
        if np.any(count <= 0):
            raise InvalidCommand("a pooling window lies entirely outside the input")
    half = count // 2
    num = np.where(acc > 0, acc + half, acc - half)
    avg = np.where(num >= 0, num // count, -((-num) // count))  # C division truncates
    return _store(avg, x.dtype, act_min, act_max, out)


def check_pool2d(kind: str, x: np.ndarray, *, filter_hw: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[int, int], out_hw: tuple[int, int], act_min: int, act_max: int,
                 out: np.ndarray) -> None:
    """Every check :func:`max_pool2d` (``kind`` "max") or :func:`avg_pool2d` ("avg") makes
    of its operands, without pooling: what a first run in C needs before its call (the
    geometry, no window wholly outside the input, the clamp bounds, ``out``'s shape)."""
    fh, fw, sh, sw, pt, pl, oh, ow, h, w, _, _ = _pool_geometry(x, filter_hw, stride, padding, out_hw)
    outside = np.any(_count(oh, fh, sh, pt, h) <= 0) or np.any(_count(ow, fw, sw, pl, w) <= 0)
    if outside and (kind == "avg" or x.shape[0] * x.shape[3]):     # max: only a window that exists
        raise InvalidCommand("a pooling window lies entirely outside the input")
    param = check_int16_param if x.dtype == np.int16 else check_int8_param
    param("act_min", act_min)
    param("act_max", act_max)
    if out.shape != (x.shape[0], oh, ow, x.shape[3]):
        raise InvalidCommand(f"pool output {out.shape}, expected {(x.shape[0], oh, ow, x.shape[3])}")


def _pool_bound(kind: str, pool, x: np.ndarray, filter_hw: tuple[int, int], stride: tuple[int, int],
                padding: tuple[int, int], out_hw: tuple[int, int], act_min: int, act_max: int,
                out: np.ndarray) -> native_calls.BoundCall | None:
    """Pooling in C from the first run (after :func:`check_pool2d`), the call returned for
    its reruns; ``pool`` in numpy when there is no C call (None)."""
    bound = None
    if native.library() is not None:
        check_pool2d(kind, x, filter_hw=filter_hw, stride=stride, padding=padding, out_hw=out_hw,
                     act_min=act_min, act_max=act_max, out=out)
        bound = native_calls.bind_pool(kind, x, out, filter_hw, stride, padding, int(act_min), int(act_max))
    if bound is None:
        pool(x, filter_hw=filter_hw, stride=stride, padding=padding, out_hw=out_hw, act_min=act_min,
             act_max=act_max, out=out)
    else:
        bound()
    return bound


def avg_pool2d_bound(x: np.ndarray, *, filter_hw: tuple[int, int], stride: tuple[int, int],
                     padding: tuple[int, int], out_hw: tuple[int, int],
                     act_min: int = -128, act_max: int = 127,
                     out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`avg_pool2d` into ``out``, then a call that reruns it in C on the same arrays
    (``npu_avg_pool_s8``, same arithmetic); None without the C kernels or contiguous arrays."""
    return _pool_bound("avg", avg_pool2d, x, filter_hw, stride, padding, out_hw, act_min, act_max, out)


def max_pool2d_bound(x: np.ndarray, *, filter_hw: tuple[int, int], stride: tuple[int, int],
                     padding: tuple[int, int], out_hw: tuple[int, int],
                     act_min: int = -128, act_max: int = 127,
                     out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`max_pool2d` into ``out``, then a call that reruns it in C on the same arrays
    (``npu_max_pool_s8``); None without the C kernels or contiguous arrays."""
    return _pool_bound("max", max_pool2d, x, filter_hw, stride, padding, out_hw, act_min, act_max, out)


def mean(x: np.ndarray, axes: tuple[int, ...], *, input_zp: int, output_zp: int,
         multiplier: int, shift: int, keep_dims: bool = True,
         out: np.ndarray | None = None) -> np.ndarray:
    """int8 or int16 MEAN over ``axes``; multiplier/shift from
    ``spec.fixedpoint.rescale_multiplier`` (int16: zero points 0, the same arithmetic)."""
    if x.dtype not in (np.int8, np.int16):
        raise TypeError(f"x must be int8 or int16, got {x.dtype}")
    axes = tuple(sorted({a % x.ndim for a in axes})) if x.ndim else ()
    if not axes and x.ndim:
        raise InvalidCommand("mean needs at least one axis")
    count = int(np.prod([x.shape[a] for a in axes]))
    if count == 0:
        raise InvalidCommand("mean over an empty axis")
    total = wrap_int32(x.sum(axis=axes, keepdims=keep_dims, dtype=np.int64))
    # Fold 1/count into the multiplier like QuantizedMeanOrSum: shift it up by
    # floor(log2(count)) (at most 32 and 31 + shift) and divide by count.
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("shift must be in [-31, 30]")
    up = min(count.bit_length() - 1, 32, 31 + int(shift))
    mult = (int(multiplier) << up) // count
    int16 = x.dtype == np.int16
    check = check_int16_param if int16 else check_int8_param
    shifted = wrap_int32(total - check("input_zp", input_zp) * count)
    raw = multiply_by_quantized_multiplier(shifted, wrap_int32(np.int64(mult)), int(shift) - up)
    res_shape = total.shape
    if out is not None and (out.dtype != x.dtype or out.shape != res_shape):
        raise InvalidCommand(f"out must be {x.dtype} {res_shape}")
    if int16:
        return store_int16(raw, check("output_zp", output_zp), -(1 << 15), (1 << 15) - 1, out)
    return store_int8(raw, check_int8_param("output_zp", output_zp), -128, 127, out)


def mean_bound(x: np.ndarray, axes: tuple[int, ...], *, input_zp: int, output_zp: int,
               multiplier: int, shift: int, out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`mean` into ``out`` (kept dims), then a call that reruns it in C with the same
    arithmetic (``npu_mean``); None without the C kernels or contiguous arrays."""
    mean(x, axes, input_zp=input_zp, output_zp=output_zp, multiplier=multiplier, shift=shift,
         keep_dims=True, out=out)
    if native.library() is None:
        return None
    axes = tuple(sorted({a % x.ndim for a in axes}))
    count = int(np.prod([x.shape[a] for a in axes]))
    up = min(count.bit_length() - 1, 32, 31 + int(shift))      # as mean() folds 1/count in
    mult = int(wrap_int32(np.int64((int(multiplier) << up) // count)))
    lo, hi = (-(1 << 15), (1 << 15) - 1) if x.dtype == np.int16 else (-128, 127)
    return data_calls.bind_mean(x, axes, out, zp_total=int(input_zp) * count, multiplier=mult,
                                shift=int(shift) - up, output_zp=int(output_zp), act_min=lo, act_max=hi)
