"""The layout, reduction, matmul and transposed-convolution operators through the whole
stack: an ONNX model chaining them is compiled, loaded onto a real /dev/npuN (FUSE
driver, chip processes) and run; its outputs match onnxruntime (within 10% of the largest
magnitude: quantization errors add up along the chain; single operators meet 5% in
tests/libnpu/compiler/test_onnx_ops.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

import libnpu

ort = pytest.importorskip("onnxruntime")


def _chain() -> onnx.ModelProto:
    rng = np.random.default_rng(21)
    inits = [nh.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "w"),
             nh.from_array((rng.standard_normal((8, 4, 2, 2)) * 0.3).astype(np.float32), "wt"),
             nh.from_array(np.int64([2, 4]), "split"), nh.from_array(np.int64([2, 3]), "hw"),
             nh.from_array(np.int64([1, 0]), "pick"), nh.from_array(np.int64([0, 0, 1, 2, 0, 0, 2, 1]), "pads")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("ConvTranspose", ["c", "wt"], ["t"], strides=[2, 2]),
             h.make_node("DepthToSpace", ["c"], ["d"], blocksize=2),
             h.make_node("Concat", ["t", "d"], ["cat"], axis=1),
             h.make_node("Split", ["cat", "split"], ["s1", "s2"], axis=1),
             h.make_node("MatMul", ["s1", "s1"], ["m"]),
             h.make_node("Gather", ["m", "pick"], ["g"], axis=1),
             h.make_node("Pad", ["g", "pads"], ["p"], mode="reflect"),
             h.make_node("ReduceSum", ["s2", "hw"], ["r"], keepdims=0),
             h.make_node("ArgMax", ["s2"], ["a"], axis=1, keepdims=0)]
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                         [h.make_tensor_value_info("p", TensorProto.FLOAT, [1, 2, 15, 15]),
                          h.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4]),
                          h.make_tensor_value_info("a", TensorProto.INT64, [1, 12, 12])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_chain_of_new_operators_on_the_device(npu, tmp_path) -> None:
    model = _chain()
    rng = np.random.default_rng(22)
    calibration = [[rng.uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)] for _ in range(32)]
    compiled = libnpu.load(model.SerializeToString(), devroot=npu.devroot, calibration=calibration,
                           cache_dir=tmp_path / "cache", recipe="fast")   # int8 kernels: escalation is not the point
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for _ in range(3):
            x = rng.uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)
            p, r, a = compiled.infer([x], dequantized=True)
            ref_p, ref_r, ref_a = sess.run(None, {"x": x})
            for got, ref in ((p, ref_p), (r, ref_r)):
                assert float(np.abs(got - ref).max()) <= 0.10 * float(np.abs(ref).max())
            assert a.dtype == np.int64 and a.shape == ref_a.shape
            assert np.mean(a == ref_a) >= 0.9    # quantization may swap near-equal channels
    finally:
        compiled.close()
