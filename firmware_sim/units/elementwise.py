"""The elementwise unit: ADD, MUL and the (re/de)quantization ops QUANTIZE, REQUANTIZE,
DEQUANTIZE (descriptors: ``spec.ops``)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from firmware_sim.kernels import elementwise
from firmware_sim.spec import ops

from .common import OpDescriptorError, Rerun, count, plan, prod, ranked, unit


def _parse_binary(desc: np.void, params: tuple[str, ...]) -> tuple:
    s1, s2, so = (ranked(desc, f) for f in ("in1_shape", "in2_shape", "out_shape"))
    try:
        if np.broadcast_shapes(s1, s2) != so:
            raise OpDescriptorError(f"{s1} and {s2} do not broadcast to {so}")
    except ValueError as exc:
        raise OpDescriptorError(str(exc)) from None
    return ((int(desc["input1"]), s1), (int(desc["input2"]), s2), (int(desc["output"]), so),
            {name: int(desc[name]) for name in params})


_ADD_PARAMS = ("input1_zp", "input2_zp", "output_zp", "left_shift", "input1_multiplier",
               "input1_shift", "input2_multiplier", "input2_shift", "output_multiplier",
               "output_shift", "act_min", "act_max")
_MUL_PARAMS = ("input1_zp", "input2_zp", "output_zp", "multiplier", "shift", "act_min", "act_max")


def _binary(desc: np.void, dma, kind: str, params: tuple[str, ...]) -> Rerun | None:
    a_at, b_at, out_at, kwargs = plan(kind, desc, lambda d: _parse_binary(d, params)).fields
    return elementwise.binary_bound(
        kind, dma.read_array(a_at[0], np.int8, a_at[1]), dma.read_array(b_at[0], np.int8, b_at[1]),
        out=dma.write_array(out_at[0], np.int8, out_at[1]), **kwargs)


def _binary_cost(desc: np.void) -> tuple[int, int]:
    def size(field: str) -> int:
        return prod(desc[field][:int(desc["rank"])])
    out = size("out_shape")
    return out, size("in1_shape") + size("in2_shape") + out


@unit(ops.OP_ADD, _binary_cost)
def add(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "add", _ADD_PARAMS)


@unit(ops.OP_MUL, _binary_cost)
def mul(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "mul", _MUL_PARAMS)


def flat_cost(in_bytes: int, out_bytes: int, extra: int = 0) -> Callable[[np.void], tuple[int, int]]:
    """The cost of a flat elementwise descriptor (``count`` elements)."""
    def cost(desc: np.void) -> tuple[int, int]:
        n = int(desc["count"])
        return n, n * (in_bytes + out_bytes) + extra
    return cost


@unit(ops.OP_QUANTIZE, flat_cost(4, 1))
def quantize(desc: np.void, dma) -> Rerun | None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.float32, (n,))
    return elementwise.convert_bound(x, scale=float(desc["scale"]), zero_point=int(desc["zero_point"]),
                                     out=dma.write_array(int(desc["output"]), np.int8, (n,)))


@unit(ops.OP_REQUANTIZE, flat_cost(1, 1))
def requantize(desc: np.void, dma) -> None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    elementwise.requantize(x, input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                           multiplier=int(desc["multiplier"]), shift=int(desc["shift"]),
                           out=dma.write_array(int(desc["output"]), np.int8, (n,)))


@unit(ops.OP_DEQUANTIZE, flat_cost(1, 4))
def dequantize(desc: np.void, dma) -> Rerun | None:
    n = count(desc)
    x = dma.read_array(int(desc["input"]), np.int8, (n,))
    return elementwise.convert_bound(x, scale=float(desc["scale"]), zero_point=int(desc["zero_point"]),
                                     out=dma.write_array(int(desc["output"]), np.float32, (n,)))
