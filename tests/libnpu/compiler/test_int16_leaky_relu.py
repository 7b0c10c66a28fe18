"""LEAKY_RELU, MAXIMUM and MINIMUM on int16 activations: a long-tailed activation (rare
large values, most near zero: openwakeword's speech embedding, LEAKY_RELU then
``max(x, -0.4)``) keeps its small values on int16, byte-identical to LiteRT's 16x8 kernels."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import libnpu
from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import promotable, promote, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.tflite_export import export_tflite

SHAPE = (1, 4, 6, 6)


def _leaky_max_min():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.2),
             helper.make_node("Max", ["l", "floor"], ["m"]),
             helper.make_node("Min", ["m", "x"], ["y"])]
    graph = helper.make_graph(nodes, "leaky_max_min", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
                              [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(np.array(-0.4, np.float32), "floor")])
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(SHAPE) * rng.uniform(0.05, 3)).astype(np.float32)] for _ in range(count)]


def test_leaky_relu_maximum_and_minimum_in_int16_on_the_device_equal_litert(npu, litert) -> None:
    graph = _leaky_max_min()
    q8 = quantize_mixed(graph, _data(4, 1), int16="none")
    q = promote(q8, [op.outputs[0] for op in q8.ops if promotable(op)], optimize(graph))
    kinds = {op.type for op in q.ops if q.tensors[op.outputs[0]].dtype == "int16"}
    assert {"LEAKY_RELU", "MAXIMUM", "MINIMUM"} <= kinds
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        for x in _data(3, 2):
            for ours, ref in zip(model.infer(x), litert(export_tflite(q), x)):
                assert ours.dtype == ref.dtype
                np.testing.assert_array_equal(ours, ref)
            # and what float computes: max(x, -0.4)'s constant on x's grid (raw values compared)
            (real,) = model.infer(x, dequantized=True)
            (want,) = run_float(graph, x).values()
            assert np.abs(real - want).max() <= 0.02      # the int8 output's step: 0.003-0.02
    finally:
        model.close()
