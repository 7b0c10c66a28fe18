"""Calls into the C kernels with numpy arrays the Python kernels have already checked."""
from __future__ import annotations

import numpy as np

from ...errors import InvalidCommand
from ..fixedpoint import INT32_MAX, INT32_MIN
from . import ffi, library

__all__ = ["BoundCall", "check_status", "bind_table2", "bind_pool", "bind_convert", "bind_softmax", "bind_depthwise",
           "bind_fully_connected", "bind_lstm", "bind_transpose_conv", "conv_s8", "depthwise_s8", "fully_connected_s8",
           "quant_arrays"]

# C array types resolved once (parsing the type string costs a microsecond per pointer).
_CTYPES = {np.dtype(np.int8): ffi.typeof("int8_t[]"), np.dtype(np.int32): ffi.typeof("int32_t[]"),
           np.dtype(np.int16): ffi.typeof("int16_t[]"), np.dtype(np.int64): ffi.typeof("int64_t[]"),
           np.dtype(np.float64): ffi.typeof("double[]"), np.dtype(np.float32): ffi.typeof("float[]")}


def _ptr(a: np.ndarray):
    return ffi.from_buffer(_CTYPES[a.dtype], a)


def _out_ptr(a: np.ndarray):
    if not a.flags.writeable:      # the C code would write through it regardless (a chip bug: EIO)
        raise ValueError("out must be a writable array")
    return ffi.from_buffer(_CTYPES[a.dtype], a, require_writable=True)


def _opt_ptr(a: np.ndarray | None):
    return ffi.NULL if a is None else ffi.from_buffer(_CTYPES[a.dtype], a)


def quant_arrays(multiplier: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multipliers and shifts as contiguous int32 (the C code checks each shift is in
    [-31, 30]; a multiplier must be an int32)."""
    if multiplier.dtype != np.int32 and multiplier.size:
        if int(multiplier.min()) < INT32_MIN or int(multiplier.max()) > INT32_MAX:
            raise InvalidCommand("requantization multiplier must be an int32")
    if shift.dtype != np.int32 and shift.size:
        if int(shift.min()) < -31 or int(shift.max()) > 30:
            raise InvalidCommand("requantization shift must be in [-31, 30]")
    return (np.ascontiguousarray(multiplier, dtype=np.int32),
            np.ascontiguousarray(shift, dtype=np.int32))


def check_status(status: int) -> None:
    """Raise what a C kernel's nonzero ``status`` means (an invalid operand: InvalidCommand)."""
    if status == library().NPU_KERNEL_BAD_SHIFT:     # the C kernels' own check of the shift operands
        raise InvalidCommand("requantization shift must be in [-31, 30]")
    if status == library().NPU_KERNEL_BAD_WEIGHT:
        raise InvalidCommand("int16 weights are symmetric: -32768 is not allowed")
    if status == library().NPU_KERNEL_BAD_INDEX:
        raise InvalidCommand("gather index outside the gathered axis")
    if status == library().NPU_KERNEL_EMPTY_WINDOW:
        raise InvalidCommand("a pooling window lies entirely outside the input")
    if status == library().NPU_KERNEL_BAD_EXPONENT:
        raise InvalidCommand("softmax reciprocal exponent out of range")
    if status == library().NPU_KERNEL_SOFTMAX_ZERO_SUM:
        raise InvalidCommand("softmax: the exponentials sum to zero (bad input multiplier)")
    if status == library().NPU_KERNEL_DNNL_FAILED:
        raise RuntimeError("oneDNN's int8 GEMM failed")
    if status in (library().NPU_KERNEL_NO_DNNL, library().NPU_KERNEL_BAD_STEP):
        raise RuntimeError(f"native kernel step failed with status {status}")
    if status != 0:
        raise MemoryError("native kernel could not allocate its scratch memory")


class BoundCall:
    """A kernel call whose C arguments (a ``struct npu_step`` pointing to the kernel's
    argument struct, pointers into ``operands``) were made once: calling it runs the kernel
    again on the operands' current contents. Converting the arguments costs more than a
    small kernel, and a chip reruns the same tasks on the same buffers for every inference.
    ``step`` is what a job plan copies into its array of steps (``npu_steps_run``)."""

    __slots__ = ("operands", "step", "_run", "_keep")

    def __init__(self, kind: int, call, operands: tuple, keep: tuple = ()):
        # call: the cffi struct pointer of ``kind``; keep: C buffers its pointers need alive
        self.step = ffi.new("struct npu_step *", {"kind": kind, "call": call})
        self.operands, self._run, self._keep = operands, library().npu_step_run, (call, keep)

    def uses(self, operands: tuple) -> bool:
        """True when ``operands`` are the very arrays this call was bound to."""
        return all(a is b for a, b in zip(operands, self.operands)) and len(operands) == len(self.operands)

    def __call__(self) -> None:
        status = self._run(self.step)
        if status:
            check_status(status)


def _bindable(operands: tuple, converted: tuple, out: np.ndarray) -> bool:
    # Only when no operand had to be converted: a pointer into a temporary copy would
    # read stale data on the next call.
    return out.flags.c_contiguous and all(a is b for a, b in zip(converted, operands))


def _depthwise_arrays(x, w, bias, multiplier, shift) -> tuple:
    mult, sh = quant_arrays(multiplier, shift)
    return (np.ascontiguousarray(x), np.ascontiguousarray(w),
            None if bias is None else np.ascontiguousarray(bias), mult, sh)


def _conv_call(arrays: tuple, stride: tuple[int, int], dilation: tuple[int, int],
               padding: tuple[int, int], out_hw: tuple[int, int], input_zp: int, output_zp: int,
               act_min: int, act_max: int, out: np.ndarray, *, groups: int = 1,
               depth_multiplier: int = 1) -> tuple:
    """A ``struct npu_conv_call`` for ``arrays`` (x, w, bias, mult, shift) and the C buffers
    its pointers need alive: one argument for ``npu_conv_call`` / ``npu_depthwise_call``."""
    x, w, bias, mult, sh = arrays
    n, h, wd, cin = x.shape
    buffers = (_ptr(x), _ptr(w), _opt_ptr(bias), _ptr(mult), _ptr(sh), _out_ptr(out))
    call = ffi.new("struct npu_conv_call *", {
        "x": buffers[0], "n": n, "h": h, "w": wd, "cin": cin, "filter": buffers[1],
        "cout": out.shape[3], "kh": w.shape[1], "kw": w.shape[2], "groups": groups,
        "depth_multiplier": depth_multiplier, "bias": buffers[2],
        "stride_h": stride[0], "stride_w": stride[1], "dil_h": dilation[0], "dil_w": dilation[1],
        "pad_top": padding[0], "pad_left": padding[1], "out_h": out_hw[0], "out_w": out_hw[1],
        "input_offset": -input_zp, "output_offset": output_zp, "mult": buffers[3], "shift": buffers[4],
        "per_channel": int(mult.size > 1), "act_min": act_min, "act_max": act_max, "out": buffers[5]})
    return call, buffers


def depthwise_s8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, dm: int,
                 stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                 out_hw: tuple[int, int], input_zp: int, output_zp: int,
                 multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int,
                 out: np.ndarray) -> None:
    """Depthwise convolution into ``out`` (C-contiguous int8 (N, OH, OW, Cin * dm))."""
    arrays = _depthwise_arrays(x, w, bias, multiplier, shift)
    call, _buffers = _conv_call(arrays, stride, dilation, padding, out_hw, input_zp, output_zp, act_min,
                                act_max, out, depth_multiplier=dm)
    check_status(library().npu_depthwise_call(call))


def bind_depthwise(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, dm: int,
                   stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                   out_hw: tuple[int, int], input_zp: int, output_zp: int,
                   multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int,
                   out: np.ndarray) -> BoundCall | None:
    """:func:`depthwise_s8`'s call, kept for reruns; None if an operand would be copied."""
    operands = (x, w, bias, multiplier, shift)
    arrays = _depthwise_arrays(*operands)
    if not _bindable(operands, arrays, out):
        return None
    call, buffers = _conv_call(arrays, stride, dilation, padding, out_hw, input_zp, output_zp, act_min,
                               act_max, out, depth_multiplier=dm)
    return BoundCall(library().NPU_STEP_DEPTHWISE, call, operands + (out,), buffers)


def _fc_arrays(x, w, bias, multiplier, shift, scale) -> tuple:
    mult, sh = quant_arrays(multiplier, shift)
    return (np.ascontiguousarray(x), np.ascontiguousarray(w),
            None if bias is None else np.ascontiguousarray(bias), mult, sh,
            None if scale is None else np.ascontiguousarray(scale, dtype=np.float64))


def _fc_args(arrays: tuple, input_zp: int, output_zp: int, act_min: int, act_max: int,
             out: np.ndarray) -> tuple:
    x, w, bias, mult, sh, scale = arrays
    (m, k), n = x.shape, w.shape[0]
    return (_ptr(x), m, k, _ptr(w), n, _opt_ptr(bias), -input_zp, output_zp, _ptr(mult), _ptr(sh),
            _opt_ptr(scale), int(mult.size > 1), act_min, act_max, _out_ptr(out))


_FC_FIELDS = ("x", "rows", "k", "w", "n", "bias", "input_offset", "output_offset", "mult", "shift",
              "scale", "per_channel", "act_min", "act_max", "out")     # _fc_args's order


def fully_connected_s8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                       input_zp: int, output_zp: int, multiplier: np.ndarray,
                       shift: np.ndarray, scale: np.ndarray | None, act_min: int,
                       act_max: int, out: np.ndarray) -> None:
    """Fully connected into ``out`` (C-contiguous int8 (M, N))."""
    arrays = _fc_arrays(x, w, bias, multiplier, shift, scale)
    check_status(library().npu_fully_connected_s8(
        *_fc_args(arrays, input_zp, output_zp, act_min, act_max, out)))


def bind_fully_connected(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                         input_zp: int, output_zp: int, multiplier: np.ndarray,
                         shift: np.ndarray, scale: np.ndarray | None, act_min: int,
                         act_max: int, out: np.ndarray) -> BoundCall | None:
    """:func:`fully_connected_s8`'s call, kept for reruns; None if an operand would be copied."""
    operands = (x, w, bias, multiplier, shift, scale)
    arrays = _fc_arrays(*operands)
    if not _bindable(operands, arrays, out):
        return None
    args = _fc_args(arrays, input_zp, output_zp, act_min, act_max, out)
    call = ffi.new("struct npu_fc_call *", dict(zip(_FC_FIELDS, args)))
    return BoundCall(library().NPU_STEP_FC, call, operands + (out,), args)


def conv_s8(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, groups: int,
            stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
            out_hw: tuple[int, int], input_zp: int, output_zp: int,
            multiplier: np.ndarray, shift: np.ndarray, act_min: int, act_max: int,
            out: np.ndarray) -> BoundCall | None:
    """Convolution into ``out`` (C-contiguous int8 (N, OH, OW, Cout)) through oneDNN
    (only when ``native.has_dnnl()``); returns the call bound for reruns, or None if an
    operand had to be copied."""
    operands = (x, w, bias, multiplier, shift)
    arrays = _depthwise_arrays(*operands)
    call, buffers = _conv_call(arrays, stride, dilation, padding, out_hw, input_zp, output_zp, act_min,
                               act_max, out, groups=groups)
    check_status(library().npu_conv_call(call))
    if not _bindable(operands, arrays, out):
        return None
    return BoundCall(library().NPU_STEP_CONV, call, operands + (out,), buffers)


def bind_table2(a: np.ndarray, b: np.ndarray, table: np.ndarray, out: np.ndarray) -> BoundCall | None:
    """``out = table[a << 8 | b]`` elementwise, as a call for reruns; None unless all four
    are C-contiguous int8 with a, b and out of one shape (no broadcasting)."""
    arrays = (a, b, table, out)
    if (a.shape != b.shape or a.shape != out.shape or table.size != 1 << 16
            or any(x.dtype != np.int8 or not x.flags.c_contiguous for x in arrays)):
        return None
    buffers = (_ptr(a), _ptr(b), _ptr(table), _out_ptr(out))
    call = ffi.new("struct npu_table2_call *", {"a": buffers[0], "b": buffers[1], "n": a.size,
                                                "table": buffers[2], "out": buffers[3]})
    return BoundCall(library().NPU_STEP_TABLE2, call, arrays, buffers)


def _flat_ok(*arrays: np.ndarray) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


def bind_pool(kind: str, x: np.ndarray, out: np.ndarray, filter_hw: tuple[int, int], stride: tuple[int, int],
              padding: tuple[int, int], act_min: int, act_max: int) -> BoundCall | None:
    """Average or max pooling (``kind`` "avg" / "max") of int8 NHWC ``x`` into ``out`` as a
    call (run it for the result); None unless both are C-contiguous int8. Geometry checked
    by the caller."""
    if x.dtype != np.int8 or out.dtype != np.int8 or not _flat_ok(x, out):
        return None
    n, h, w, c = x.shape
    _, oh, ow, _ = out.shape
    buffers = (_ptr(x), _out_ptr(out))
    call = ffi.new("struct npu_pool_call *", {
        "x": buffers[0], "n": n, "h": h, "w": w, "c": c, "fh": filter_hw[0], "fw": filter_hw[1],
        "sh": stride[0], "sw": stride[1], "pt": padding[0], "pl": padding[1], "oh": oh, "ow": ow,
        "act_min": act_min, "act_max": act_max, "out": buffers[1]})
    step_kind = library().NPU_STEP_AVG_POOL if kind == "avg" else library().NPU_STEP_MAX_POOL
    return BoundCall(step_kind, call, (x, out), buffers)


def bind_convert(x: np.ndarray, out: np.ndarray, scale: float, zero_point: int) -> BoundCall | None:
    """QUANTIZE (float32 -> int8 or int16) or DEQUANTIZE (int8 or int16 -> float32) of ``x``
    into ``out`` as a call; None unless both are C-contiguous of one size and those dtypes
    (or without the C kernels)."""
    if library() is None or x.size != out.size or not _flat_ok(x, out):
        return None
    if x.dtype == np.float32 and out.dtype == np.int8:
        kind = library().NPU_STEP_QUANTIZE
    elif x.dtype == np.int8 and out.dtype == np.float32:
        kind = library().NPU_STEP_DEQUANTIZE
    elif x.dtype == np.float32 and out.dtype == np.int16:
        kind = library().NPU_STEP_QUANTIZE16
    elif x.dtype == np.int16 and out.dtype == np.float32:
        kind = library().NPU_STEP_DEQUANTIZE16
    else:
        return None
    buffers = (_ptr(x), _out_ptr(out))
    call = ffi.new("struct npu_convert_call *", {"x": buffers[0], "n": x.size,
                                                  "scale": float(np.float32(scale)),
                                                  "zero_point": int(zero_point), "out": buffers[1]})
    return BoundCall(kind, call, (x, out), buffers)


def bind_softmax(x: np.ndarray, out: np.ndarray, exp_t: np.ndarray, terms_t: np.ndarray,
                 valid_t: np.ndarray) -> BoundCall | None:
    """Softmax over the last axis of int8 ``x`` into ``out`` with a parameter set's tables
    (256 entries each), as a call; None unless x and out are C-contiguous int8."""
    if x.dtype != np.int8 or out.dtype != np.int8 or x.shape != out.shape or not _flat_ok(x, out):
        return None
    tables = (np.ascontiguousarray(exp_t, dtype=np.int32), np.ascontiguousarray(terms_t, dtype=np.int32),
              np.ascontiguousarray(valid_t, dtype=np.int8))
    depth = x.shape[-1] if x.ndim else 1
    buffers = (_ptr(x), *(_ptr(t) for t in tables), _out_ptr(out))
    call = ffi.new("struct npu_softmax_call *", {
        "x": buffers[0], "rows": x.size // max(depth, 1), "depth": depth, "exp_t": buffers[1],
        "terms_t": buffers[2], "valid_t": buffers[3], "out": buffers[4]})
    return BoundCall(library().NPU_STEP_SOFTMAX, call, (x, out, *tables), buffers)


def bind_lstm(x: np.ndarray, w: np.ndarray, r: np.ndarray, biases: np.ndarray, tables: tuple, h_in: np.ndarray,
              c_in: np.ndarray, out: np.ndarray, h_out: np.ndarray, c_out: np.ndarray, *, batch_major: bool,
              multipliers: np.ndarray, shifts: np.ndarray, cell_shift: int, cell_clip: int,
              hidden_multiplier: int, hidden_shift: int, hidden_zp: int) -> BoundCall | None:
    """A whole LSTM layer (``npu_lstm_s8``, kernels/lstm.py's formula) as a call (run it for
    the result); None unless every operand is C-contiguous of its dtype. ``x`` and ``out``
    as stored (``batch_major``: [batch, steps, ...]); ``tables``: the logistic, gate tanh and
    cell tanh tables (int16[65536] each). Sizes checked by the caller."""
    operands = (x, w, r, biases, h_in, c_in, out, h_out, c_out)
    dtypes = (np.int8, np.int8, np.int8, np.int32, np.int8, np.int16, np.int8, np.int8, np.int16)
    if any(a.dtype != d or not a.flags.c_contiguous for a, d in zip(operands, dtypes)):
        return None
    mult, sh = quant_arrays(np.asarray(multipliers), np.asarray(shifts))
    tables = tuple(np.ascontiguousarray(t, dtype=np.int16) for t in tables)
    steps, batch = (x.shape[1], x.shape[0]) if batch_major else x.shape[:2]
    buffers = (_ptr(x), _ptr(w), _ptr(r), _ptr(biases), _ptr(mult), _ptr(sh), *(_ptr(t) for t in tables),
               _ptr(h_in), _ptr(c_in), _out_ptr(h_out), _out_ptr(c_out), _out_ptr(out))
    call = ffi.new("struct npu_lstm_call *", {
        "x": buffers[0], "steps": steps, "batch": batch, "n_input": w.shape[2], "n_cell": w.shape[1],
        "batch_major": int(batch_major), "w": buffers[1], "r": buffers[2], "bias": buffers[3],
        "mult": buffers[4], "shift": buffers[5], "sigmoid": buffers[6], "tanh_gate": buffers[7],
        "tanh_cell": buffers[8], "cell_shift": cell_shift, "cell_clip": cell_clip,
        "hidden_mult": hidden_multiplier, "hidden_shift": hidden_shift, "hidden_zp": hidden_zp,
        "h_in": buffers[9], "c_in": buffers[10], "h_out": buffers[11], "c_out": buffers[12], "out": buffers[13]})
    return BoundCall(library().NPU_STEP_LSTM, call, operands, (buffers, mult, sh, tables))


def bind_transpose_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, stride: tuple[int, int],
                        padding: tuple[int, int], input_zp: int, output_zp: int, multiplier: np.ndarray,
                        shift: np.ndarray, act_min: int, act_max: int, out: np.ndarray) -> BoundCall | None:
    """TRANSPOSE_CONV of NHWC ``x`` (int8, or int16 with an int64 bias) with int8 ``w`` (cout, kh,
    kw, cin) into ``out`` (``transpose_conv_kernels.c``), operands the numpy kernel checked, as
    a call; None unless every array is C-contiguous of the kernel's dtype."""
    mult, sft = quant_arrays(np.asarray(multiplier).reshape(-1), np.asarray(shift).reshape(-1))
    wide = x.dtype == np.int16
    if (library() is None or x.dtype not in (np.int8, np.int16) or w.dtype != np.int8 or out.dtype != x.dtype
            or not all(0 <= v <= INT32_MAX for v in (*stride, *padding))     # u32 fields: numpy takes the rest
            or (bias is not None and (bias.dtype != (np.int64 if wide else np.int32)
                                      or not bias.flags.c_contiguous))
            or not (x.flags.c_contiguous and w.flags.c_contiguous and out.flags.c_contiguous)):
        return None
    n, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    buffers = (_ptr(x), _ptr(w), _opt_ptr(bias), _ptr(mult), _ptr(sft), _out_ptr(out))
    call = ffi.new("struct npu_transpose_conv_call *", {
        "x": buffers[0], "n": n, "h": h, "w": wd, "cin": cin, "filter": buffers[1], "cout": cout, "kh": kh,
        "kw": kw, "sh": stride[0], "sw": stride[1], "pt": padding[0], "pl": padding[1], "oh": out.shape[1],
        "ow": out.shape[2], "bias": buffers[2], "mult": buffers[3], "shift": buffers[4],
        "per_channel": int(mult.size > 1), "input_zp": input_zp, "output_zp": output_zp, "act_min": act_min,
        "act_max": act_max, "wide": int(wide), "out": buffers[5]})
    return BoundCall(library().NPU_STEP_TRANSPOSE_CONV, call, (x, w, bias, multiplier, shift, out),
                     (buffers, mult, sft))
