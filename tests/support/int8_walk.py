"""Test helper: run an int8 IR graph op by op on the chip's compute kernels.

Kernel parameters come from ``libnpu.compiler.qparams`` (what the lowering will put in the
task descriptors); only the choice of kernel function per op type lives here. The tests
compare the result byte for byte with LiteRT's reference kernels.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from firmware_sim.kernels import activations, conv, elementwise, fully_connected, layout, pooling, resize
from libnpu.compiler.ir import Graph, Op
from libnpu.compiler.qparams import op_params


def _step(g: Graph, op: Op, ins: list[np.ndarray | None]) -> np.ndarray:
    t = op.type
    p = op_params(g, op)
    out_shape = g.tensors[op.outputs[0]].shape
    if t == "FULLY_CONNECTED":
        x = ins[0].reshape(-1, ins[1].shape[1])
        return fully_connected.fully_connected(x, ins[1], ins[2], **p).reshape(out_shape)
    if t in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        fn = conv.conv2d if t == "CONV_2D" else conv.depthwise_conv2d
        return fn(ins[0], ins[1], ins[2], **p)
    if t == "QUANTIZE":
        fn = elementwise.quantize if ins[0].dtype == np.float32 else elementwise.requantize
        return fn(ins[0], **p)
    if t == "MEAN":
        axes = p.pop("axes")
        return pooling.mean(ins[0], axes, **p)
    if t == "RESIZE_BILINEAR" or t == "RESIZE_NEAREST_NEIGHBOR":
        fn = resize.resize_bilinear if t == "RESIZE_BILINEAR" else resize.resize_nearest
        return fn(ins[0], p.pop("out_hw"), **p)
    if t == "CONCATENATION":
        return layout.concat(ins, **p)
    if t in ("LOGISTIC", "TANH"):
        return activations.lut_lookup(ins[0], **p)
    unary = {"ADD": elementwise.add, "MUL": elementwise.mul, "MAX_POOL_2D": pooling.max_pool2d,
             "AVERAGE_POOL_2D": pooling.avg_pool2d, "RESHAPE": layout.reshape, "PAD": layout.pad,
             "TRANSPOSE": layout.transpose, "SOFTMAX": activations.softmax, "STRIDED_SLICE": layout.strided_slice,
             "RELU": activations.relu_family, "RELU6": activations.relu_family,
             "RELU_N1_TO_1": activations.relu_family, "DEQUANTIZE": elementwise.dequantize}
    if t not in unary:
        raise NotImplementedError(f"int8 walk: no kernel wired for {op.describe()}")
    return unary[t](*[i for i in ins if i is not None], **p)


def run_int8(g: Graph, feeds: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs (in graph order) of the int8 graph ``g`` computed by the chip kernels."""
    if not isinstance(feeds, Mapping):
        feeds = dict(zip(g.inputs, feeds, strict=True))
    env = {t.name: t.data for t in g.constants()}
    env.update(feeds)
    for op in g.ops:
        env[op.outputs[0]] = _step(g, op, [env[i] if i else None for i in op.inputs])
    return [env[n] for n in g.outputs]
