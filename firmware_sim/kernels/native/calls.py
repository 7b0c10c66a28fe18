"""Calls into the C kernels with numpy arrays the Python kernels have already checked."""
from __future__ import annotations

import numpy as np

from ..fixedpoint import INT32_MAX, INT32_MIN
from . import ffi, library

__all__ = ["depthwise_s8", "fully_connected_s8", "quant_arrays"]

# C array types resolved once (parsing the type string costs a microsecond per pointer).
_CTYPES = {np.dtype(np.int8): ffi.typeof("int8_t[]"), np.dtype(np.int32): ffi.typeof("int32_t[]"),
           np.dtype(np.float64): ffi.typeof("double[]")}


def _ptr(a: np.ndarray):
    return ffi.from_buffer(_CTYPES[a.dtype], a)


def _out_ptr(a: np.ndarray):
    if not a.flags.writeable:      # the C code would write through it regardless
        raise ValueError("out must be a writable array")
    return ffi.from_buffer(_CTYPES[a.dtype], a, require_writable=True)


def _opt_ptr(a: np.ndarray | None):
    return ffi.NULL if a is None else ffi.from_buffer(_CTYPES[a.dtype], a)


def quant_arrays(multiplier: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multipliers and shifts as contiguous int32 (the C code checks each shift is in
    [-31, 30]; a multiplier must be an int32)."""
    if multiplier.dtype != np.int32 and multiplier.size:
        if int(multiplier.min()) < INT32_MIN or int(multiplier.max()) > INT32_MAX:
            raise ValueError("requantization multiplier must be an int32")
    if shift.dtype != np.int32 and shift.size:
        if int(shift.min()) < -31 or int(shift.max()) > 30:
            raise ValueError("requantization shift must be in [-31, 30]")
    return (np.ascontiguousarray(multiplier, dtype=np.int32),
            np.ascontiguousarray(shift, dtype=np.int32))


def _check_status(status: int) -> None:
    if status == library().NPU_KERNEL_BAD_SHIFT:
        raise ValueError("requantization shift must be in [-31, 30]")
    if status != 0:
        raise MemoryError("native kernel could not allocate its scratch memory")


def depthwise_s8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, dm: int,
                 stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                 out_hw: tuple[int, int], input_zp: int, output_zp: int,
                 multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int,
                 out: np.ndarray) -> None:
    """Depthwise convolution into ``out`` (C-contiguous int8 (N, OH, OW, Cin * dm))."""
    lib = library()
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w)
    bias = None if bias is None else np.ascontiguousarray(bias)
    mult, sh = quant_arrays(multiplier, shift)
    n, h, wd, cin = x.shape
    _, kh, kw, _ = w.shape
    _check_status(lib.npu_depthwise_s8(
        _ptr(x), n, h, wd, cin, _ptr(w), kh, kw, dm,
        _opt_ptr(bias), stride[0], stride[1], dilation[0], dilation[1],
        padding[0], padding[1], out_hw[0], out_hw[1], -input_zp, output_zp,
        _ptr(mult), _ptr(sh), int(mult.size > 1),
        act_min, act_max, _out_ptr(out)))


def fully_connected_s8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                       input_zp: int, output_zp: int, multiplier: np.ndarray,
                       shift: np.ndarray, scale: np.ndarray | None, act_min: int,
                       act_max: int, out: np.ndarray) -> None:
    """Fully connected into ``out`` (C-contiguous int8 (M, N))."""
    lib = library()
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(w)
    bias = None if bias is None else np.ascontiguousarray(bias)
    mult, sh = quant_arrays(multiplier, shift)
    if scale is not None:
        scale = np.ascontiguousarray(scale, dtype=np.float64)
    (m, k), n = x.shape, w.shape[0]
    _check_status(lib.npu_fully_connected_s8(
        _ptr(x), m, k, _ptr(w), n, _opt_ptr(bias),
        -input_zp, output_zp, _ptr(mult), _ptr(sh),
        _opt_ptr(scale), int(mult.size > 1), act_min, act_max,
        _out_ptr(out)))
