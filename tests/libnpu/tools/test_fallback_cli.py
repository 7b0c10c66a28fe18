"""``npu compile --report / --ops / --strict``, ``npu inspect MODEL`` and ``npu run`` on a
model with an operator the chip lacks, and inputs that do not fit."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tflite

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.support import host_models
from tests.support.litert import litert_run


@pytest.fixture
def reverse_model(tmp_path):
    path = tmp_path / "reverse.tflite"
    path.write_bytes(host_models.int8_fc_sandwich(tflite.BuiltinOperator.REVERSE_V2))
    return path


def test_report_lists_each_placement_and_a_summary(reverse_model, tmp_path, capsys):
    out = tmp_path / "r.nlb"
    assert main(["compile", str(reverse_model), "-o", str(out), "--report", "--no-progress",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    text = capsys.readouterr().out
    assert "placement of reverse.tflite's operators:" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["0", "FULLY_CONNECTED", "NPU"] in lines and ["2", "FULLY_CONNECTED", "NPU"] in lines
    assert ["1", "REVERSE_V2", "CPU", "no", "NPU", "operator", "of", "this", "type"] in lines
    assert "summary: 2 ops on the NPU in 2 partition(s), 1 on the CPU (REVERSE_V2 x1)" in text
    assert "one inference: 2 job(s) on the chip, 1 host step(s) in between" in text
    assert [s.op for s in Loadable.load(out).host_steps] == ["REVERSE_V2"]


def test_report_as_json_and_the_allow_list(reverse_model, tmp_path, capsys):
    assert main(["compile", str(reverse_model), "-o", str(tmp_path / "r.nlb"), "--report", "--json",
                 "--ops", "REVERSE_V2", "--no-progress", "--cache-dir", str(tmp_path / "c")]) == 0
    report = json.loads(capsys.readouterr().out)["report"]
    assert [(p["op"], p["device"], p["reason"]) for p in report["placement"]] == [
        ("FULLY_CONNECTED", "CPU", "not in the allow-list"), ("REVERSE_V2", "CPU", "no NPU operator of this type"),
        ("FULLY_CONNECTED", "CPU", "not in the allow-list")]
    assert report["summary"] == dict(npu_ops=0, npu_partitions=0, cpu_ops=3,
                                     cpu_operators={"FULLY_CONNECTED": 2, "REVERSE_V2": 1})
    assert not Loadable.load(tmp_path / "r.nlb").tasks


def test_inspect_a_model_shows_its_placement(reverse_model, capsys):
    assert main(["inspect", str(reverse_model)]) == 0
    text = capsys.readouterr().out
    assert "HOST" in text and "REVERSE_V2       CPU     no NPU operator of this type" in text
    assert main(["inspect", str(reverse_model), "--ops", "FULLY_CONNECTED"]) == 0
    assert "summary: 2 ops on the NPU in 2 partition(s)" in capsys.readouterr().out


def test_npu_run_a_model_with_fallback_and_inputs_that_do_not_fit(reverse_model, npu, tmp_path, capsys):
    x = np.random.default_rng(0).integers(-128, 128, (1, 16), dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    save = tmp_path / "out"
    assert main(["run", str(reverse_model), "--input", str(tmp_path / "x.npy"), "--save", str(save), "--repeat", "1",
                 "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c"), "--no-progress"]) == 0
    capsys.readouterr()
    assert np.array_equal(np.load(save / "output_0.npy"), litert_run(reverse_model.read_bytes(), [x])[0])
    np.save(tmp_path / "big.npy", np.full((1, 16), 1000, np.int32))
    assert main(["run", str(reverse_model), "--input", str(tmp_path / "big.npy"), "--repeat", "1",
                 "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "input x: int32 values in [1000, 1000] do not fit int8 [-128, 127]" in capsys.readouterr().err
    np.save(tmp_path / "wide.npy", np.zeros((1, 17), np.int8))
    assert main(["run", str(reverse_model), "--input", str(tmp_path / "wide.npy"), "--repeat", "1",
                 "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "does not fit input x [1, 16]" in capsys.readouterr().err


def test_report_on_a_host_op_with_several_outputs(tmp_path, capsys):
    # The LSTM's Y and Y_h each measured ("'list' object has no attribute 'ndim'" before).
    path = tmp_path / "lstm.onnx"
    path.write_bytes(host_models.lstm_unused_states(last_state=True).SerializeToString())
    assert main(["compile", str(path), "-o", str(tmp_path / "l.nlb"), "--report", "--ops", "MatMul,Relu",
                 "--no-progress", "--cache-dir", str(tmp_path / "c")]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("quantization accuracy per layer"))
    measured = {line.split()[0]: line.split()[1] for line in lines[start + 2:] if line.strip()}
    assert measured["seq"] == "HOST" and measured["y_h_int8"] == "HOST"
