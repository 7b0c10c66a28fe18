"""Small models whose inputs have free dimensions, as exporters and converters write them.

- :func:`audio_onnx`: ONNX input ``audio`` ``[batch, samples]`` (``dim_param``), reshaped
  into frames of 2 with a declared ``[1, frames, 2]`` intermediate, as a PyTorch export
  with dynamic axes declares it: with ``samples`` pinned to 1 the reshape cannot be done.
- :func:`batch_only_onnx`: ONNX ``[N, 4]`` input, only the batch free.
- :func:`sequence_tflite`: an int8 TFLite input ``[1, -1]`` (``shape_signature``; the
  stored shape is ``[1, 4]``, as the converter stores it), RESHAPE into rows of 4 and
  LOGISTIC: LiteRT sizes every tensor once the input is resized.
"""
from __future__ import annotations

import numpy as np
import onnx
import tflite
from onnx import TensorProto, helper

from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, int32_const


def audio_onnx() -> onnx.ModelProto:
    audio = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "frames", 2])
    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, [1, "frames", 2])
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, -1, 2])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    nodes = [helper.make_node("Reshape", ["audio", "shape"], ["frames"]),
             helper.make_node("Mul", ["frames", "half"], ["scaled"]),
             helper.make_node("Sigmoid", ["scaled"], ["y"])]
    graph = helper.make_graph(nodes, "audio", [audio], [out], [shape, half], value_info=[frames])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def batch_only_onnx() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "batch", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X_Q = dict(scale=[0.05], zero_point=[3])
OUT_Q = dict(scale=[1 / 256], zero_point=[-128])   # LOGISTIC's int8 output grid


def sequence_tflite() -> bytes:
    tensors = [TensorSpec((1, 4), np.int8, **X_Q, name="x", signature=(1, -1)),
               int32_const([1, -1, 4]),
               TensorSpec((1, 1, 4), np.int8, **X_Q, name="rows", signature=(1, -1, 4)),
               TensorSpec((1, 1, 4), np.int8, **OUT_Q, name="y", signature=(1, -1, 4))]
    ops = [OpSpec(tflite.BuiltinOperator.RESHAPE, [0, 1], [2]), OpSpec(tflite.BuiltinOperator.LOGISTIC, [2], [3])]
    return build_model(tensors, ops, [0], [3])
