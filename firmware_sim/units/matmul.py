"""The matrix unit for two activations: BATCH_MATMUL (descriptor: ``npu_hw.ops``), int8 or,
with ``OPF_INT16``, int16 (LiteRT's int16 kernel: zero points 0, int64 sums); its numpy kernels
rerun in C (``int16_calls.bind_matmul8`` / ``bind_matmul16``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import matmul
from firmware_sim.kernels.native import int16_calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, act_dtype, int16_zero_points, prod, ranked, unit


def _shapes(desc: np.void) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool, bool]:
    lhs, rhs = ranked(desc, "lhs_shape"), ranked(desc, "rhs_shape")
    if len(lhs) < 2:
        raise OpDescriptorError("batch_matmul needs rank >= 2")
    flags = int(desc["flags"])
    adj_x, adj_y = bool(flags & ops.OPF_ADJ_X), bool(flags & ops.OPF_ADJ_Y)
    try:
        out = matmul.matmul_shape(lhs, rhs, adj_x, adj_y)
    except ValueError as exc:
        raise OpDescriptorError(str(exc)) from None
    return lhs, rhs, out, adj_x, adj_y


def _cost(desc: np.void) -> tuple[int, int]:
    try:
        lhs, rhs, out, adj_x, _ = _shapes(desc)
    except ValueError:
        return 0, 0
    depth = lhs[-2] if adj_x else lhs[-1]
    act = 2 if int(desc["flags"]) & ops.OPF_INT16 else 1
    return prod(out) * depth, (prod(lhs) + prod(rhs) + prod(out)) * act


@unit(ops.OP_BATCH_MATMUL, _cost)
def batch_matmul(desc: np.void, dma) -> Rerun | None:
    lhs_shape, rhs_shape, out_shape, adj_x, adj_y = _shapes(desc)
    dtype = act_dtype(desc)
    if dtype == np.int16:
        int16_zero_points(desc, "lhs_zp", "rhs_zp", "output_zp")
    lhs = dma.read_array(int(desc["lhs"]), dtype, lhs_shape)
    rhs = dma.read_array(int(desc["rhs"]), dtype, rhs_shape)
    out = dma.write_array(int(desc["output"]), dtype, out_shape)
    kernel = matmul.matmul_int16 if dtype == np.int16 else matmul.matmul_int8
    quant = dict(multiplier=int(desc["multiplier"]), shift=int(desc["shift"]), act_min=int(desc["act_min"]),
                 act_max=int(desc["act_max"]))
    kernel(lhs, rhs, lhs_zp=int(desc["lhs_zp"]), rhs_zp=int(desc["rhs_zp"]), output_zp=int(desc["output_zp"]),
           adj_x=adj_x, adj_y=adj_y, out=out, **quant)
    if dtype != np.int16:
        return int16_calls.bind_matmul8(lhs, rhs, out, adj_x=adj_x, adj_y=adj_y, lhs_zp=int(desc["lhs_zp"]),
                                        rhs_zp=int(desc["rhs_zp"]), output_zp=int(desc["output_zp"]), **quant)
    return int16_calls.bind_matmul16(lhs, rhs, out, adj_x=adj_x, adj_y=adj_y, **quant)
