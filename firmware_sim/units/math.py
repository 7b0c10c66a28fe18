"""The math unit: PRELU (also PRELU16_PER_CHANNEL), SQUARED_DIFFERENCE, SUB, MAXIMUM, MINIMUM, DIV (broadcasting
binary ops), HARD_SWISH, LEAKY_RELU, RSQRT, ABS (unary integer formulas) and the row ops
L2_NORMALIZATION and LOG_SOFTMAX (descriptors: ``npu_hw.ops``)."""
from __future__ import annotations

import functools

import numpy as np

from firmware_sim.kernels import binary, byte_tables, int16x8, normalization, unary
from firmware_sim.kernels.fixedpoint import INT32_MAX, INT32_MIN
from firmware_sim.kernels.int16x8 import INT16_MAX, INT16_MIN
from firmware_sim.kernels.native import int16_calls, norm_calls
from npu_hw import ops

from .common import (
    Rerun,
    act_dtype,
    count,
    dims,
    int16_zero_points,
    parse_binary,
    parse_binary_per_channel,
    plan,
    prod,
    unit,
)
from .elementwise import flat_cost, int16_binary_cost


def _binary(desc: np.void, dma, kind: str, params: tuple[str, ...], kernel, dtype: type = np.int8) -> Rerun | None:
    """Two operands of ``dtype`` broadcast to the output (shapes at the output's rank); int8
    reruns as a two-byte table lookup in C (``byte_tables``), int16 PRELU, SUB, MAXIMUM and
    MINIMUM in C (``int16_calls.bind_binary16``)."""
    a_at, b_at, out_at, kwargs = plan(kind, desc, lambda d: parse_binary(d, params)).fields
    a, b = dma.read_array(a_at[0], dtype, a_at[1]), dma.read_array(b_at[0], dtype, b_at[1])
    out = dma.write_array(out_at[0], dtype, out_at[1])
    if dtype is np.int8:
        return byte_tables.binary_bound(kind, kernel, a, b, out, **kwargs)
    kernel(a, b, out=out, **kwargs)
    if kind == "sub16":
        row = [kwargs[f] for f in _ADD_LIKE[len(_ZPS) + 1:]]      # ADD's row: the multipliers and shifts
        if not all(INT32_MIN <= v <= INT32_MAX for v in row):
            return None
        return int16_calls.bind_binary16("sub", a, b, out, np.array([row], np.int32), left_shift=kwargs["left_shift"],
                                         act_min=kwargs["act_min"], act_max=kwargs["act_max"])
    if kind in ("maximum", "minimum"):
        return int16_calls.bind_binary16(kind, a, b, out, np.zeros((1, 0), np.int32), act_min=INT16_MIN,
                                         act_max=INT16_MAX)
    return None if kind != "prelu" else _prelu16_rerun(a, b, out, kwargs)


def _prelu16_rerun(a: np.ndarray, b: np.ndarray, out: np.ndarray, kwargs: dict) -> Rerun | None:
    """An int16 PRELU's rerun in C (``int16_calls.bind_binary16``), its requantization as one row."""
    row = [kwargs[f] for f in ("output_multiplier_1", "output_shift_1", "output_multiplier_2", "output_shift_2")]
    if not all(INT32_MIN <= v <= INT32_MAX for v in row):
        return None
    return int16_calls.bind_binary16("prelu", a, b, out, np.array([row], np.int32), act_min=INT16_MIN,
                                     act_max=INT16_MAX)


def _binary_cost(desc: np.void) -> tuple[int, int]:
    def size(field: str) -> int:
        return prod(desc[field][:int(desc["rank"])])
    out = size("out_shape")
    width = np.dtype(act_dtype(desc)).itemsize
    return out, width * (size("in1_shape") + size("in2_shape") + out)


_ZPS = ("input1_zp", "input2_zp", "output_zp")
_ADD_LIKE = _ZPS + ("left_shift", "input1_multiplier", "input1_shift", "input2_multiplier", "input2_shift",
                    "output_multiplier", "output_shift")


@unit(ops.OP_PRELU, _binary_cost)
def prelu(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (x, alpha and output)."""
    return _binary(desc, dma, "prelu", _ZPS + ("output_multiplier_1", "output_shift_1", "output_multiplier_2",
                                               "output_shift_2"), binary.prelu, act_dtype(desc))


@unit(ops.OP_PRELU16_PER_CHANNEL, int16_binary_cost)
def prelu16_per_channel(desc: np.void, dma) -> Rerun | None:
    """int16 PRELU, output channel c with row c of the ``params`` array; numpy, then its
    rerun in C (``int16_calls.bind_binary16``)."""
    a_at, b_at, out_at, params_at, _ = plan(
        "prelu16_per_channel", desc, lambda d: parse_binary_per_channel(d, len(ops.PRELU16_CHANNEL_PARAMS), ())
    ).fields
    a, b = dma.read_array(a_at[0], np.int16, a_at[1]), dma.read_array(b_at[0], np.int16, b_at[1])
    params = dma.read_array(params_at[0], np.int32, params_at[1])
    out = dma.write_array(out_at[0], np.int16, out_at[1])
    binary.prelu_int16_per_channel(a, b, params=params, out=out)
    return int16_calls.bind_binary16("prelu", a, b, out, params, act_min=INT16_MIN, act_max=INT16_MAX)


@unit(ops.OP_SQUARED_DIFFERENCE, _binary_cost)
def squared_difference(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "squared_difference", _ADD_LIKE, binary.squared_difference)


@unit(ops.OP_SUB, _binary_cost)
def sub(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (LiteRT's general int16 SUB, zero points 0; numpy,
    then its rerun in C: ``int16_calls.bind_binary16``, ADD's kernel with the scaled inputs
    subtracted: the LayerNorms escalation promotes center ``x - mean`` with it)."""
    if act_dtype(desc) is np.int16:
        int16_zero_points(desc, *_ZPS)
        return _binary(desc, dma, "sub16", _ADD_LIKE[len(_ZPS):] + ("act_min", "act_max"), int16x8.sub_int16,
                       np.int16)
    return _binary(desc, dma, "sub", _ADD_LIKE + ("act_min", "act_max"), binary.sub)


@unit(ops.OP_MAXIMUM, _binary_cost)
def maximum(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (one shared grid: the larger value)."""
    return _binary(desc, dma, "maximum", _ZPS, binary.maximum, act_dtype(desc))


@unit(ops.OP_MINIMUM, _binary_cost)
def minimum(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16``."""
    return _binary(desc, dma, "minimum", _ZPS, binary.minimum, act_dtype(desc))


@unit(ops.OP_DIV, _binary_cost)
def div(desc: np.void, dma) -> Rerun | None:
    return _binary(desc, dma, "div", _ZPS + ("output_multiplier", "output_shift", "act_min", "act_max"), binary.div)


def _flat(desc: np.void, dma, kind: str, kernel, params: tuple[str, ...], dtype: type = np.int8) -> Rerun | None:
    """A one-input op; reruns as a table lookup in C (``byte_tables``), int8 or int16."""
    n = count(desc)
    x = dma.read_array(int(desc["input"]), dtype, (n,))
    out = dma.write_array(int(desc["output"]), dtype, (n,))
    return byte_tables.unary_bound(kind, kernel, x, out, **{p: int(desc[p]) for p in params})


def _lut_or_int16_cost(desc: np.void) -> tuple[int, int]:
    if int(desc["flags"]) & ops.OPF_INT16:
        return flat_cost(2, 2)(desc)
    return flat_cost(1, 1, 256)(desc)


@unit(ops.OP_HARD_SWISH, _lut_or_int16_cost)
def hard_swish(desc: np.void, dma) -> Rerun | None:
    """int8 (LiteRT's formula), or int16 with ``OPF_INT16`` (ours: docs/hardware.md)."""
    return _flat(desc, dma, "hard_swish", unary.hard_swish,
                 ("input_zp", "output_zp", "output_multiplier", "output_shift", "reluish_multiplier",
                  "reluish_shift"), act_dtype(desc))


@unit(ops.OP_LEAKY_RELU, _lut_or_int16_cost)
def leaky_relu(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (LiteRT's int16 formula)."""
    return _flat(desc, dma, "leaky_relu", unary.leaky_relu,
                 ("input_zp", "output_zp", "multiplier_identity", "shift_identity", "multiplier_alpha",
                  "shift_alpha"), act_dtype(desc))


@unit(ops.OP_RSQRT, flat_cost(1, 1, 256))
def rsqrt(desc: np.void, dma) -> Rerun | None:
    return _flat(desc, dma, "rsqrt", unary.rsqrt, ("input_zp", "output_zp", "multiplier", "shift"))


@unit(ops.OP_ABS, _lut_or_int16_cost)
def abs_(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (LiteRT's int16 formula)."""
    return _flat(desc, dma, "abs_", unary.abs_, ("input_zp", "output_zp", "rescale", "multiplier", "shift"),
                 act_dtype(desc))


def _rows_cost(desc: np.void) -> tuple[int, int]:
    n = int(desc["rows"]) * int(desc["depth"])
    return 2 * n, 2 * n


@unit(ops.OP_L2_NORMALIZATION, _rows_cost)
def l2_normalization(desc: np.void, dma) -> Rerun | None:
    """Reruns in C (``norm_kernels.c``)."""
    shape = dims((desc["rows"], desc["depth"]), "rows/depth")
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    out = dma.write_array(int(desc["output"]), np.int8, shape)
    normalization.l2_normalization(x, input_zp=int(desc["input_zp"]), out=out)
    return norm_calls.bind_l2_normalization(x, out, input_zp=int(desc["input_zp"]))



@functools.lru_cache(maxsize=64)
def _log_softmax_tables(input_multiplier: int, input_left_shift: int, diff_min: int) -> tuple[np.ndarray, np.ndarray]:
    return normalization.log_softmax_tables(input_multiplier, input_left_shift, diff_min)


@unit(ops.OP_LOG_SOFTMAX, _rows_cost)
def log_softmax(desc: np.void, dma) -> Rerun | None:
    """Reruns in C (``norm_kernels.c``) with its parameters' tables."""
    params = {p: int(desc[p]) for p in ("input_multiplier", "input_left_shift", "reverse_scaling_divisor",
                                         "reverse_scaling_right_shift", "diff_min")}
    shape = dims((desc["rows"], desc["depth"]), "rows/depth")
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    out = dma.write_array(int(desc["output"]), np.int8, shape)
    normalization.log_softmax(x, out=out, **params)
    tables = _log_softmax_tables(params["input_multiplier"], params["input_left_shift"], params["diff_min"])
    return norm_calls.bind_log_softmax(x, out, tables, reverse_scaling_divisor=params["reverse_scaling_divisor"],
                                       reverse_scaling_right_shift=params["reverse_scaling_right_shift"],
                                       diff_min=params["diff_min"])
