"""Test helper: run an int8 IR graph op by op on the chip's compute kernels.

This is the arithmetic the lowering will hand to the chip (parameters derived with
``firmware_sim.spec.fixedpoint`` exactly as each TFLite op's Prepare does), minus the
descriptors and DMA. The tests compare it byte for byte with LiteRT's reference kernels.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from firmware_sim.kernels import activations, conv, elementwise, fully_connected, layout, pooling, resize
from firmware_sim.spec import fixedpoint as fp
from libnpu.compiler.ir import Graph, Op

_ACT = {"NONE": fp.ACT_NONE, "RELU": fp.ACT_RELU, "RELU6": fp.ACT_RELU6, "RELU_N1_TO_1": fp.ACT_RELU_N1_TO_1}


def _qp(g: Graph, name: str) -> tuple[float, int]:
    q = g.tensors[name].quant
    return float(q.scale[0]), int(q.zero_point[0])


def _act_range(g: Graph, op: Op) -> dict[str, int]:
    s, z = _qp(g, op.outputs[0])
    lo, hi = fp.fused_activation_range(_ACT[op.attrs.get("activation", "NONE")], s, z)
    return dict(act_min=lo, act_max=hi)


def _window(op: Op, out_shape) -> dict:
    return dict(stride=tuple(op.attrs["stride"]), padding=(op.attrs["pads"][0], op.attrs["pads"][2]),
                out_hw=tuple(out_shape[1:3]))


def _step(g: Graph, op: Op, ins: list[np.ndarray | None]) -> np.ndarray:
    t, a = op.type, op.attrs
    out_t = g.tensors[op.outputs[0]]
    if t in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        in_s, in_z = _qp(g, op.inputs[0])
        out_s, out_z = _qp(g, op.outputs[0])
        w_scales = g.tensors[op.inputs[1]].quant.scale
        scale = fp.effective_scale(in_s, w_scales, out_s)
        mult, shift = fp.quantize_multiplier_array(scale)
        q = dict(input_zp=in_z, output_zp=out_z, multiplier=mult, shift=shift, **_act_range(g, op))
        bias = ins[2] if len(ins) > 2 else None
        if t == "FULLY_CONNECTED":
            x = ins[0].reshape(-1, ins[1].shape[1])
            return fully_connected.fully_connected(x, ins[1], bias, scale=scale, **q).reshape(out_t.shape)
        fn = conv.conv2d if t == "CONV_2D" else conv.depthwise_conv2d
        return fn(ins[0], ins[1], bias, dilation=tuple(a["dilation"]), **_window(op, out_t.shape), **q)
    if t == "ADD":
        (s1, z1), (s2, z2), (so, zo) = (_qp(g, n) for n in op.inputs + op.outputs)
        return elementwise.add(ins[0], ins[1], input1_zp=z1, input2_zp=z2, output_zp=zo,
                               **fp.add_params(s1, s2, so), **_act_range(g, op))
    if t == "MUL":
        (s1, z1), (s2, z2), (so, zo) = (_qp(g, n) for n in op.inputs + op.outputs)
        m, sh = fp.mul_multiplier(s1, s2, so)
        return elementwise.mul(ins[0], ins[1], input1_zp=z1, input2_zp=z2, output_zp=zo,
                               multiplier=m, shift=sh, **_act_range(g, op))
    if t in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        fn = pooling.max_pool2d if t == "MAX_POOL_2D" else pooling.avg_pool2d
        return fn(ins[0], filter_hw=tuple(a["filter"]), **_window(op, out_t.shape), **_act_range(g, op))
    if t == "RESHAPE":
        return layout.reshape(ins[0], out_t.shape)
    if t == "CONCATENATION":
        return layout.concat(ins, a["axis"])
    if t == "PAD":
        return layout.pad(ins[0], a["paddings"], _qp(g, op.outputs[0])[1])
    if t == "TRANSPOSE":
        return layout.transpose(ins[0], a["perm"])
    if t == "SOFTMAX":
        m, sh, dmin = fp.softmax_params(a["beta"], _qp(g, op.inputs[0])[0])
        return activations.softmax(ins[0], input_beta_multiplier=m, input_beta_left_shift=sh, diff_min=dmin)
    if t in ("LOGISTIC", "TANH"):
        kind = fp.LUT_LOGISTIC if t == "LOGISTIC" else fp.LUT_TANH
        lut = fp.activation_lut(kind, *_qp(g, op.inputs[0]), *_qp(g, op.outputs[0]))
        return activations.lut_lookup(ins[0], lut)
    if t == "MEAN":
        (si, zi), (so, zo) = _qp(g, op.inputs[0]), _qp(g, op.outputs[0])
        m, sh = fp.rescale_multiplier(si, so)
        return pooling.mean(ins[0], tuple(a["axes"]), input_zp=zi, output_zp=zo, multiplier=m, shift=sh,
                            keep_dims=a["keep_dims"])
    if t in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        fn = resize.resize_bilinear if t == "RESIZE_BILINEAR" else resize.resize_nearest
        return fn(ins[0], tuple(a["size"]), align_corners=a["align_corners"],
                  half_pixel_centers=a["half_pixel_centers"])
    if t == "QUANTIZE":
        so, zo = _qp(g, op.outputs[0])
        if ins[0].dtype == np.float32:
            return elementwise.quantize(ins[0], scale=so, zero_point=zo)
        si, zi = _qp(g, op.inputs[0])
        m, sh = fp.rescale_multiplier(si, so)
        return elementwise.requantize(ins[0], input_zp=zi, output_zp=zo, multiplier=m, shift=sh)
    if t == "DEQUANTIZE":
        s, z = _qp(g, op.inputs[0])
        return elementwise.dequantize(ins[0], scale=s, zero_point=z)
    raise NotImplementedError(f"int8 walk: no kernel wired for {op.describe()}")


def run_int8(g: Graph, feeds: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs (in graph order) of the int8 graph ``g`` computed by the chip kernels."""
    if not isinstance(feeds, Mapping):
        feeds = dict(zip(g.inputs, feeds, strict=True))
    env = {t.name: t.data for t in g.constants()}
    env.update(feeds)
    for op in g.ops:
        env[op.outputs[0]] = _step(g, op, [env[i] if i else None for i in op.inputs])
    return [env[n] for n in g.outputs]
