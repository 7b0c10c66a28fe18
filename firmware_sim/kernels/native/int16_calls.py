"""Bound calls of the C int16 kernels (``int16_kernels.c``, ``binary16_kernels.c``, ``int16x16_kernels.c``,
``softmax16_kernels.c``): convolution, depthwise convolution and fully connected with int16
activations and int8 or int16 weights, ADD, MUL, PRELU, MAXIMUM and MINIMUM, average and max
pooling, SOFTMAX, BATCH_MATMUL (and int8 BATCH_MATMUL, whose operands it lays out alike): the
reruns of ``kernels.int16x8``'s, ``kernels.int16x16``'s, ``kernels.binary``'s (int16 PRELU),
``kernels.pooling``'s and ``kernels.matmul``'s numpy kernels (which run first and stay the
reference)."""
from __future__ import annotations

import numpy as np

from . import data_calls, ffi, library
from .calls import BoundCall

__all__ = ["bind_conv16", "bind_fully_connected16", "bind_binary16", "bind_pool16", "bind_softmax16",
           "bind_matmul16", "bind_matmul8"]


def _contiguous(*arrays: np.ndarray | None) -> bool:
    return all(a is None or a.flags.c_contiguous for a in arrays)


def _quant(multiplier, shift) -> tuple[np.ndarray, np.ndarray]:
    return (np.ascontiguousarray(np.atleast_1d(multiplier), dtype=np.int32),
            np.ascontiguousarray(np.atleast_1d(shift), dtype=np.int32))


def bind_conv16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, depthwise: bool,
                stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                out_hw: tuple[int, int], multiplier, shift, act_min: int, act_max: int,
                out: np.ndarray) -> BoundCall | None:
    """int16 x int8 convolution, or int16 x int16 when ``w`` is int16 (``depthwise``:
    depthwise) of checked operands into ``out`` as a call; None unless the arrays are
    C-contiguous of the kernel's dtypes."""
    if (library() is None or x.dtype != np.int16 or w.dtype not in (np.int8, np.int16) or out.dtype != np.int16
            or (bias is not None and bias.dtype != np.int64) or not _contiguous(x, w, bias, out)
            or not out.flags.writeable):
        return None
    mult, sh = _quant(multiplier, shift)
    n, h, wd, cin = x.shape
    cout = out.shape[3]
    kh, kw = (w.shape[1], w.shape[2])
    wide = w.dtype == np.int16
    buffers = (ffi.from_buffer("int16_t[]", x), ffi.from_buffer("int16_t[]" if wide else "int8_t[]", w),
               ffi.NULL if bias is None else ffi.from_buffer("int64_t[]", bias),
               ffi.from_buffer("int32_t[]", mult), ffi.from_buffer("int32_t[]", sh),
               ffi.from_buffer("int16_t[]", out, require_writable=True))
    call = ffi.new("struct npu_conv16x16_call *" if wide else "struct npu_conv16_call *", {
        "x": buffers[0], "n": n, "h": h, "w": wd, "cin": cin, "filter": buffers[1], "cout": cout,
        "kh": kh, "kw": kw, "groups": 1 if depthwise else cin // w.shape[3],
        "depth_multiplier": cout // cin if depthwise else 1, "bias": buffers[2],
        "stride_h": stride[0], "stride_w": stride[1], "dil_h": dilation[0], "dil_w": dilation[1],
        "pad_top": padding[0], "pad_left": padding[1], "out_h": out_hw[0], "out_w": out_hw[1],
        "mult": buffers[3], "shift": buffers[4], "per_channel": int(mult.size > 1),
        "act_min": act_min, "act_max": act_max, "out": buffers[5]})
    if wide:
        kind = library().NPU_STEP_DEPTHWISE16X16 if depthwise else library().NPU_STEP_CONV16X16
    else:
        kind = library().NPU_STEP_DEPTHWISE16 if depthwise else library().NPU_STEP_CONV16
    operands = (x, w, bias, multiplier, shift, out)
    return BoundCall(kind, call, operands, (buffers, mult, sh))


def bind_fully_connected16(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, scale,
                           act_min: int, act_max: int, out: np.ndarray) -> BoundCall | None:
    """int16 x int8 (or int16 x int16: ``w`` int16) fully connected (x (M, K), w (N, K))
    into ``out`` (M, N) as a call, requantized by the float64 ``scale`` (N,) or (1,); None
    unless C-contiguous."""
    if (library() is None or x.dtype != np.int16 or w.dtype not in (np.int8, np.int16) or out.dtype != np.int16
            or (bias is not None and bias.dtype != np.int64) or not _contiguous(x, w, bias, out)
            or not out.flags.writeable):
        return None
    scales = np.ascontiguousarray(np.atleast_1d(scale), dtype=np.float64)
    (m, k), n = x.shape, w.shape[0]
    wide = w.dtype == np.int16
    buffers = (ffi.from_buffer("int16_t[]", x), ffi.from_buffer("int16_t[]" if wide else "int8_t[]", w),
               ffi.NULL if bias is None else ffi.from_buffer("int64_t[]", bias),
               ffi.from_buffer("double[]", scales), ffi.from_buffer("int16_t[]", out, require_writable=True))
    call = ffi.new("struct npu_fc16x16_call *" if wide else "struct npu_fc16_call *", {
        "x": buffers[0], "rows": m, "k": k, "w": buffers[1], "n": n, "bias": buffers[2], "scale": buffers[3],
        "per_channel": int(scales.size > 1), "act_min": act_min, "act_max": act_max, "out": buffers[4]})
    kind = library().NPU_STEP_FC16X16 if wide else library().NPU_STEP_FC16
    return BoundCall(kind, call, (x, w, bias, scale, out), (buffers, scales))


# The parameter row of each kind (npu_binary16): ADD m1, s1, m2, s2, mo, so; MUL m, s; PRELU m1, s1, m2, s2;
# MAXIMUM and MINIMUM none.
_COLUMNS = {"add": 6, "sub": 6, "mul": 2, "prelu": 4, "maximum": 0, "minimum": 0}


def bind_binary16(kind: str, a: np.ndarray, b: np.ndarray, out: np.ndarray, params: np.ndarray, *,
                  left_shift: int = 0, act_min: int, act_max: int) -> BoundCall | None:
    """int16 ADD, SUB, MUL, PRELU, MAXIMUM or MINIMUM (``kind`` "add" / "sub" / "mul" / "prelu" /
    "maximum" / "minimum", ``b`` PRELU's slopes) of ``a`` and ``b`` broadcast to ``out``'s shape,
    requantized with ``params`` (int32, one row per output channel or a single row:
    ``_COLUMNS``; (1, 0) for MAXIMUM and MINIMUM), as a call; None unless C-contiguous int16."""
    if (library() is None or any(v.dtype != np.int16 or not v.flags.c_contiguous for v in (a, b, out))
            or not out.flags.writeable or params.dtype != np.int32 or not params.flags.c_contiguous
            or params.ndim != 2 or params.shape[1] != _COLUMNS[kind]
            or not data_calls.in_place_or_apart(a, out) or not data_calls.in_place_or_apart(b, out)):
        return None
    channels = params.shape[0]
    if channels != 1 and (not out.ndim or out.shape[-1] != channels):
        return None
    try:
        a_view, b_view = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    except ValueError:
        return None
    merged = data_calls.merge_axes(out.shape, [s // 2 for s in a_view.strides], [s // 2 for s in b_view.strides],
                                   [s // 2 for s in out.strides])
    if merged is None:
        return None
    shape, (a_stride, b_stride, _) = merged
    pad = data_calls.padded
    buffers = (ffi.from_buffer("int16_t[]", a), ffi.from_buffer("int16_t[]", b),
               ffi.from_buffer("int16_t[]", out, require_writable=True), ffi.from_buffer("int32_t[]", params))
    call = ffi.new("struct npu_binary16_call *", {
        "a": buffers[0], "b": buffers[1], "out": buffers[2], "rank": len(shape), "shape": pad(shape),
        "a_stride": pad(a_stride), "b_stride": pad(b_stride),
        "kind": {"add": library().NPU_BINARY16_ADD, "sub": library().NPU_BINARY16_SUB,
                 "mul": library().NPU_BINARY16_MUL,
                 "prelu": library().NPU_BINARY16_PRELU, "maximum": library().NPU_BINARY16_MAXIMUM,
                 "minimum": library().NPU_BINARY16_MINIMUM}[kind],
        "left_shift": left_shift, "channels": channels, "params": buffers[3], "act_min": act_min,
        "act_max": act_max})
    return BoundCall(library().NPU_STEP_BINARY16, call, (a, b, out, params), buffers)


def bind_pool16(kind: str, x: np.ndarray, out: np.ndarray, filter_hw: tuple[int, int], stride: tuple[int, int],
                padding: tuple[int, int], act_min: int, act_max: int) -> BoundCall | None:
    """int16 average or max pooling (``kind`` "avg" / "max") of NHWC ``x`` into ``out`` as a
    call; None unless both are C-contiguous int16. Geometry checked by the caller."""
    if library() is None or x.dtype != np.int16 or out.dtype != np.int16 or not _contiguous(x, out) \
            or not out.flags.writeable:
        return None
    n, h, w, c = x.shape
    _, oh, ow, _ = out.shape
    buffers = (ffi.from_buffer("int16_t[]", x), ffi.from_buffer("int16_t[]", out, require_writable=True))
    call = ffi.new("struct npu_pool16_call *", {
        "x": buffers[0], "n": n, "h": h, "w": w, "c": c, "fh": filter_hw[0], "fw": filter_hw[1],
        "sh": stride[0], "sw": stride[1], "pt": padding[0], "pl": padding[1], "oh": oh, "ow": ow,
        "act_min": act_min, "act_max": act_max, "out": buffers[1]})
    step_kind = library().NPU_STEP_AVG_POOL16 if kind == "avg" else library().NPU_STEP_MAX_POOL16
    return BoundCall(step_kind, call, (x, out), buffers)


def bind_softmax16(x: np.ndarray, out: np.ndarray, exp_lut: np.ndarray, recip_lut: np.ndarray, *,
                   multiplier: int, left_shift: int) -> BoundCall | None:
    """int16 SOFTMAX over the last axis of ``x`` (rows, depth) into ``out`` with the numpy
    kernel's exp and reciprocal tables (513 int16 entries each), as a call; None unless every
    array is C-contiguous int16 and the multiplier an int32."""
    arrays = (x, out, exp_lut, recip_lut)
    if (library() is None or any(a.dtype != np.int16 or not a.flags.c_contiguous for a in arrays)
            or x.ndim != 2 or x.shape != out.shape or not out.flags.writeable or exp_lut.size != 513
            or recip_lut.size != 513 or not -(1 << 31) <= multiplier < 1 << 31 or not -31 <= left_shift <= 30
            or not data_calls.in_place_or_apart(x, out)):
        return None
    buffers = (ffi.from_buffer("int16_t[]", x), ffi.from_buffer("int16_t[]", out, require_writable=True),
               ffi.from_buffer("int16_t[]", exp_lut), ffi.from_buffer("int16_t[]", recip_lut))
    call = ffi.new("struct npu_softmax16_call *", {
        "x": buffers[0], "rows": x.shape[0], "depth": x.shape[1], "multiplier": multiplier,
        "left_shift": left_shift, "exp_lut": buffers[2], "recip_lut": buffers[3], "out": buffers[1]})
    return BoundCall(library().NPU_STEP_SOFTMAX16, call, arrays, buffers)


def bind_matmul16(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, *, adj_x: bool, adj_y: bool, multiplier: int,
                  shift: int, act_min: int, act_max: int) -> BoundCall | None:
    """int16 ``lhs @ rhs`` (``adj_x`` / ``adj_y``: that operand stored transposed; batch axes
    broadcast) into ``out`` as a call, with the numpy kernel's checked shapes; None unless every
    array is C-contiguous int16 and the multiplier an int32."""
    return _bind_matmul(np.int16, lhs, rhs, out, adj_x, adj_y, dict(
        multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max))


def bind_matmul8(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, *, adj_x: bool, adj_y: bool, lhs_zp: int,
                 rhs_zp: int, output_zp: int, multiplier: int, shift: int, act_min: int,
                 act_max: int) -> BoundCall | None:
    """int8 ``lhs @ rhs`` (``kernels.matmul.matmul_int8``, which checked the parameters) as
    :func:`bind_matmul16` lays the operands out; None unless every array is C-contiguous int8
    and the multiplier an int32."""
    return _bind_matmul(np.int8, lhs, rhs, out, adj_x, adj_y, dict(
        lhs_zp=lhs_zp, rhs_zp=rhs_zp, output_zp=output_zp, multiplier=multiplier, shift=shift, act_min=act_min,
        act_max=act_max))


def _bind_matmul(dtype: type, lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, adj_x: bool, adj_y: bool,
                 quant: dict[str, int]) -> BoundCall | None:
    arrays = (lhs, rhs, out)
    if (library() is None or any(a.dtype != dtype or not a.flags.c_contiguous for a in arrays)
            or lhs.ndim < 2 or lhs.ndim != rhs.ndim or out.ndim != lhs.ndim or not out.flags.writeable
            or not -(1 << 31) <= quant["multiplier"] < 1 << 31
            or np.may_share_memory(lhs, out) or np.may_share_memory(rhs, out)):   # C writes rows before reading all
        return None
    rows, cols = out.shape[-2:]
    depth = lhs.shape[-2] if adj_x else lhs.shape[-1]
    batch = out.shape[:-2]

    def starts(a: np.ndarray) -> np.ndarray:
        # each output batch's first element in a: a's own batch index, broadcast, times its matrix size
        own = np.arange(int(np.prod(a.shape[:-2], dtype=np.int64)), dtype=np.int64).reshape(a.shape[:-2])
        return np.ascontiguousarray(np.broadcast_to(own * (a.shape[-2] * a.shape[-1]), batch).reshape(-1))

    lhs_at, rhs_at = starts(lhs), starts(rhs)
    ctype = "int16_t[]" if dtype == np.int16 else "int8_t[]"
    buffers = (ffi.from_buffer(ctype, lhs), ffi.from_buffer(ctype, rhs),
               ffi.from_buffer(ctype, out, require_writable=True),
               ffi.from_buffer("int64_t[]", lhs_at), ffi.from_buffer("int64_t[]", rhs_at))
    wide = dtype == np.int16
    call = ffi.new("struct npu_matmul16_call *" if wide else "struct npu_matmul8_call *", {
        "lhs": buffers[0], "rhs": buffers[1], "out": buffers[2], "batches": lhs_at.size, "lhs_at": buffers[3],
        "rhs_at": buffers[4], "rows": rows, "depth": depth, "cols": cols,
        "lhs_row": 1 if adj_x else depth, "lhs_depth": rows if adj_x else 1,
        "rhs_depth": 1 if adj_y else cols, "rhs_col": depth if adj_y else 1, **quant})
    kind = library().NPU_STEP_MATMUL16 if wide else library().NPU_STEP_MATMUL8
    return BoundCall(kind, call, arrays, (buffers, lhs_at, rhs_at))
