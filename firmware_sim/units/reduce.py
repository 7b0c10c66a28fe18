"""The reduction unit: SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_L2 over any axes, ARG_MAX and
ARG_MIN along one (descriptors: ``npu_hw.ops``). SUM, REDUCE_MAX, REDUCE_MIN and REDUCE_L2
rerun in C (``native.data_calls.bind_mean``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import reduce
from firmware_sim.kernels.native import data_calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, act_dtype, prod, ranked, unit


def _cost(desc: np.void) -> tuple[int, int]:
    shape = [int(v) for v in desc["in_shape"][:int(desc["rank"])]]
    mask = int(desc["axes_mask"])
    return prod(shape), prod(shape) + prod(d for i, d in enumerate(shape) if not mask >> i & 1)


def _operands(desc: np.void, dma, dtype: type = np.int8) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    shape = ranked(desc, "in_shape")
    mask = int(desc["axes_mask"])
    axes = tuple(i for i in range(len(shape)) if mask >> i & 1)
    if not axes or mask >> len(shape):
        raise OpDescriptorError(f"axes mask {mask:#x} does not fit rank {len(shape)}")
    x = dma.read_array(int(desc["input"]), dtype, shape)
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return x, axes, dma.write_array(int(desc["output"]), dtype, out_shape)


def _scale(desc: np.void) -> float:
    scale = float(desc["scale"])
    if not np.isfinite(scale) or scale <= 0:
        raise OpDescriptorError(f"scale {scale} must be finite and > 0")
    return scale


@unit(ops.OP_SUM, _cost)
def reduce_sum(desc: np.void, dma) -> Rerun | None:
    """numpy, then its rerun in C (``npu_mean``'s sum)."""
    x, axes, out = _operands(desc, dma)
    zp, multiplier, shift = int(desc["input_zp"]), int(desc["multiplier"]), int(desc["shift"])
    reduce.reduce_sum(x, axes, input_zp=zp, output_zp=int(desc["output_zp"]), multiplier=multiplier,
                      shift=shift, out=out)
    count = prod(x.shape[a] for a in axes)
    return data_calls.bind_mean(x, axes, out, zp_total=zp * count, multiplier=multiplier, shift=shift,
                                output_zp=int(desc["output_zp"]), act_min=-128, act_max=127)


@unit(ops.OP_REDUCE_MAX, _cost)
def reduce_max(desc: np.void, dma) -> Rerun | None:
    x, axes, out = _operands(desc, dma)
    reduce.reduce_max(x, axes, out=out)
    return data_calls.bind_mean(x, axes, out, reduce="max")


@unit(ops.OP_REDUCE_MIN, _cost)
def reduce_min(desc: np.void, dma) -> Rerun | None:
    x, axes, out = _operands(desc, dma)
    reduce.reduce_min(x, axes, out=out)
    return data_calls.bind_mean(x, axes, out, reduce="min")


@unit(ops.OP_REDUCE_L2, _cost)
def reduce_l2(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16`` (zero points 0); numpy, then its rerun in C
    (``npu_mean``'s sum of squares)."""
    x, axes, out = _operands(desc, dma, act_dtype(desc))
    zp, output_zp, scale = int(desc["input_zp"]), int(desc["output_zp"]), _scale(desc)
    reduce.reduce_l2(x, axes, input_zp=zp, output_zp=output_zp, scale=scale, out=out)
    info = np.iinfo(x.dtype)
    return data_calls.bind_mean(x, axes, out, reduce="l2", input_zp=zp, output_zp=output_zp, scale=scale,
                                act_min=int(info.min), act_max=int(info.max))


def _arg_cost(desc: np.void) -> tuple[int, int]:
    shape = [int(v) for v in desc["in_shape"][:int(desc["rank"])]]
    axis = int(desc["axis"])
    rest = prod(d for i, d in enumerate(shape) if i != axis)
    return prod(shape), prod(shape) + 8 * rest


def _arg(desc: np.void, dma, pick) -> None:
    shape = ranked(desc, "in_shape")
    axis = int(desc["axis"])
    if not 0 <= axis < len(shape):
        raise OpDescriptorError(f"axis {axis} outside rank {len(shape)}")
    dtype = np.int64 if int(desc["flags"]) & ops.OPF_INDEX_INT64 else np.int32
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    out_shape = tuple(d for i, d in enumerate(shape) if i != axis)
    pick(x, axis, dtype=dtype, out=dma.write_array(int(desc["output"]), dtype, out_shape))


@unit(ops.OP_ARG_MAX, _arg_cost)
def arg_max(desc: np.void, dma) -> None:
    _arg(desc, dma, reduce.index_of_max)


@unit(ops.OP_ARG_MIN, _arg_cost)
def arg_min(desc: np.void, dma) -> None:
    _arg(desc, dma, reduce.index_of_min)
