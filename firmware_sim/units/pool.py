"""The pooling unit: MAX_POOL_2D, AVERAGE_POOL_2D and MEAN (descriptors: ``spec.ops``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import pooling
from firmware_sim.spec import ops

from .common import OpDescriptorError, Rerun, dims, plan, prod, ranked, unit


def _parse(desc: np.void) -> tuple:
    n, h, w, c = dims(desc["in_shape"], "in_shape")
    on, oh, ow, oc = dims(desc["out_shape"], "out_shape")
    if (on, oc) != (n, c):
        raise OpDescriptorError("pooling keeps batch and channels")
    kwargs = dict(filter_hw=tuple(int(v) for v in desc["filter_hw"]),
                  stride=tuple(int(v) for v in desc["stride"]),
                  padding=tuple(int(v) for v in desc["padding"]), out_hw=(oh, ow),
                  act_min=int(desc["act_min"]), act_max=int(desc["act_max"]))
    return (int(desc["input"]), (n, h, w, c)), (int(desc["output"]), (n, oh, ow, c)), kwargs


def _pool(desc: np.void, dma, fn) -> Rerun | None:
    x_at, out_at, kwargs = plan("pool", desc, _parse).fields
    return fn(dma.read_array(x_at[0], np.int8, x_at[1]),
              out=dma.write_array(out_at[0], np.int8, out_at[1]), **kwargs)


def _pool_cost(desc: np.void) -> tuple[int, int]:
    out = prod(desc["out_shape"])
    return out * prod(desc["filter_hw"]), prod(desc["in_shape"]) + out


@unit(ops.OP_MAX_POOL_2D, _pool_cost)
def max_pool_2d(desc: np.void, dma) -> None:
    _pool(desc, dma, pooling.max_pool2d)        # returns its output, not a rerun


@unit(ops.OP_AVERAGE_POOL_2D, _pool_cost)
def average_pool_2d(desc: np.void, dma) -> Rerun | None:
    return _pool(desc, dma, pooling.avg_pool2d_bound)


def _mean_cost(desc: np.void) -> tuple[int, int]:
    shape = [int(v) for v in desc["in_shape"][:int(desc["rank"])]]
    mask = int(desc["axes_mask"])
    out = prod(d for i, d in enumerate(shape) if not mask >> i & 1)
    return prod(shape), prod(shape) + out


@unit(ops.OP_MEAN, _mean_cost)
def mean(desc: np.void, dma) -> None:
    shape = ranked(desc, "in_shape")
    mask = int(desc["axes_mask"])
    axes = tuple(i for i in range(len(shape)) if mask >> i & 1)
    if not axes or mask >> len(shape):
        raise OpDescriptorError(f"axes mask {mask:#x} does not fit rank {len(shape)}")
    x = dma.read_array(int(desc["input"]), np.int8, shape)
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = dma.write_array(int(desc["output"]), np.int8, out_shape)
    pooling.mean(x, axes, input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                 multiplier=int(desc["multiplier"]), shift=int(desc["shift"]), keep_dims=True,
                 out=out)
