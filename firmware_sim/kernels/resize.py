"""int8 / int16 image resizing (NHWC), as TFLite's reference kernels.

Bilinear: ``ResizeBilinearInteger`` (10-bit fixed-point source coordinates, 20-bit
weights, rounding half away from zero). Nearest: ``GetNearestNeighbor`` with its float32
coordinate arithmetic. Both support align_corners and half_pixel_centers.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .fixedpoint import round_half_away
from .native import calls as native_calls
from .native import data_calls
from .output import emit

__all__ = ["resize_bilinear", "resize_nearest", "resize_bound"]


def _check(x: np.ndarray, out_hw, align_corners: bool, half_pixel_centers: bool):
    if x.dtype not in (np.int8, np.int16) or x.ndim != 4 or min(x.shape[1:3]) < 1:
        raise InvalidCommand(f"resize input must be non-empty int8 or int16 NHWC, got {x.dtype} {x.shape}")
    oh, ow = int(out_hw[0]), int(out_hw[1])
    if oh < 1 or ow < 1:
        raise InvalidCommand("output size must be positive")
    if align_corners and half_pixel_centers:
        raise InvalidCommand("align_corners and half_pixel_centers are exclusive")
    return oh, ow



def _c_div(a: np.ndarray | int, b: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    return np.where(a >= 0, a // b, -((-a) // b))


def _bilinear_axis(out: int, size: int, align_corners: bool, half_pixel: bool):
    scale = ((1 << 10) * size + out // 2) // out
    if align_corners and out > 1:
        scale = ((1 << 10) * (size - 1) + (out - 1) // 2) // (out - 1)
    v = np.arange(out, dtype=np.int64)
    scaled = v * scale + (scale // 2 - (1 << 9) if half_pixel else 0)
    lo = np.maximum(_c_div(scaled, 1 << 10), 0)
    hi = np.minimum(_c_div(scaled + (1 << 10) - 1, 1 << 10), size - 1)
    frac = scaled - (lo << 10)  # may be negative near the border, as in TFLite
    return lo, hi, frac


def _bilinear_axes(x: np.ndarray, out_hw: tuple[int, int], align_corners: bool, half_pixel: bool) -> tuple:
    return (_bilinear_axis(out_hw[0], x.shape[1], align_corners, half_pixel),
            _bilinear_axis(out_hw[1], x.shape[2], align_corners, half_pixel))


def resize_bilinear(x: np.ndarray, out_hw: tuple[int, int], *, align_corners: bool = False,
                    half_pixel_centers: bool = False,
                    out: np.ndarray | None = None) -> np.ndarray:
    """int8 / int16 bilinear resize to ``out_hw`` (input and output share quantization)."""
    oh, ow = _check(x, out_hw, align_corners, half_pixel_centers)
    (y0, y1, fy), (x0, x1, fx) = _bilinear_axes(x, (oh, ow), align_corners, half_pixel_centers)
    xi = x.astype(np.int64)
    wy1, wy0 = fy[None, :, None, None], ((1 << 10) - fy)[None, :, None, None]
    wx1, wx0 = fx[None, None, :, None], ((1 << 10) - fx)[None, None, :, None]
    rows0, rows1 = xi[:, y0], xi[:, y1]
    total = (rows0[:, :, x0] * wy0 * wx0 + rows1[:, :, x0] * wy1 * wx0
             + rows0[:, :, x1] * wy0 * wx1 + rows1[:, :, x1] * wy1 * wx1)
    rounded = _c_div(total + np.where(total > 0, 1 << 19, -(1 << 19)), 1 << 20)
    return emit(rounded.astype(x.dtype), out)


def _nearest_axis(out: int, size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    f32 = np.float32
    if align_corners and out > 1:
        scale = f32(size - 1) / f32(out - 1)
    else:
        scale = f32(size) / f32(out)
    offset = f32(0.5) if half_pixel else f32(0.0)
    v = (np.arange(out).astype(f32) + offset) * scale
    if align_corners:
        idx = round_half_away(v.astype(np.float64))  # roundf, exactly
    else:
        idx = np.floor(v)
    idx = np.minimum(idx.astype(np.int64), size - 1)
    return np.maximum(idx, 0) if half_pixel else idx


def resize_nearest(x: np.ndarray, out_hw: tuple[int, int], *, align_corners: bool = False,
                   half_pixel_centers: bool = False,
                   out: np.ndarray | None = None) -> np.ndarray:
    """int8 / int16 nearest-neighbour resize to ``out_hw``."""
    oh, ow = _check(x, out_hw, align_corners, half_pixel_centers)
    (ys,), (xs,) = _nearest_axes(x, (oh, ow), align_corners, half_pixel_centers)
    return emit(x[:, ys][:, :, xs], out)


def _nearest_axes(x: np.ndarray, out_hw: tuple[int, int], align_corners: bool, half_pixel: bool) -> tuple:
    return ((_nearest_axis(out_hw[0], x.shape[1], align_corners, half_pixel),),
            (_nearest_axis(out_hw[1], x.shape[2], align_corners, half_pixel),))


def resize_bound(kind: str, x: np.ndarray, out_hw: tuple[int, int], *, align_corners: bool,
                 half_pixel_centers: bool, out: np.ndarray) -> native_calls.BoundCall | None:
    """RESIZE (``kind`` "bilinear" or "nearest") into ``out`` in numpy, then a call that
    reruns it in C (``resize_kernels.c``) on the same arrays with this kernel's source
    indices and fractions; None when the C kernels cannot take it."""
    kernel, axes = (resize_bilinear, _bilinear_axes) if kind == "bilinear" else (resize_nearest, _nearest_axes)
    kernel(x, out_hw, align_corners=align_corners, half_pixel_centers=half_pixel_centers, out=out)
    rows, cols = axes(x, out.shape[1:3], align_corners, half_pixel_centers)
    return data_calls.bind_resize(x, out, rows, cols)
