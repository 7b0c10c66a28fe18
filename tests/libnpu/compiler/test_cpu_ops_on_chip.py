"""Operators the corpus's models sent to the CPU that the chip runs exactly: ONNX MaxPool and
AveragePool with ``ceil_mode`` (the chip's window clipped to the input, trailing padding
grown) and Clip whose bounds the model computes (MAXIMUM / MINIMUM). Each is placed on
the NPU, its float reference is onnxruntime's, and a chain of them compiles to one job with
no host step."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import compile_model
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.placement import NPU, plan_placement

ort = pytest.importorskip("onnxruntime")


def model(nodes: list, x: tuple[int, ...], inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """``nodes`` from input ``x`` to output ``y``, shapes as ONNX infers them (opset 13)."""
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                         [nh.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def onnxruntime(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def check_float(m: onnx.ModelProto, seed: int = 0, atol: float = 0.0) -> None:
    """Every node on the NPU, and the imported graph's float reference gives onnxruntime's output."""
    placements = plan_placement(m.SerializeToString()).placements
    assert all(p.device == NPU for p in placements), [(p.op, p.reason) for p in placements if p.device != NPU]
    x = np.random.default_rng(seed).standard_normal(
        [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    want = onnxruntime(m, x)
    (got,) = run_float(import_onnx(m), [x]).values()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def pool(op: str, x: tuple[int, ...], **attrs) -> onnx.ModelProto:
    return model([h.make_node(op, ["x"], ["y"], ceil_mode=1, **attrs)], x)


CEIL_POOLS = {
    "max 2x2 stride 2, odd size": pool("MaxPool", (1, 3, 7, 9), kernel_shape=[2, 2], strides=[2, 2]),
    "max 3x3 stride 2, pads 1": pool("MaxPool", (1, 3, 8, 6), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "average 3x2 stride 2": pool("AveragePool", (1, 3, 8, 7), kernel_shape=[3, 2], strides=[2, 2]),
    "max 1-D": pool("MaxPool", (1, 4, 9), kernel_shape=[2], strides=[2]),
}


@pytest.mark.parametrize("name", list(CEIL_POOLS))
def test_ceil_mode_pools_run_on_the_npu(name) -> None:
    """ceil_mode pools went to the CPU ("ceil_mode is not supported": captcha-crnn's DenseNet
    split into two jobs around it); now the trailing padding grows and the window is
    clipped to the input, as onnxruntime's."""
    check_float(CEIL_POOLS[name], atol=1e-6)
    (op,) = [op for op in import_onnx(CEIL_POOLS[name]).ops if op.type.endswith("POOL_2D")]
    assert op.attrs["pads"][1] + op.attrs["pads"][3] > 0


def test_a_ceil_mode_size_onnxruntime_does_not_give_falls_back() -> None:
    """ONNX shape inference keeps a last window that starts in the trailing padding,
    onnxruntime drops it (PyTorch's rule): such a model's declared size is refused, with
    both sizes, and the CPU runs it."""
    m = pool("MaxPool", (1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1])
    (placement,) = plan_placement(m.SerializeToString()).placements
    assert placement.device != NPU
    assert placement.reason == ("ceil_mode: the output's declared size 4 is not onnxruntime's 3 "
                                "(its last window would start in the padding)")


def test_clip_by_computed_bounds_runs_on_the_npu() -> None:
    """``Clip(x, ReduceMax(x) - 3)`` (a spectrogram floored at its peak less 80 dB, as
    openwakeword's mel front end ends) and a Clip between two computed bounds: MAXIMUM /
    MINIMUM on the chip, not a host call after the last job."""
    floor = model([h.make_node("ReduceMax", ["x"], ["m"], keepdims=0), h.make_node("Sub", ["m", "c"], ["lo"]),
                   h.make_node("Clip", ["x", "lo", ""], ["y"])], (1, 1, 20, 16), {"c": np.float32(3.0)})
    check_float(floor)
    assert [op.type for op in import_onnx(floor).ops] == ["REDUCE_MAX", "SUB", "MAXIMUM"]
    both = model([h.make_node("ReduceMin", ["x"], ["a"], keepdims=0), h.make_node("Mul", ["a", "c"], ["lo"]),
                  h.make_node("ReduceMax", ["x"], ["b"], keepdims=0), h.make_node("Mul", ["b", "c"], ["hi"]),
                  h.make_node("Clip", ["x", "lo", "hi"], ["y"])], (1, 24, 8), {"c": np.float32(0.5)})
    check_float(both, seed=1)
    assert [op.type for op in import_onnx(both).ops][-2:] == ["MAXIMUM", "MINIMUM"]


def test_the_chain_compiles_to_one_job() -> None:
    """MaxPool with ceil_mode, then the floor at its peak: one chip job, no host step (two
    host calls and two jobs before). On the device: a ceil_mode pool among
    ``test_conv1d.py``'s cases, the computed floor in ``test_model_inputs.py``."""
    m = model([h.make_node("MaxPool", ["x"], ["p"], ceil_mode=1, kernel_shape=[3, 3], strides=[2, 2]),
               h.make_node("ReduceMax", ["p"], ["m"], keepdims=0), h.make_node("Sub", ["m", "c"], ["lo"]),
               h.make_node("Clip", ["p", "lo", ""], ["y"])], (1, 4, 10, 9), {"c": np.float32(1.5)})
    rng = np.random.default_rng(3)
    calibration = [[rng.standard_normal((1, 4, 10, 9)).astype(np.float32)] for _ in range(16)]
    loadable = compile_model(m.SerializeToString(), calibration, recipe="fast")
    assert not loadable.host_steps and len(loadable.partitions()) == 1
    assert {"MAX_POOL_2D", "MAXIMUM"} <= {task.op for task in loadable.tasks}
