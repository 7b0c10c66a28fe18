"""The pooling unit: MAX_POOL_2D, AVERAGE_POOL_2D and MEAN (descriptors: ``npu_hw.ops``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import pooling
from firmware_sim.kernels.native import int16_calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, act_dtype, dims, plan, prod, ranked, unit


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


def _pool(desc: np.void, dma, fn, bound, kind: str) -> Rerun | None:
    """Pool with ``fn`` (``kind`` "avg" / "max"): int8 through its ``bound`` variant, int16
    in C from the first run (``int16_calls.bind_pool16``, after the numpy kernel's checks;
    the numpy kernel when there is no C call)."""
    x_at, out_at, kwargs = plan("pool", desc, _parse).fields
    dtype = act_dtype(desc)
    x = dma.read_array(x_at[0], dtype, x_at[1])
    out = dma.write_array(out_at[0], dtype, out_at[1])
    if dtype is not np.int16:
        return bound(x, out=out, **kwargs)
    pooling.check_pool2d(kind, x, out=out, **kwargs)
    call = int16_calls.bind_pool16(kind, x, out, kwargs["filter_hw"], kwargs["stride"], kwargs["padding"],
                                   kwargs["act_min"], kwargs["act_max"])
    if call is None:
        fn(x, out=out, **kwargs)
    else:
        call()
    return call


def _pool_cost(desc: np.void) -> tuple[int, int]:
    out = prod(desc["out_shape"])
    size = np.dtype(act_dtype(desc)).itemsize
    return out * prod(desc["filter_hw"]), (prod(desc["in_shape"]) + out) * size


@unit(ops.OP_MAX_POOL_2D, _pool_cost)
def max_pool_2d(desc: np.void, dma) -> Rerun | None:
    return _pool(desc, dma, pooling.max_pool2d, pooling.max_pool2d_bound, "max")


@unit(ops.OP_AVERAGE_POOL_2D, _pool_cost)
def average_pool_2d(desc: np.void, dma) -> Rerun | None:
    return _pool(desc, dma, pooling.avg_pool2d, pooling.avg_pool2d_bound, "avg")


def _mean_cost(desc: np.void) -> tuple[int, int]:
    shape = [int(v) for v in desc["in_shape"][:int(desc["rank"])]]
    mask = int(desc["axes_mask"])
    out = prod(d for i, d in enumerate(shape) if not mask >> i & 1)
    return prod(shape), (prod(shape) + out) * np.dtype(act_dtype(desc)).itemsize


@unit(ops.OP_MEAN, _mean_cost)
def mean(desc: np.void, dma) -> Rerun | None:
    dtype = act_dtype(desc)
    if dtype is np.int16 and (int(desc["input_zp"]) or int(desc["output_zp"])):
        raise OpDescriptorError("int16 MEAN needs zero points 0")
    shape = ranked(desc, "in_shape")
    mask = int(desc["axes_mask"])
    axes = tuple(i for i in range(len(shape)) if mask >> i & 1)
    if not axes or mask >> len(shape):
        raise OpDescriptorError(f"axes mask {mask:#x} does not fit rank {len(shape)}")
    x = dma.read_array(int(desc["input"]), dtype, shape)
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = dma.write_array(int(desc["output"]), dtype, out_shape)
    return pooling.mean_bound(x, axes, input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                              multiplier=int(desc["multiplier"]), shift=int(desc["shift"]), out=out)
