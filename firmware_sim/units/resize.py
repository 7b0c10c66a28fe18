"""The resize unit: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (descriptor: ``npu_hw.ops``);
numpy, then the rerun in C (``kernels.resize.resize_bound``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import resize
from npu_hw import ops

from .common import Rerun, act_dtype, dims, prod, unit


def _run(desc: np.void, dma, kind: str) -> Rerun | None:
    n, h, w, c = dims(desc["in_shape"], "in_shape")
    oh, ow = dims(desc["out_hw"], "out_hw")
    flags = int(desc["flags"])
    dtype = act_dtype(desc)
    x = dma.read_array(int(desc["input"]), dtype, (n, h, w, c))
    return resize.resize_bound(kind, x, (oh, ow), align_corners=bool(flags & ops.OPF_ALIGN_CORNERS),
                               half_pixel_centers=bool(flags & ops.OPF_HALF_PIXEL_CENTERS),
                               out=dma.write_array(int(desc["output"]), dtype, (n, oh, ow, c)))


def _cost(taps: int):
    def cost(desc: np.void) -> tuple[int, int]:
        n, h, w, c = (int(v) for v in desc["in_shape"])
        out = n * c * prod(desc["out_hw"])
        return out * taps, (n * h * w * c + out) * np.dtype(act_dtype(desc)).itemsize
    return cost


@unit(ops.OP_RESIZE_BILINEAR, _cost(4))
def resize_bilinear(desc: np.void, dma) -> Rerun | None:
    return _run(desc, dma, "bilinear")


@unit(ops.OP_RESIZE_NEAREST_NEIGHBOR, _cost(0))
def resize_nearest_neighbor(desc: np.void, dma) -> Rerun | None:
    return _run(desc, dma, "nearest")
