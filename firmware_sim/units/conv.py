"""The convolution unit: CONV_2D and DEPTHWISE_CONV_2D (descriptor: ``npu_hw.ops``), int8 or,
with ``OPF_INT16``, int16 x int8 (int64 bias), or with ``OPF_INT16 | OPF_WEIGHTS16`` int16 x
int16 (our formula, ``kernels.int16x16``)."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import conv, int16x8, int16x16
from firmware_sim.kernels.native import int16_calls
from npu_hw import ops

from .common import OpDescriptorError, Rerun, dims, frozen, int16_zero_points, plan, unit


def _parse(desc: np.void, depthwise: bool) -> tuple:
    n, h, w, cin = dims(desc["in_shape"], "in_shape")
    on, oh, ow, cout = dims(desc["out_shape"], "out_shape")
    kh, kw = dims(desc["filter_hw"], "filter_hw")
    if on != n:
        raise OpDescriptorError("input and output batch differ")
    if depthwise:
        w_shape = (1, kh, kw, cout)
    else:
        cin_g = int(desc["cin_per_group"])
        if cin_g == 0 or cin % cin_g:
            raise OpDescriptorError(f"cin_per_group {cin_g} does not divide Cin {cin}")
        w_shape = (cout, kh, kw, cin_g)
    per_channel = bool(int(desc["flags"]) & ops.OPF_PER_CHANNEL)
    if per_channel:
        quant = (int(desc["mult_iova"]), int(desc["shift_iova"]))
    else:
        quant = (frozen(np.array([desc["multiplier"]], np.int32)),
                 frozen(np.array([desc["shift"]], np.int32)))
    kwargs = dict(stride=tuple(int(v) for v in desc["stride"]),
                  dilation=tuple(int(v) for v in desc["dilation"]),
                  padding=tuple(int(v) for v in desc["padding"]), out_hw=(oh, ow),
                  input_zp=int(desc["input_zp"]), output_zp=int(desc["output_zp"]),
                  act_min=int(desc["act_min"]), act_max=int(desc["act_max"]))
    int16 = bool(int(desc["flags"]) & ops.OPF_INT16)
    weights16 = bool(int(desc["flags"]) & ops.OPF_WEIGHTS16)
    if weights16 and not int16:
        raise OpDescriptorError("OPF_WEIGHTS16 needs OPF_INT16 (int16 weights take int16 activations)")
    if int16:
        int16_zero_points(desc, "input_zp", "output_zp")
        del kwargs["input_zp"], kwargs["output_zp"]
    return ((int(desc["input"]), (n, h, w, cin)), (int(desc["weights"]), w_shape),
            int(desc["bias"]), cout, per_channel, quant, (int(desc["output"]), (n, oh, ow, cout)),
            kwargs, int16, weights16)


def _run(desc: np.void, dma, depthwise: bool) -> Rerun | None:
    p = plan("dw" if depthwise else "conv", desc, lambda d: _parse(d, depthwise))
    (x_at, w_at, bias_at, cout, per_channel, quant, out_at, kwargs, int16, weights16) = p.fields
    act = np.int16 if int16 else np.int8
    x = dma.read_array(x_at[0], act, x_at[1])
    wt = dma.read_array(w_at[0], np.int16 if weights16 else np.int8, w_at[1])
    bias = dma.read_array(bias_at, np.int64 if int16 else np.int32, (cout,)) if bias_at else None
    if per_channel:
        mult = dma.read_array(quant[0], np.int32, (cout,))
        shift = dma.read_array(quant[1], np.int32, (cout,))
    else:
        mult, shift = quant
    out = dma.write_array(out_at[0], act, out_at[1])
    if int16:
        return _run16(x, wt, bias, mult, shift, out, kwargs, depthwise, weights16)
    if depthwise:
        return p.run((x, wt, bias, mult, shift, out), lambda: conv.depthwise_conv2d_bound(
            x, wt, bias, multiplier=mult, shift=shift, out=out, **kwargs))
    return p.run((x, wt, bias, mult, shift, out), lambda: conv.conv2d_bound(
        x, wt, bias, multiplier=mult, shift=shift, out=out, **kwargs))


def _run16(x, wt, bias, mult, shift, out, kwargs: dict, depthwise: bool, weights16: bool) -> Rerun | None:
    """An int16 convolution's first run: the numpy kernel's checks, then its C kernel
    (int16_kernels.c; int16x16_kernels.c for int16 weights), the call every replay makes;
    the numpy kernel only for operands the C kernel cannot take. The first run of a model's
    job was in numpy, 15-50x the C call: a float model's int16 layers over a long
    spectrogram took a first job past the 5 s default timeout (docs/hardware.md)."""
    if weights16:
        check = int16x16.check_conv_16x16
        fn = int16x16.depthwise_conv2d_16x16 if depthwise else int16x16.conv2d_16x16
    else:
        check = int16x8.check_conv_16x8
        fn = int16x8.depthwise_conv2d_16x8 if depthwise else int16x8.conv2d_16x8
    check(x, wt, bias, depthwise=depthwise, multiplier=mult, shift=shift, **kwargs)
    bound = int16_calls.bind_conv16(x, wt, bias, depthwise=depthwise, multiplier=mult, shift=shift, out=out,
                                    **kwargs)
    if bound is None:
        fn(x, wt, bias, multiplier=mult, shift=shift, out=out, **kwargs)
    else:
        bound()
    return bound


def _cost(desc: np.void) -> tuple[int, int]:
    n, h, w, cin = (int(v) for v in desc["in_shape"])
    _, oh, ow, cout = (int(v) for v in desc["out_shape"])
    kh, kw = (int(v) for v in desc["filter_hw"])
    depthwise = int(desc["opcode"]) == ops.OP_DEPTHWISE_CONV_2D
    per_out = kh * kw * (1 if depthwise else int(desc["cin_per_group"]))
    outputs = n * oh * ow * cout
    weights = cout * per_out * (2 if int(desc["flags"]) & ops.OPF_WEIGHTS16 else 1)
    params = cout * 8 if int(desc["flags"]) & ops.OPF_PER_CHANNEL else 0
    act = 2 if int(desc["flags"]) & ops.OPF_INT16 else 1
    bias = cout * 4 * act if int(desc["bias"]) else 0
    return outputs * per_out, (n * h * w * cin + outputs) * act + weights + bias + params


@unit(ops.OP_CONV_2D, _cost)
def conv_2d(desc: np.void, dma) -> Rerun | None:
    return _run(desc, dma, depthwise=False)


@unit(ops.OP_DEPTHWISE_CONV_2D, _cost)
def depthwise_conv_2d(desc: np.void, dma) -> Rerun | None:
    return _run(desc, dma, depthwise=True)
