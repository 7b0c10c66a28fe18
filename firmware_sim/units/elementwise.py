"""The elementwise unit: ADD, MUL and the (re/de)quantization ops QUANTIZE, REQUANTIZE,
DEQUANTIZE (descriptors: ``npu_hw.ops``), int8 or int16 (``OPF_INT16``, ``OPF_INT16_INPUT``),
and ADD16_PER_CHANNEL (int16, one requantization per output channel)."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from firmware_sim.kernels import byte_tables, elementwise, int16x8
from firmware_sim.kernels.fixedpoint import INT32_MAX, INT32_MIN
from firmware_sim.kernels.native import calls as native_calls
from firmware_sim.kernels.native import int16_calls
from npu_hw import ops

from .common import (
    Rerun,
    act_dtype,
    count,
    int16_zero_points,
    parse_binary,
    parse_binary_per_channel,
    plan,
    prod,
    unit,
)

_ADD_PARAMS = ("input1_zp", "input2_zp", "output_zp", "left_shift", "input1_multiplier",
               "input1_shift", "input2_multiplier", "input2_shift", "output_multiplier",
               "output_shift", "act_min", "act_max")
_MUL_PARAMS = ("input1_zp", "input2_zp", "output_zp", "multiplier", "shift", "act_min", "act_max")


_ZERO_POINTS = ("input1_zp", "input2_zp", "output_zp")
# An int16 ADD's / MUL's requantization as the C kernel's parameter row (int16_calls.bind_binary16).
_REQUANT16 = {"add": ("input1_multiplier", "input1_shift", "input2_multiplier", "input2_shift", "output_multiplier",
                      "output_shift"),
              "mul": ("multiplier", "shift")}


def _parse_int16(desc: np.void, params: tuple[str, ...]) -> tuple:
    int16_zero_points(desc, *_ZERO_POINTS)
    return parse_binary(desc, tuple(p for p in params if p not in _ZERO_POINTS))


def _binary(desc: np.void, dma, kind: str, params: tuple[str, ...], fn16) -> Rerun | None:
    """ADD or MUL (``kind``): int16 in C from the first run (``int16_calls.bind_binary16``,
    after ``fn16``'s checks; ``fn16`` in numpy when there is no C call); int8 through
    ``elementwise.binary_bound`` (its rerun, if any)."""
    if int(desc["flags"]) & ops.OPF_INT16:
        a_at, b_at, out_at, kwargs = plan(kind + "16", desc, lambda d: _parse_int16(d, params)).fields
        a, b = dma.read_array(a_at[0], np.int16, a_at[1]), dma.read_array(b_at[0], np.int16, b_at[1])
        out = dma.write_array(out_at[0], np.int16, out_at[1])
        row = [kwargs[f] for f in _REQUANT16[kind]]
        if kind == "add":
            int16x8.check_add_int16(a, b, out, left_shift=kwargs["left_shift"], shifts=row[1::2], multipliers=row[::2],
                                    act_min=kwargs["act_min"], act_max=kwargs["act_max"])
        else:
            int16x8.check_mul_int16(a, b, out, shift=kwargs["shift"], act_min=kwargs["act_min"],
                                    act_max=kwargs["act_max"])
        bound = None
        if all(INT32_MIN <= v <= INT32_MAX for v in row):
            bound = int16_calls.bind_binary16(kind, a, b, out, np.array([row], np.int32),
                                              left_shift=kwargs.get("left_shift", 0), act_min=kwargs["act_min"],
                                              act_max=kwargs["act_max"])
        if bound is None:
            fn16(a, b, out=out, **kwargs)
        else:
            bound()
        return bound
    a_at, b_at, out_at, kwargs = plan(kind, desc, lambda d: parse_binary(d, params)).fields
    return elementwise.binary_bound(
        kind, dma.read_array(a_at[0], np.int8, a_at[1]), dma.read_array(b_at[0], np.int8, b_at[1]),
        out=dma.write_array(out_at[0], np.int8, out_at[1]), **kwargs)


def _binary_cost(desc: np.void) -> tuple[int, int]:
    def size(field: str) -> int:
        return prod(desc[field][:int(desc["rank"])])
    out = size("out_shape")
    return out, (size("in1_shape") + size("in2_shape") + out) * np.dtype(act_dtype(desc)).itemsize


@unit(ops.OP_ADD, _binary_cost)
def add(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "add", _ADD_PARAMS, int16x8.add_int16)


@unit(ops.OP_MUL, _binary_cost)
def mul(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "mul", _MUL_PARAMS, int16x8.mul_int16)


def int16_binary_cost(desc: np.void) -> tuple[int, int]:
    def size(field: str) -> int:
        return prod(desc[field][:int(desc["rank"])])
    out = size("out_shape")
    return out, (size("in1_shape") + size("in2_shape") + out) * 2


@unit(ops.OP_ADD16_PER_CHANNEL, int16_binary_cost)
def add16_per_channel(desc: np.void, dma) -> Rerun | None:
    """int16 ADD, output channel c requantized with row c of the ``params`` array."""
    a_at, b_at, out_at, params_at, kwargs = plan(
        "add16_per_channel", desc,
        lambda d: parse_binary_per_channel(d, len(ops.ADD16_CHANNEL_PARAMS), ("left_shift", "act_min", "act_max"))
    ).fields
    a, b = dma.read_array(a_at[0], np.int16, a_at[1]), dma.read_array(b_at[0], np.int16, b_at[1])
    params = dma.read_array(params_at[0], np.int32, params_at[1])
    out = dma.write_array(out_at[0], np.int16, out_at[1])
    int16x8.add_int16_per_channel(a, b, params=params, out=out, **kwargs)
    return int16_calls.bind_binary16("add", a, b, out, params, **kwargs)


def flat_cost(in_bytes: int, out_bytes: int, extra: int = 0) -> Callable[[np.void], tuple[int, int]]:
    """The cost of a flat elementwise descriptor (``count`` elements)."""
    def cost(desc: np.void) -> tuple[int, int]:
        n = int(desc["count"])
        return n, n * (in_bytes + out_bytes) + extra
    return cost


def _conversion_cost(in_bytes: int, out_bytes: int, in_int16: int,
                     out_int16: int) -> Callable[[np.void], tuple[int, int]]:
    """A conversion's cost; a side whose int16 flag (``in_int16`` / ``out_int16``) is set
    has 2-byte elements."""
    def cost(desc: np.void) -> tuple[int, int]:
        flags = int(desc["flags"])
        return flat_cost(2 if flags & in_int16 else in_bytes,
                         2 if flags & out_int16 else out_bytes)(desc)
    return cost


@unit(ops.OP_QUANTIZE, _conversion_cost(4, 1, 0, ops.OPF_INT16))
def quantize(desc: np.void, dma) -> Rerun | None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.float32, (n,))
    if int(desc["flags"]) & ops.OPF_INT16:      # numpy, then its rerun in C
        out16 = dma.write_array(int(desc["output"]), np.int16, (n,))
        int16x8.quantize_int16(x, scale=float(desc["scale"]), zero_point=int(desc["zero_point"]), out=out16)
        return native_calls.bind_convert(x, out16, float(desc["scale"]), int(desc["zero_point"]))
    return elementwise.convert_bound(x, scale=float(desc["scale"]), zero_point=int(desc["zero_point"]),
                                     out=dma.write_array(int(desc["output"]), np.int8, (n,)))


@unit(ops.OP_REQUANTIZE, _conversion_cost(1, 1, ops.OPF_INT16_INPUT, ops.OPF_INT16))
def requantize(desc: np.void, dma) -> Rerun | None:
    """Reruns as a table lookup in C (``byte_tables``): int8 or int16 on either side."""
    n = count(desc)
    flags = int(desc["flags"])
    src = np.int16 if flags & ops.OPF_INT16_INPUT else np.int8
    dst = np.int16 if flags & ops.OPF_INT16 else np.int8
    x = dma.read_array(int(desc["input"]), src, (n,))
    out = dma.write_array(int(desc["output"]), dst, (n,))
    kwargs = dict(input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                  multiplier=int(desc["multiplier"]), shift=int(desc["shift"]))
    if src is np.int8 and dst is np.int8:
        return byte_tables.unary_bound("requantize", elementwise.requantize, x, out, **kwargs)
    return byte_tables.unary_bound(f"requantize to {np.dtype(dst)}", partial(int16x8.requantize, out_dtype=dst),
                                   x, out, **kwargs)


@unit(ops.OP_DEQUANTIZE, _conversion_cost(1, 4, ops.OPF_INT16, 0))
def dequantize(desc: np.void, dma) -> Rerun | None:
    n = count(desc)
    out = dma.write_array(int(desc["output"]), np.float32, (n,))
    if int(desc["flags"]) & ops.OPF_INT16:
        x16 = dma.read_array(int(desc["input"]), np.int16, (n,))
        int16x8.dequantize_int16(x16, scale=float(desc["scale"]),
                                 zero_point=int(desc["zero_point"]), out=out)
        return native_calls.bind_convert(x16, out, float(desc["scale"]), int(desc["zero_point"]))
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    return elementwise.convert_bound(x, scale=float(desc["scale"]), zero_point=int(desc["zero_point"]),
                                     out=out)
