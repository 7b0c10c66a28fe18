"""onnxruntime as a contender in ``npu bench ops``: a one-op int8 IR layer (CONV_2D,
DEPTHWISE_CONV_2D or FULLY_CONNECTED, per-channel weights, int32 bias, no fused
activation) rebuilt as the equivalent quantized ONNX model and run by onnxruntime.

Convolutions become ``QLinearConv`` (per-channel weight scales, int32 bias, ``group=C``
for depthwise); fully connected becomes com.microsoft ``QGemm`` (``transB=1``), which,
unlike ``QLinearMatMul``, takes the bias. The model keeps the IR's NHWC input and output:
a Transpose on each side of the NCHW op, which onnxruntime's NHWC transformer cancels
against its own layout changes, so no transpose runs at inference time.

Activations are uint8 by default (zero points moved by 128: the same real values and the
same integer arithmetic, the output shifted by 128), i.e. U8S8, onnxruntime's fast x86
path: with int8 activations (S8S8) its convolution is far slower here (onnxruntime 1.31,
AVX-512 VNNI: pointwise 7x7x1024->1024 8.4 ms against 0.23 ms with uint8). :class:`OrtLayer` converts the
int8 input once, before timing, and its output back for comparison.

onnxruntime requantizes in float (scale product, round half to even) where TFLite uses a
fixed-point multiplier, so outputs may differ from the TFLite reference by one LSB.
"""
from __future__ import annotations

import numpy as np

from libnpu.compiler.ir import Graph

__all__ = ["ort_available", "onnx_layer_model", "OrtLayer"]

_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def ort_available() -> str | None:
    """None when onnx and onnxruntime import, else why not."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"onnxruntime unavailable ({exc})"
    return None


def onnx_layer_model(graph: Graph, activations: str = "uint8") -> bytes:
    """The serialized ONNX model equivalent to ``graph``, a one-op int8 graph ``x -> y``
    whose op is CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED with constant weights
    ``w`` (int8, per-channel, zero point 0) and bias ``b`` (int32); input/output NHWC,
    of type ``activations`` (uint8: zero points + 128, or int8 as in the graph)."""
    from onnx import TensorProto, helper, numpy_helper

    if activations not in ("uint8", "int8"):
        raise ValueError(f"activations must be uint8 or int8, not {activations!r}")
    act_type, shift = (TensorProto.UINT8, 128) if activations == "uint8" else (TensorProto.INT8, 0)

    if len(graph.ops) != 1 or graph.ops[0].type not in _OPS:
        raise ValueError(f"graph {graph.name!r}: need exactly one op of {', '.join(_OPS)}")
    op = graph.ops[0]
    if op.attrs.get("activation", "NONE") != "NONE":
        raise ValueError(f"graph {graph.name!r}: fused activations are not supported")
    x, w, b = (graph.tensors[name] for name in op.inputs)
    y = graph.tensors[op.outputs[0]]
    if w.data is None or b.data is None or x.quant is None or y.quant is None or w.quant is None:
        raise ValueError(f"graph {graph.name!r}: need quantized activations and constant weights")
    if np.any(w.quant.zero_point != 0):
        raise ValueError(f"graph {graph.name!r}: weight zero points must be 0")

    def per_tensor(name: str, q) -> list:
        zero_point = np.asarray(q.zero_point[0] + shift, activations)
        return [numpy_helper.from_array(np.asarray(q.scale[0], np.float32), f"{name}_scale"),
                numpy_helper.from_array(zero_point, f"{name}_zp")]

    w_scale = np.asarray(w.quant.scale, np.float32)
    n = w_scale.size
    inits = per_tensor("x", x.quant) + per_tensor("y", y.quant) + [
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.zeros(n, np.int8), "w_zp"),
        numpy_helper.from_array(np.asarray(b.data, np.int32), "b")]
    nodes = []
    if op.type == "FULLY_CONNECTED":
        if len(x.shape) != 2 or len(y.shape) != 2:
            raise ValueError(f"graph {graph.name!r}: fully connected needs 2-D input and output")
        inits.append(numpy_helper.from_array(np.asarray(w.data, np.int8), "w"))  # (N, K): transB
        nodes.append(helper.make_node(
            "QGemm", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "b", "y_scale", "y_zp"], ["y"],
            domain="com.microsoft", transB=1))
    else:
        stride, dilation = op.attrs["stride"], op.attrs["dilation"]
        top, bottom, left, right = op.attrs["pads"]
        if op.type == "DEPTHWISE_CONV_2D":
            if op.attrs.get("depth_multiplier", 1) != 1:
                raise ValueError(f"graph {graph.name!r}: depth multiplier must be 1")
            kernel, group = np.transpose(w.data, (3, 0, 1, 2)), n       # (1,KH,KW,C) -> (C,1,KH,KW)
        else:
            kernel, group = np.transpose(w.data, (0, 3, 1, 2)), op.attrs.get("groups", 1)  # OHWI -> OIHW
        inits.append(numpy_helper.from_array(np.ascontiguousarray(kernel, np.int8), "w"))
        nodes += [
            helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]),
            helper.make_node("QLinearConv", ["x_nchw", "x_scale", "x_zp", "w", "w_scale", "w_zp",
                                             "y_scale", "y_zp", "b"], ["y_nchw"],
                             kernel_shape=list(kernel.shape[2:]), strides=list(stride),
                             dilations=list(dilation), pads=[top, left, bottom, right], group=group),
            helper.make_node("Transpose", ["y_nchw"], ["y"], perm=[0, 2, 3, 1])]
    model = helper.make_model(
        helper.make_graph(nodes, graph.name or "layer",
                          [helper.make_tensor_value_info("x", act_type, list(x.shape))],
                          [helper.make_tensor_value_info("y", act_type, list(y.shape))],
                          initializer=inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8, producer_name="npu bench ops")
    return model.SerializeToString()


class OrtLayer:
    """``graph`` (see :func:`onnx_layer_model`) in an onnxruntime session on the CPU
    execution provider, one thread. ``feed(x)`` converts an int8 NHWC input to the model's
    input; ``run(feed)`` is the timed call; ``as_int8(y)`` maps its output back to int8."""

    def __init__(self, graph: Graph, activations: str = "uint8") -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.activations = activations
        self.session = ort.InferenceSession(onnx_layer_model(graph, activations), options,
                                            providers=["CPUExecutionProvider"])

    def feed(self, x: np.ndarray) -> dict[str, np.ndarray]:
        if x.dtype != np.int8:
            raise TypeError(f"input must be int8, not {x.dtype}")
        # int8 q -> uint8 q + 128 is flipping the top bit
        return {"x": x.view(np.uint8) ^ np.uint8(0x80) if self.activations == "uint8" else x}

    def run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(["y"], feed)[0]

    def as_int8(self, y: np.ndarray) -> np.ndarray:
        return (y ^ np.uint8(0x80)).view(np.int8) if self.activations == "uint8" else y
