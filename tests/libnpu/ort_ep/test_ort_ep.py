"""The ONNX Runtime plugin execution provider, registered with
``onnxruntime.register_execution_provider_library`` and chosen with
``SessionOptions.add_provider_for_devices``: a QDQ int8 model (quantized by ORT's own
``quantize_static``) matches ORT's CPU run within 5% of each output's largest magnitude;
each node's placement is reported (ORT's log, the placement file); a bad option and an
absent device each give one clear error; sessions created and destroyed again and again."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from tests.support.qdq_models import quantize_qdq

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
    out = quantize_qdq(_float_model(), tmp_path_factory.mktemp("qdq"), INPUT_SHAPE, 16)
    return str(out)


def npu_session(model: str, npu, library: str, **options: str):
    """An InferenceSession with our EP (options as provider options), ORT's CPU EP for the rest."""
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuEmuExecutionProvider"]
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, {"devroot": str(npu.devroot), **options})
    session = ort.InferenceSession(model, sess_options=so)
    session.disable_fallback()       # an EP failure must fail the test, not rerun on the CPU
    return session


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


def test_function_table_slots(library):
    """A misplaced OrtApi slot calls the wrong function: GetBuildInfoString's text says it is the one."""
    from libnpu.ort_ep.provider import ort_tables
    tables = ort_tables()
    info = tables.ffi.string(tables.api.GetBuildInfoString()).decode()
    assert info.startswith("ORT Build Info"), info
    status = tables.status(2, "npu ort-ep: slot check")
    with pytest.raises(Exception, match="slot check"):
        tables.check(status)


def test_placement_goes_to_ort_log(qdq_model, npu, library, capfd):
    so = ort.SessionOptions()
    so.log_severity_level = 1              # INFO: where the EP reports each node
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuEmuExecutionProvider"]
    so.add_provider_for_devices(devices, {"devroot": str(npu.devroot)})
    ort.InferenceSession(qdq_model, sess_options=so)
    err = capfd.readouterr().err
    assert "npu ort-ep: node 0 " in err and "fused node(s)" in err, err[-2000:]


@pytest.mark.parametrize("options, message", [
    ({"colour": "red"}, "npu ort-ep: unknown option 'colour' (known: devroot, device,"),
    ({"device": "x"}, "npu ort-ep: option device='x' is not a device number"),
    ({"recipe": "fast"}, "npu ort-ep: option recipe='fast' must be one of default, accurate"),
    ({"device": "3"}, "npu3: "),
], ids=["unknown", "device-not-a-number", "recipe", "absent-device"])
def test_bad_option_or_device_one_clear_error(qdq_model, npu, library, options, message):
    with pytest.raises(Exception) as raised:
        npu_session(qdq_model, npu, library, **options)
    text = str(raised.value)
    assert message in text and text.count("npu ort-ep") == 1 and "\n" not in text.strip(), text


def test_sessions_created_and_destroyed_again(qdq_model, npu, library, tmp_path):
    import gc

    import libnpu
    x = np.random.default_rng(5).uniform(-1, 1, INPUT_SHAPE).astype(np.float32)
    first = None
    for _ in range(4):
        session = npu_session(qdq_model, npu, library, cache_dir=str(tmp_path))
        out = session.run(None, {"x": x})[0]
        first = out if first is None else first
        np.testing.assert_array_equal(out, first)
        del session
        gc.collect()
    with libnpu.initialize(npu.devroot) as s:
        assert s.open(0).info()["memory_used"] == 0      # every fused node's buffers freed


def test_float_model_stays_on_cpu_unless_asked(npu, library, tmp_path):
    model = tmp_path / "float.onnx"
    model.write_bytes(_float_model())
    placement = tmp_path / "placement.txt"
    x = np.random.default_rng(2).uniform(-1, 1, INPUT_SHAPE).astype(np.float32)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = npu_session(str(model), npu, library, placement_file=str(placement))
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)
    # (ORT's own optimizations run first: MatMul + Add become one Gemm)
    assert re.match(r"0 of \d+ nodes on the NPU in 0 fused", placement.read_text()), placement.read_text()
    session = npu_session(str(model), npu, library, placement_file=str(placement), quantize="true",
                          cache_dir=str(tmp_path / "cache"))
    got = session.run(None, {"x": x})[0]
    claimed = re.match(r"(\d+) of (\d+) nodes on the NPU in 1 fused node\(s\)", placement.read_text())
    assert claimed and claimed[1] == claimed[2], placement.read_text()
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


@pytest.mark.parametrize("case", ["Conv"])
def test_furiosa_operator_cases_through_the_ep(case, npu, library, tmp_path):
    """Cases of FuriosaAI's operator list, QDQ-quantized by ORT, through the EP (all of them:
    ``python -m benchmarks.ort_ep_operators``). The Conv's output is one the compiler renames."""
    from benchmarks.ort_ep_operators import run_case
    result = run_case(case, "qdq", npu.devroot, tmp_path)
    assert result["passed"] and not result["error"], result
    claimed, total = result["npu_nodes"].split("/")
    assert claimed == total, result


def test_the_pinned_onnxruntime_offers_the_declared_api():
    """pyproject's lowest onnxruntime is the release of the ORT_API_VERSION ort_c declares."""
    import tomllib
    from pathlib import Path

    from libnpu.ort_ep.ort_c import ORT_API_VERSION
    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    pins = [p for p in pyproject["project"]["optional-dependencies"]["test"] if p.startswith("onnxruntime")]
    assert pins and re.search(r">=1\.(\d+)", pins[0])[1] == str(ORT_API_VERSION), pins
    installed = tuple(int(v) for v in ort.__version__.split(".")[:2])
    assert installed >= (1, ORT_API_VERSION)
