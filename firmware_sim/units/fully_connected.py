"""The fully connected unit: FULLY_CONNECTED (descriptor: ``npu_hw.tasks``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import fully_connected as fc
from firmware_sim.kernels import int16x8, int16x16
from firmware_sim.kernels.native import int16_calls
from npu_hw import ops, tasks

from .common import OpDescriptorError, Rerun, dims, frozen, int16_zero_points, plan, unit


def _parse(desc: np.void) -> tuple:
    rows, k, n = dims((desc["rows"], desc["in_features"], desc["out_features"]),
                      "FULLY_CONNECTED rows/in_features/out_features")
    flags = int(desc["flags"])
    double = bool(flags & tasks.FC_DOUBLE_SCALE)
    per_channel = bool(flags & tasks.FC_PER_CHANNEL)
    if per_channel:
        quant = (int(desc["mult_iova"]), int(desc["shift_iova"]),
                 int(desc["scale_iova"]) if double else 0)
    else:
        quant = (frozen(np.array([desc["multiplier"]], np.int32)),
                 frozen(np.array([desc["shift"]], np.int32)),
                 frozen(np.array([desc["scale"]], np.float64)) if double else None)
    kwargs = dict(input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                  act_min=int(desc["act_min"]), act_max=int(desc["act_max"]))
    int16 = bool(flags & ops.OPF_INT16)
    weights16 = bool(flags & ops.OPF_WEIGHTS16)
    if weights16 and not int16:
        raise OpDescriptorError("OPF_WEIGHTS16 needs OPF_INT16 (int16 weights take int16 activations)")
    if int16:
        int16_zero_points(desc, "input_zp", "output_zp")
        if not double:
            raise OpDescriptorError("int16 FULLY_CONNECTED requantizes by its float64 scale "
                                    "(FC_DOUBLE_SCALE)")
        del kwargs["input_zp"], kwargs["output_zp"]
    return ((int(desc["input"]), (rows, k)), (int(desc["weights"]), (n, k)), int(desc["bias"]),
            per_channel, quant, (int(desc["output"]), (rows, n)), kwargs, int16, weights16)


def _cost(desc: np.void) -> tuple[int, int]:
    m, k, n = int(desc["rows"]), int(desc["in_features"]), int(desc["out_features"])
    flags = int(desc["flags"])
    per_channel = bool(flags & tasks.FC_PER_CHANNEL)
    params = n * 8 if per_channel else 0
    if per_channel and flags & tasks.FC_DOUBLE_SCALE:
        params += n * 8  # float64 scales
    act = 2 if flags & ops.OPF_INT16 else 1
    bias = n * 4 * act if int(desc["bias"]) else 0
    weights = n * k * (2 if flags & ops.OPF_WEIGHTS16 else 1)
    return m * k * n, (m * k + m * n) * act + weights + bias + params


@unit(tasks.OP_FULLY_CONNECTED, _cost)
def fully_connected(desc: np.void, dma) -> Rerun | None:
    p = plan("fc", desc, _parse)
    x_at, w_at, bias_at, per_channel, quant, out_at, kwargs, int16, weights16 = p.fields
    n = w_at[1][0]
    bias = dma.read_array(bias_at, np.int64 if int16 else np.int32, (n,)) if bias_at else None
    if per_channel:
        mult = dma.read_array(quant[0], np.int32, (n,))
        shift = dma.read_array(quant[1], np.int32, (n,))
        scale = dma.read_array(quant[2], np.float64, (n,)) if quant[2] else None
    else:
        mult, shift, scale = quant
    if int16:
        x16 = dma.read_array(x_at[0], np.int16, x_at[1])
        w = dma.read_array(w_at[0], np.int16 if weights16 else np.int8, w_at[1])
        kernel = int16x16.fully_connected_16x16 if weights16 else int16x8.fully_connected_16x8
        check = int16x16.check_fully_connected_16x16 if weights16 else int16x8.check_fully_connected_16x8
        out16 = dma.write_array(out_at[0], np.int16, out_at[1])
        check(x16, w, bias, scale=scale, **kwargs)      # then C from the first run (units.conv._run16)
        bound = int16_calls.bind_fully_connected16(x16, w, bias, scale=scale, out=out16, **kwargs)
        if bound is None:
            kernel(x16, w, bias, scale=scale, out=out16, **kwargs)
        else:
            bound()
        return bound
    x = dma.read_array(x_at[0], np.int8, x_at[1])
    w = dma.read_array(w_at[0], np.int8, w_at[1])
    out = dma.write_array(out_at[0], np.int8, out_at[1])
    return p.run((x, w, bias, mult, shift, scale, out), lambda: fc.fully_connected_bound(
        x, w, bias, multiplier=mult, shift=shift, scale=scale, out=out, **kwargs))
