"""Empty, truncated and operator-less model files are refused, with one line, by every
entry point: ``npu compile`` (to .nlb and to .tflite), ``npu run`` and ``libnpu.load``;
the model can be named but not used, so the exit code is 1 (failure), not 2 (usage).

(Finding 12 of issue 11: an empty .onnx file "compiled" to 0 tasks and "ran", exit 0.)
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import libnpu
from libnpu.compiler.ir import IRError
from libnpu.compiler.lower import lower
from libnpu.compiler.memplan import plan_memory
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from libnpu.loadable import Loadable, LoadableError
from libnpu.tools.cli import main as npu_main
from tests.support.model_builders import small_cnn


def _identity_only() -> onnx.ModelProto:
    """A valid ONNX model whose one node is an Identity: nothing for the chip to run."""
    graph = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "identity",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _no_outputs() -> onnx.ModelProto:
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "no_outputs",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory) -> dict[str, Path]:
    """name -> a model file every entry point must refuse."""
    root = tmp_path_factory.mktemp("bad-models")
    onnx_bytes = small_cnn().SerializeToString()
    graph = quantize_model(import_onnx(onnx_bytes), None, random_count=2)
    tflite_bytes = export_tflite(graph)
    nlb_bytes = lower(graph).to_bytes()
    files = {
        "empty.onnx": b"",
        "empty.tflite": b"",
        "empty.nlb": b"",
        "ir-version-only.onnx": onnx_bytes[:2],        # parses as an empty model
        "half.onnx": onnx_bytes[:len(onnx_bytes) // 2],
        "last-bytes-cut.tflite": tflite_bytes[:-4],     # only the unused buffer 0 lost
        "half.tflite": tflite_bytes[:len(tflite_bytes) // 2],
        "half.nlb": nlb_bytes[:len(nlb_bytes) // 2],
        "magic-only.nlb": nlb_bytes[:4],
        "identity-only.onnx": _identity_only().SerializeToString(),
        "no-outputs.onnx": _no_outputs().SerializeToString(),
    }
    taskless = plan_memory(graph).to_loadable(graph, [])     # well formed, but no task to run
    files["no-tasks.nlb"] = taskless.to_bytes()
    paths = {}
    for name, data in files.items():
        paths[name] = root / name
        paths[name].write_bytes(data)
    return paths


CASES = ["empty.onnx", "empty.tflite", "empty.nlb", "ir-version-only.onnx", "half.onnx", "last-bytes-cut.tflite",
         "half.tflite", "half.nlb", "magic-only.nlb", "identity-only.onnx", "no-outputs.onnx", "no-tasks.nlb"]


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_npu_run_refuses(case, bad_models, npu, tmp_path, capsys):
    status = npu_main(["run", str(bad_models[case]), "--devroot", str(npu.devroot), "--no-progress",
                       "--cache-dir", str(tmp_path)])
    assert status == 1
    assert _one_line(capsys.readouterr().err).startswith("npu run: error: ")


@pytest.mark.parametrize("case", CASES)
def test_libnpu_load_refuses(case, bad_models, npu, tmp_path):
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = device.stats()
        with pytest.raises((IRError, LoadableError)) as exc:
            libnpu.load(bad_models[case], device, cache_dir=tmp_path)
        assert "\n" not in str(exc.value)
        after = device.stats()
        assert (after["buffers"], after["memory_allocated"]) == (baseline["buffers"], baseline["memory_allocated"])


@pytest.mark.parametrize("case", [c for c in CASES if not c.endswith(".nlb")])
def test_npu_compile_refuses(case, bad_models, tmp_path, capsys):
    out = tmp_path / "out.nlb"
    status = npu_main(["compile", str(bad_models[case]), "-o", str(out), "--no-progress", "--cache-dir",
                       str(tmp_path / "cache")])
    assert status == 1
    assert _one_line(capsys.readouterr().err).startswith("npu compile: error: ")
    assert not out.exists()


@pytest.mark.parametrize("case", [c for c in CASES if not c.endswith(".nlb")])
def test_npu_compile_to_tflite_refuses(case, bad_models, tmp_path, capsys):
    out = tmp_path / "out.tflite"
    assert npu_main(["compile", str(bad_models[case]), "-o", str(out), "--no-progress"]) == 1
    assert _one_line(capsys.readouterr().err).startswith("npu compile: error: ")
    assert not out.exists()


def test_messages_say_what_is_wrong(bad_models):
    with pytest.raises(IRError, match="empty model file"):
        import_onnx(b"", "m")
    with pytest.raises(IRError, match="empty model file"):
        import_tflite(b"", "m")
    with pytest.raises(IRError, match="no operators and no outputs"):
        import_onnx(bad_models["ir-version-only.onnx"].read_bytes(), "m")
    with pytest.raises(IRError, match="no operators"):
        import_onnx(bad_models["identity-only.onnx"].read_bytes(), "m")
    with pytest.raises(IRError, match="truncated"):
        import_tflite(bad_models["last-bytes-cut.tflite"].read_bytes(), "m")
    with pytest.raises(LoadableError, match="empty file"):
        Loadable.load(bad_models["empty.nlb"])
    with pytest.raises(LoadableError, match="has no tasks"):
        Loadable.load(bad_models["no-tasks.nlb"]).check_runnable()


def test_every_cut_of_a_model_file_is_refused():
    """No prefix of a model file imports: each is refused with the compiler's own error."""
    onnx_bytes = small_cnn().SerializeToString()
    tflite_bytes = export_tflite(quantize_model(import_onnx(onnx_bytes), None, random_count=1))
    for data, importer in ((onnx_bytes, import_onnx), (tflite_bytes, import_tflite)):
        for n in [*range(0, len(data), max(1, len(data) // 400)), *range(len(data) - 16, len(data))]:
            with pytest.raises(IRError):
                importer(data[:n], "m")
