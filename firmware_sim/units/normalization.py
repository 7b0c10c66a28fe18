"""The normalization unit: INSTANCE_NORM, each (batch, channel) plane normalized over its
pixels and scaled and shifted per channel (descriptor: ``npu_hw.ops``, formula:
``firmware_sim.kernels.instance_norm``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import instance_norm as kernel
from npu_hw import ops

from .common import Rerun, act_dtype, dims, unit


def _cost(desc: np.void) -> tuple[int, int]:
    n = int(desc["batch"]) * int(desc["pixels"]) * int(desc["channels"])
    return 3 * n, 2 * n          # two sums and one multiply-add an element; read once, write once


@unit(ops.OP_INSTANCE_NORM, _cost)
def instance_norm(desc: np.void, dma) -> Rerun | None:
    """int8, or int16 with ``OPF_INT16``; gamma and beta int8 or int16 by their own fields."""
    dtype = act_dtype(desc)
    shape = dims((desc["batch"], desc["pixels"], desc["channels"]), "batch/pixels/channels")
    x = dma.read_array(int(desc["input"]), dtype, shape)
    gamma = dma.read_array(int(desc["gamma"]), np.int16 if int(desc["gamma_int16"]) else np.int8,
                           dims((desc["gamma_size"],), "gamma_size"))
    beta = dma.read_array(int(desc["beta"]), np.int16 if int(desc["beta_int16"]) else np.int8,
                          dims((desc["beta_size"],), "beta_size"))
    out = dma.write_array(int(desc["output"]), dtype, shape)
    kernel.instance_norm(x, gamma, beta, out=out, **{f: int(desc[f]) for f in (
        "input_zp", "gamma_zp", "beta_zp", "output_zp", "act_min", "act_max")}, **{f: float(desc[f]) for f in (
            "input_scale", "gamma_scale", "beta_scale", "output_scale", "epsilon")})
    return None
