"""A small ONNX model whose chip tasks form a diamond, for the multi-core tests: x -> A (a 3x3
conv large enough for the compiler to split) -> B and C (small strided convs, never split) -> B + C."""
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
