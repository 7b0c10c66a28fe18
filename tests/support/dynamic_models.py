"""Models whose outputs' shapes depend on the data (a decoder Loop that stops on its own,
NonZero, NonMaxSuppression after a detector head), built with onnx.helper for the
dynamic-output tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

__all__ = ["conv_loop_decoder", "conv_nonzero", "conv_nms"]


def _const(name: str, value, dtype) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype), name)


def _encoder(rng: np.random.Generator, channels: int = 4) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """x [1, 3, 8, 8] -> Conv 3x3 -> Relu -> ``r`` [1, channels, 8, 8]: the chip's part."""
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"])]
    inits = [_const("w", rng.standard_normal((channels, 3, 3, 3)) * .3, np.float32),
             _const("b", rng.standard_normal(channels) * .1, np.float32)]
    return nodes, inits


def _model(nodes, inits, name: str, outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = h.make_graph(nodes, name, [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])], outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_loop_decoder(seed: int = 0, max_steps: int = 16) -> onnx.ModelProto:
    """A table-structure decoder in small: a Conv encoder, its pooled features ``feat``
    [1, 4] (an output), then a Loop of at most ``max_steps`` halving the state until its
    largest value is below 0.02 (the body's own data stops it), each step's Tanh a scan
    output: ``seq`` ["steps", 1, 4], the trip count known only at run time."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng)
    nodes += [h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["feat"])]
    f = TensorProto.FLOAT
    body = h.make_graph(
        [h.make_node("Mul", ["s_in", "half"], ["s_out"]), h.make_node("Abs", ["s_out"], ["a"]),
         h.make_node("ReduceMax", ["a"], ["m"], keepdims=0), h.make_node("Greater", ["m", "stop"], ["cond_out"]),
         h.make_node("Tanh", ["s_out"], ["tok"])],
        "decode_step",
        [h.make_tensor_value_info("i", TensorProto.INT64, []),
         h.make_tensor_value_info("cond_in", TensorProto.BOOL, []), h.make_tensor_value_info("s_in", f, [1, 4])],
        [h.make_tensor_value_info("cond_out", TensorProto.BOOL, []), h.make_tensor_value_info("s_out", f, [1, 4]),
         h.make_tensor_value_info("tok", f, [1, 4])],
        [_const("half", .5, np.float32), _const("stop", .02, np.float32)])
    nodes.append(h.make_node("Loop", ["max_steps", "go", "feat"], ["s_last", "seq"], body=body))
    inits += [_const("max_steps", max_steps, np.int64), _const("go", True, np.bool_)]
    return _model(nodes, inits, "conv_loop_decoder",
                  [h.make_tensor_value_info("feat", f, [1, 4]), h.make_tensor_value_info("seq", f, ["steps", 1, 4])])


def conv_nonzero(seed: int = 1) -> onnx.ModelProto:
    """A Conv encoder whose features above 0.5 are listed: NonZero's indices ``idx`` [4, "n"]
    (int64), the features ``r`` [1, 4, 8, 8] a second output."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng)
    nodes += [h.make_node("Greater", ["r", "threshold"], ["mask"]), h.make_node("NonZero", ["mask"], ["idx"])]
    inits.append(_const("threshold", .5, np.float32))
    return _model(nodes, inits, "conv_nonzero",
                  [h.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 8, 8]),
                   h.make_tensor_value_info("idx", TensorProto.INT64, [4, "n"])])


def conv_nms(seed: int = 2, boxes: int = 16) -> onnx.ModelProto:
    """A detector head in small: a Conv whose 4 channels at each of ``boxes`` places are a
    box and a fifth its score (Sigmoid), then NonMaxSuppression (post-processing exported
    into the model): ``selected`` ["k", 3] int64, and the scores an output too."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng, channels=5)
    nodes += [h.make_node("Reshape", ["r", "flat"], ["rf"]),              # [1, 5, 64]
              h.make_node("Slice", ["rf", "b0", "b1", "axis1"], ["bx"]),   # [1, 4, 64]
              h.make_node("Transpose", ["bx"], ["corners"], perm=[0, 2, 1]),   # [1, 64, 4]
              h.make_node("Slice", ["rf", "b1", "b2", "axis1"], ["logit"]),    # [1, 1, 64]
              h.make_node("Sigmoid", ["logit"], ["scores"]),
              h.make_node("NonMaxSuppression", ["corners", "scores", "keep", "iou", "min_score"], ["selected"])]
    inits += [_const("flat", [1, 5, -1], np.int64), _const("b0", [0], np.int64), _const("b1", [4], np.int64),
              _const("b2", [5], np.int64), _const("axis1", [1], np.int64), _const("keep", [boxes], np.int64),
              _const("iou", [.5], np.float32), _const("min_score", [.6], np.float32)]
    return _model(nodes, inits, "conv_nms",
                  [h.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 64]),
                   h.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3])])
