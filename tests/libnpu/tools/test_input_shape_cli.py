"""``--input-shape`` on the commands that compile a model, and calibration files with ``--state``."""
from __future__ import annotations

import numpy as np

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.support.free_dims_models import audio_onnx, batch_only_onnx, sequence_tflite
from tests.support.stateful_models import recurrent_onnx
from tests.support.tflite_builder import ReferenceRunner


def test_compile_names_the_free_dimensions_and_takes_their_shape(tmp_path, capsys):
    model = tmp_path / "audio.onnx"
    model.write_bytes(audio_onnx().SerializeToString())
    out = tmp_path / "audio.nlb"
    common = ["-o", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--random-calibration", "2"]
    assert main(["compile", str(model), *common]) == 2
    assert capsys.readouterr().err == ("npu compile: error: audio: input 'audio' has free dimensions "
                                       "[0:batch, 1:samples]: give --input-shape audio=1,<samples>\n")
    assert main(["compile", str(model), "--input-shape", "audio=1,32", *common]) == 0
    assert [t.shape for t in Loadable.load(out).inputs()] == [(1, 32)]
    assert [t.shape for t in Loadable.load(out).outputs()] == [(1, 16, 2)]
    assert main(["compile", str(model), "--input-shape", "voice=1,32", *common]) == 2
    assert "--input-shape names no input 'voice' (inputs: 'audio')" in capsys.readouterr().err
    assert main(["compile", str(model), "--input-shape", "audio=1,x", *common]) == 2
    assert "expected NAME=D,D,..." in capsys.readouterr().err
    assert main(["inspect", str(model), "--input-shape", "1,8"]) == 0
    assert "input  audio [1, 8] float32" in capsys.readouterr().out


def test_a_free_batch_is_a_note(tmp_path, capsys):
    model = tmp_path / "batch.onnx"
    model.write_bytes(batch_only_onnx().SerializeToString())
    out = tmp_path / "batch.nlb"
    assert main(["compile", str(model), "-o", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                 "--random-calibration", "2"]) == 0
    assert capsys.readouterr().err == ("npu compile: note: input 'x': free batch dimension 0:N set to 1 "
                                       "(--input-shape x=1,4 to choose)\n")


def test_calibration_files_feed_the_inputs_a_state_leaves(tmp_path, capsys):
    model = tmp_path / "elman.onnx"
    model.write_bytes(recurrent_onnx().SerializeToString())
    samples = tmp_path / "x.npy"
    np.save(samples, np.random.default_rng(1).standard_normal((6, 1, 16)).astype(np.float32))
    out = tmp_path / "elman.nlb"
    assert main(["compile", str(model), "-o", str(out), "--state", "h_in=h_out", "--calibration", str(samples),
                 "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--json"]) == 0
    assert '"calibration": "file"' in capsys.readouterr().out
    loadable = Loadable.load(out)
    # the default recipe calibrates on the stream's first 4 samples and measures on its last 2
    # (then on all 6 when it chose a step past int8: its state int16 then, int16_states)
    past_int8 = loadable.metadata["fidelity"]["chosen"] != "int8"
    assert loadable.metadata["calibration"]["runs"] == (6 if past_int8 else 4)
    assert not loadable.metadata["calibration"]["random"]
    assert loadable.metadata["fidelity"]["samples"] == 2
    assert [t.name for t in loadable.inputs()] == ["x"] and [t.name for t in loadable.states()] == ["h_in"]


def test_run_a_minus_one_tflite_input_as_litert_does(npu, tmp_path, capsys):
    model = tmp_path / "sequence.tflite"
    model.write_bytes(sequence_tflite())
    x = np.random.default_rng(2).integers(-128, 128, (1, 40), dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    saved = tmp_path / "out"
    assert main(["run", str(model), "--input-shape", "x=1,40", "--input", str(tmp_path / "x.npy"),
                 "--save", str(saved), "--repeat", "1", "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                 "--devroot", str(npu.devroot)]) == 0
    capsys.readouterr()
    expected = ReferenceRunner(sequence_tflite())(x)[0]          # LiteRT resized to [1, 40]
    assert expected.shape == (1, 10, 4)
    np.testing.assert_array_equal(np.load(saved / "output_0.npy"), expected)
