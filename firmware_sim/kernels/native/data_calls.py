"""Bound calls of the C data-movement and table kernels (``data_kernels.c``, ``resize_kernels.c``):
copies between strided views, PAD, table lookups, broadcasting two-input lookups, MEAN, step
sequences and RESIZE.

Each ``bind_*`` takes the arrays a handler has already checked and computed with numpy (the
reference) and returns a :class:`~.calls.BoundCall` that redoes the same work in C on the
same memory, or None when the C kernels cannot take it (off, more axes than
``NPU_MOVE_MAX_RANK`` after merging, an unexpected dtype). A strided view is passed as a
pointer into its base array plus byte strides, so views of device memory (transposed,
sliced) need no copy.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ffi, library
from .calls import BoundCall

__all__ = ["bind_copy", "bind_sequence", "bind_gather", "bind_pad", "bind_lut", "bind_table2_broadcast", "bind_mean",
           "bind_resize", "merge_axes", "padded", "in_place_or_apart", "MAX_RANK"]

MAX_RANK = 6        # NPU_MOVE_MAX_RANK


def merge_axes(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]] | None:
    """``shape`` and its ``strides`` (one sequence per operand) with size-1 axes dropped and
    adjacent axes merged where every operand steps through them as one; None when more
    than :data:`MAX_RANK` axes remain. An empty shape becomes one axis of one element."""
    dims: list[int] = []
    steps: list[list[int]] = [[] for _ in strides]
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        if dims and all(s[-1] == st[axis] * size for s, st in zip(steps, strides)):
            dims[-1] *= size
            for s, st in zip(steps, strides):
                s[-1] = st[axis]
            continue
        dims.append(int(size))
        for s, st in zip(steps, strides):
            s.append(int(st[axis]))
    if not dims:
        return [1], [[0] for _ in strides]
    return (dims, steps) if len(dims) <= MAX_RANK else None


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pointer(view: np.ndarray, base: np.ndarray, *, writable: bool = False):
    """A ``char *`` to the first element of ``view``, which lies inside contiguous ``base``;
    the buffer object that keeps it valid is returned too."""
    buffer = ffi.from_buffer("char[]", base, require_writable=writable)
    offset = _address(view) - _address(base)
    if not 0 <= offset < max(base.nbytes, 1):
        raise ValueError("view outside its base array")
    return ffi.cast("char *", buffer) + offset, buffer


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """The two arrays' memory overlaps (a copy from one into the other would read what it
    wrote: numpy's kernels make a temporary, the C copies do not, so they leave such a task
    to numpy). ``a`` and ``b`` are contiguous base arrays."""
    a0, b0 = _address(a), _address(b)
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


def in_place_or_apart(x: np.ndarray, out: np.ndarray) -> bool:
    """An elementwise kernel may read ``x`` while writing ``out``: they are the same memory
    element for element (in place) or do not overlap at all."""
    return not _overlap(x, out) or (_address(x) == _address(out) and x.nbytes == out.nbytes)


def padded(values: Sequence[int]) -> list[int]:
    """A shape or strides as a C struct's ``int64_t[MAX_RANK]`` field."""
    return list(values) + [0] * (MAX_RANK - len(values))


def _writable(out: np.ndarray) -> bool:
    return out.flags.writeable


def bind_copy(src: np.ndarray, src_base: np.ndarray, dst: np.ndarray, dst_base: np.ndarray,
              operands: tuple) -> BoundCall | None:
    """``dst[...] = src`` (views of ``src_base`` / ``dst_base``, contiguous arrays) as a call;
    ``operands`` are what :meth:`BoundCall.uses` compares."""
    if (library() is None or src.shape != dst.shape or src.dtype != dst.dtype or src.itemsize not in (1, 2, 4)
            or not (src_base.flags.c_contiguous and dst_base.flags.c_contiguous) or not _writable(dst_base)
            or _overlap(src_base, dst_base)):
        return None
    merged = merge_axes(src.shape, src.strides, dst.strides)
    if merged is None:
        return None
    shape, (x_stride, out_stride) = merged
    x_ptr, x_buf = _pointer(src, src_base)
    out_ptr, out_buf = _pointer(dst, dst_base, writable=True)
    call = ffi.new("struct npu_copy_call *", {
        "x": x_ptr, "out": out_ptr, "rank": len(shape), "elem": src.itemsize, "shape": padded(shape),
        "x_stride": padded(x_stride), "out_stride": padded(out_stride)})
    return BoundCall(library().NPU_STEP_COPY, call, operands, (x_buf, out_buf))


def bind_sequence(calls: Sequence[BoundCall], operands: tuple) -> BoundCall | None:
    """Several bound calls run in order as one (they stay alive with it)."""
    if library() is None or not calls:
        return None
    steps = ffi.new("struct npu_step[]", len(calls))
    for slot, c in zip(steps, calls):
        slot.kind, slot.call = c.step.kind, c.step.call
    call = ffi.new("struct npu_sequence_call *", {"steps": steps, "count": len(calls)})
    return BoundCall(library().NPU_STEP_SEQUENCE, call, operands, (steps, tuple(calls)))


def bind_pad(x: np.ndarray, out: np.ndarray, pads: Sequence[tuple[int, int]], value: int) -> BoundCall | None:
    """Constant PAD of contiguous ``x`` into contiguous ``out`` (int8 or int16)."""
    if (library() is None or x.ndim > MAX_RANK or x.ndim == 0 or x.dtype != out.dtype or x.itemsize not in (1, 2)
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not _writable(out) or _overlap(x, out)):
        return None
    buffers = (ffi.from_buffer("char[]", x), ffi.from_buffer("char[]", out, require_writable=True))
    call = ffi.new("struct npu_pad_call *", {
        "x": buffers[0], "out": buffers[1], "rank": x.ndim, "elem": x.itemsize, "value": int(value),
        "in_shape": padded(x.shape), "before": padded([a for a, _ in pads]),
        "after": padded([b for _, b in pads])})
    return BoundCall(library().NPU_STEP_PAD, call, (x, out), buffers)


def bind_lut(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> BoundCall | None:
    """``out = table[x]`` (x int8: 256 entries, int16: 65536, indexed by the unsigned
    bits), table and out int8 or int16, contiguous arrays."""
    kinds = (np.dtype(np.int8), np.dtype(np.int16))
    if (library() is None or x.dtype not in kinds or out.dtype not in kinds or table.dtype != out.dtype
            or table.size != 1 << (8 * x.itemsize) or x.size != out.size
            or not (x.flags.c_contiguous and out.flags.c_contiguous and table.flags.c_contiguous)
            or not _writable(out) or not in_place_or_apart(x, out) or _overlap(table, out)):
        return None
    buffers = (ffi.from_buffer("char[]", x), ffi.from_buffer("char[]", table),
               ffi.from_buffer("char[]", out, require_writable=True))
    call = ffi.new("struct npu_lut_call *", {"x": buffers[0], "n": x.size, "table": buffers[1],
                                              "out": buffers[2], "in_bytes": x.itemsize,
                                              "out_bytes": out.itemsize})
    return BoundCall(library().NPU_STEP_LUT, call, (x, table, out), buffers)


def bind_table2_broadcast(a: np.ndarray, b: np.ndarray, table: np.ndarray, out: np.ndarray) -> BoundCall | None:
    """``out = table[uint8(a) << 8 | uint8(b)]`` with ``a`` and ``b`` broadcast to ``out``'s
    shape (int8 throughout, every array contiguous)."""
    arrays = (a, b, table, out)
    if (library() is None or any(v.dtype != np.int8 or not v.flags.c_contiguous for v in arrays)
            or table.size != 1 << 16 or not _writable(out) or not in_place_or_apart(a, out)
            or not in_place_or_apart(b, out) or _overlap(table, out)):
        return None
    try:
        a_view, b_view = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    except ValueError:
        return None
    merged = merge_axes(out.shape, a_view.strides, b_view.strides, out.strides)
    if merged is None:
        return None
    shape, (a_stride, b_stride, _) = merged
    buffers = (ffi.from_buffer("int8_t[]", a), ffi.from_buffer("int8_t[]", b), ffi.from_buffer("int8_t[]", table),
               ffi.from_buffer("int8_t[]", out, require_writable=True))
    call = ffi.new("struct npu_table2b_call *", {
        "a": buffers[0], "b": buffers[1], "table": buffers[2], "out": buffers[3], "rank": len(shape),
        "shape": padded(shape), "a_stride": padded(a_stride), "b_stride": padded(b_stride)})
    return BoundCall(library().NPU_STEP_TABLE2_BROADCAST, call, arrays, buffers)


def bind_mean(x: np.ndarray, axes: tuple[int, ...], out: np.ndarray, *, zp_total: int = 0, multiplier: int = 0,
              shift: int = 0, output_zp: int = 0, act_min: int = 0, act_max: int = 0,
              reduce: str = "sum", input_zp: int = 0, scale: float = 0.0) -> BoundCall | None:
    """MEAN or SUM (``reduce`` "sum") of contiguous ``x`` over ``axes`` into contiguous
    ``out`` (kept dims), with the requantization :func:`~firmware_sim.kernels.pooling.mean`
    or ``reduce.reduce_sum`` derived (``multiplier`` an int32, ``shift`` in [-31, 30], for
    MEAN folding in 1/count); ``reduce`` "max" / "min": the largest / smallest value (the max
    and min reductions: no requantization); "l2": ``reduce.reduce_l2``'s norm of ``x -
    input_zp`` times ``scale``, plus ``output_zp``, clamped to [act_min, act_max]."""
    if (library() is None or x.dtype not in (np.int8, np.int16) or out.dtype != x.dtype
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not _writable(out)
            or not -31 <= shift <= 30 or not -(1 << 31) <= multiplier < 1 << 31):
        return None
    sums = np.zeros(out.size, np.int64)
    sum_strides = [0 if axis in axes else s // out.itemsize for axis, s in enumerate(out.strides)]
    merged = merge_axes(x.shape, [s // x.itemsize for s in x.strides], sum_strides)
    if merged is None:
        return None
    shape, (x_stride, sum_stride) = merged
    buffers = (ffi.from_buffer("char[]", x), ffi.from_buffer("int64_t[]", sums, require_writable=True),
               ffi.from_buffer("char[]", out, require_writable=True))
    call = ffi.new("struct npu_mean_call *", {
        "x": buffers[0], "sums": buffers[1], "out": buffers[2], "rank": len(shape), "elem": x.itemsize,
        "shape": padded(shape), "x_stride": padded(x_stride), "sum_stride": padded(sum_stride),
        "outputs": out.size, "zp_total": zp_total, "multiplier": multiplier, "shift": shift,
        "output_zp": output_zp, "act_min": act_min, "act_max": act_max, "input_zp": input_zp, "scale": scale,
        "reduce": {"sum": library().NPU_SUMS_ADD, "max": library().NPU_SUMS_LARGEST,
                   "min": library().NPU_SUMS_SMALLEST, "l2": library().NPU_SUMS_SQUARES}[reduce]})
    return BoundCall(library().NPU_STEP_MEAN, call, (x, out), (buffers, sums))


def bind_gather(x: np.ndarray, indices: np.ndarray, out: np.ndarray) -> BoundCall | None:
    """GATHER of int8 or int16 ``x`` (outer, axis, inner) by int32 ``indices`` (read again on
    every run, checked in C) into ``out`` (outer, count, inner), contiguous arrays. The C
    kernel moves rows of bytes: an int16 row is twice as many."""
    if (x.dtype == np.int16 and out.dtype == np.int16 and x.ndim == 3 and out.ndim == 3 and x.flags.c_contiguous
            and out.flags.c_contiguous):
        call = bind_gather(x.view(np.int8), indices, out.view(np.int8))
        return None if call is None else BoundCall(call.step.kind, call.step.call, (x, indices, out), (call,))
    if (library() is None or x.dtype != np.int8 or out.dtype != np.int8 or indices.dtype != np.int32
            or x.ndim != 3 or out.shape != (x.shape[0], indices.size, x.shape[2])
            or not (x.flags.c_contiguous and out.flags.c_contiguous and indices.flags.c_contiguous)
            or not _writable(out) or _overlap(x, out) or _overlap(indices, out)):
        return None
    buffers = (ffi.from_buffer("int8_t[]", x), ffi.from_buffer("int32_t[]", indices),
               ffi.from_buffer("int8_t[]", out, require_writable=True))
    outer, axis, inner = x.shape
    call = ffi.new("struct npu_gather_call *", {"x": buffers[0], "indices": buffers[1], "out": buffers[2],
                                                 "outer": outer, "axis": axis, "inner": inner,
                                                 "count": indices.size})
    return BoundCall(library().NPU_STEP_GATHER, call, (x, indices, out), buffers)


def bind_resize(x: np.ndarray, out: np.ndarray, rows: Sequence[np.ndarray], cols: Sequence[np.ndarray]) -> \
        BoundCall | None:
    """RESIZE of contiguous int8 / int16 NHWC ``x`` into ``out``: ``rows`` and ``cols`` the
    source indices of each output row and column (nearest: one array each), or for bilinear
    the low index, the high index and the fraction (1024ths) each, as ``kernels.resize``
    computed them."""
    if (library() is None or x.dtype not in (np.int8, np.int16) or out.dtype != x.dtype or x.ndim != 4
            or out.ndim != 4 or len(rows) != len(cols) or len(rows) not in (1, 3)
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or not _writable(out) or _overlap(x, out)):
        return None
    bilinear = len(rows) == 3
    tables = [np.ascontiguousarray(v, dtype=np.int32) for v in (*rows, *cols)]
    pointers = [ffi.from_buffer("int32_t[]", t) for t in tables]
    y0, y1, fy, x0, x1, fx = pointers if bilinear else (pointers[0], ffi.NULL, ffi.NULL, pointers[1], ffi.NULL,
                                                        ffi.NULL)
    buffers = (ffi.from_buffer("char[]", x), ffi.from_buffer("char[]", out, require_writable=True))
    n, h, w, c = x.shape
    call = ffi.new("struct npu_resize_call *", {
        "x": buffers[0], "out": buffers[1], "elem": x.itemsize, "bilinear": int(bilinear), "n": n, "h": h, "w": w,
        "c": c, "oh": out.shape[1], "ow": out.shape[2], "y0": y0, "y1": y1, "fy": fy, "x0": x0, "x1": x1, "fx": fx})
    return BoundCall(library().NPU_STEP_RESIZE, call, (x, out), (buffers, tables, pointers))
