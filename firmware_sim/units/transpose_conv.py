"""The transposed-convolution unit: TRANSPOSE_CONV (descriptor: ``npu_hw.ops``), int8, or with
``OPF_INT16`` int16 x int8 (int64 bias); numpy, then its rerun in C
(``kernels.transpose_conv.transpose_conv2d_bound``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import transpose_conv
from npu_hw import ops

from .common import OpDescriptorError, Rerun, act_dtype, dims, int16_zero_points, unit


def _cost(desc: np.void) -> tuple[int, int]:
    n, h, w, cin = (int(v) for v in desc["in_shape"])
    _, oh, ow, cout = (int(v) for v in desc["out_shape"])
    kh, kw = (int(v) for v in desc["filter_hw"])
    act = np.dtype(act_dtype(desc)).itemsize
    return n * h * w * cin * kh * kw * cout, (n * h * w * cin + n * oh * ow * cout) * act + cout * kh * kw * cin


@unit(ops.OP_TRANSPOSE_CONV, _cost)
def transpose_conv_2d(desc: np.void, dma) -> Rerun | None:
    n, h, w, cin = dims(desc["in_shape"], "in_shape")
    on, oh, ow, cout = dims(desc["out_shape"], "out_shape")
    kh, kw = dims(desc["filter_hw"], "filter_hw")
    if on != n or tuple(int(v) for v in desc["dilation"]) not in ((1, 1), (0, 0)) \
            or int(desc["cin_per_group"]) not in (0, cin):
        raise OpDescriptorError("transpose_conv: batch, dilation or cin_per_group do not fit")
    if int(desc["flags"]) & ops.OPF_WEIGHTS16:
        raise OpDescriptorError("transpose_conv: no int16 weights (OPF_WEIGHTS16)")
    act = act_dtype(desc)
    if act == np.int16:
        int16_zero_points(desc, "input_zp", "output_zp")
    x = dma.read_array(int(desc["input"]), act, (n, h, w, cin))
    wt = dma.read_array(int(desc["weights"]), np.int8, (cout, kh, kw, cin))
    bias = dma.read_array(int(desc["bias"]), np.int64 if act == np.int16 else np.int32, (cout,)) \
        if int(desc["bias"]) else None
    if int(desc["flags"]) & ops.OPF_PER_CHANNEL:
        mult = dma.read_array(int(desc["mult_iova"]), np.int32, (cout,))
        shift = dma.read_array(int(desc["shift_iova"]), np.int32, (cout,))
    else:
        mult, shift = np.array([desc["multiplier"]], np.int32), np.array([desc["shift"]], np.int32)
    out = dma.write_array(int(desc["output"]), act, (n, oh, ow, cout))
    return transpose_conv.transpose_conv2d_bound(
        x, wt, bias, stride=tuple(int(v) for v in desc["stride"]), padding=tuple(int(v) for v in desc["padding"]),
        out_hw=(oh, ow), input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
        multiplier=mult, shift=shift, act_min=int(desc["act_min"]), act_max=int(desc["act_max"]), out=out)
