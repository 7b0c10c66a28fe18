"""Small ONNX models for the multi-core tests: a diamond, x -> A (a 3x3 conv large enough for
the compiler to split) -> B and C (small strided convs, never split) -> B + C; and a strided
1x1 conv, whose bands skip an input row between them (ResNet-8's shortcuts)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def diamond_model() -> bytes:
    """x -> A (a 3x3 conv, large enough to split) -> B and C (small strided convs) -> B + C."""
    rng = np.random.default_rng(5)

    def conv(name: str, src: str, stride: int) -> list:
        w = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8, 8, 3, 3)).astype(np.float32), f"{name}_w")
        b = numpy_helper.from_array(rng.uniform(-0.1, 0.1, 8).astype(np.float32), f"{name}_b")
        node = helper.make_node("Conv", [src, w.name, b.name], [name], pads=[1, 1, 1, 1], strides=[stride, stride],
                                kernel_shape=[3, 3])
        return [node, w, b]

    parts = conv("a", "x", 1) + conv("b", "a", 2) + conv("c", "a", 2)
    nodes = [p for p in parts if not hasattr(p, "dims")] + [helper.make_node("Add", ["b", "c"], ["y"])]
    graph = helper.make_graph(nodes, "diamond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                              initializer=[p for p in parts if hasattr(p, "dims")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def diamond_calibration() -> list[list[np.ndarray]]:
    rng = np.random.default_rng(7)
    return [[rng.uniform(-1, 1, (1, 8, 16, 16)).astype(np.float32)] for _ in range(4)]


def strided_model() -> tuple[bytes, list[list[np.ndarray]]]:
    """x (1x16x32x32) -> a 1x1 conv of stride 2 to 32 channels, large enough to split into row
    bands, each reading every other input row: the row between two bands neither reads. With
    its calibration."""
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (32, 16, 1, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.uniform(-0.1, 0.1, 32).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], kernel_shape=[1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])
    graph = helper.make_graph([node], "strided", [x], [y], initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    return model, [[rng.uniform(-1, 1, (1, 16, 32, 32)).astype(np.float32)] for _ in range(4)]
