"""``npu compile --state IN=OUT``: a float ONNX model made stateful from the command line,
as a loadable or as an int8 .tflite whose resource variables LiteRT carries."""
from __future__ import annotations

import numpy as np

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.support.stateful_models import recurrent_onnx
from tests.support.tflite_builder import ReferenceRunner


def test_compile_with_a_state_pair(tmp_path, capsys):
    model = tmp_path / "elman.onnx"
    model.write_bytes(recurrent_onnx().SerializeToString())
    nlb, tfl = tmp_path / "elman.nlb", tmp_path / "elman.tflite"
    common = ["--state", "h_in=h_out", "--no-progress", "--cache-dir", str(tmp_path / "cache")]
    assert main(["compile", str(model), "-o", str(nlb), *common]) == 0
    assert "state:h_in" in capsys.readouterr().out                  # the plan lists the STATE region
    loadable = Loadable.load(nlb)
    assert [t.name for t in loadable.inputs()] == ["x"] and [t.name for t in loadable.states()] == ["h_in"]
    assert main(["inspect", str(nlb)]) == 0
    (state,) = loadable.states()             # int8, or int16 where the escalation promoted it (int16_states)
    assert f"state  h_in [1, 8] {state.dtype}" in capsys.readouterr().out
    assert main(["compile", str(model), "-o", str(tfl), *common[:-2]]) == 0
    capsys.readouterr()
    step = ReferenceRunner(tfl.read_bytes())                         # LiteRT keeps h between calls
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    first, second = step(x)[0], step(x)[0]
    assert not np.array_equal(first, second)                         # same input, another state


def test_a_malformed_state_pair_is_a_usage_error(tmp_path, capsys):
    model = tmp_path / "elman.onnx"
    model.write_bytes(recurrent_onnx().SerializeToString())
    assert main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--state", "h_in"]) == 2
    assert "--state takes INPUT=OUTPUT" in capsys.readouterr().err
    assert main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--state", "x_in=h_out",
                 "--no-progress"]) == 1
    assert "not a graph input" in capsys.readouterr().err


def test_run_a_stateful_loadable(npu, tmp_path, capsys):
    model = tmp_path / "elman.onnx"
    model.write_bytes(recurrent_onnx().SerializeToString())
    nlb = tmp_path / "elman.nlb"
    assert main(["compile", str(model), "-o", str(nlb), "--state", "h_in=h_out", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["run", str(nlb), "--json", "--repeat", "3", "--save", str(out), "--devroot", str(npu.devroot)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["output_0.npy"]          # y only: h stays on the device
