"""``npu compile --int16``: mixed precision from the command line."""
from __future__ import annotations

import json

import numpy as np
import onnx

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.support import model_builders as builders


def _model(tmp_path):
    path = tmp_path / "outlier.onnx"
    onnx.save(builders.outlier_channel(), path)
    np.save(tmp_path / "cal.npy", np.random.default_rng(4).standard_normal((6, 1, 4, 8, 8)).astype(np.float32))
    return path, ["--calibration", str(tmp_path / "cal.npy"), "--cache-dir", str(tmp_path / "c")]


def test_auto_and_named_int16_layers_are_reported(npu, tmp_path, capsys):
    model, common = _model(tmp_path)
    out = tmp_path / "auto.nlb"
    assert main(["compile", str(model), "-o", str(out), "--int16", "auto", "--int16-target", "0.999", "--json",
                 "--recipe", "fast", *common]) == 0     # int16 auto alone (the default may escalate further)
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["int16_layers"]) == ["c1", "y"]
    assert min(report["int16_output_score"].values()) >= 0.999
    assert Loadable.load(out).metadata["int16_layers"] == report["int16_layers"]
    assert main(["run", str(out), "--repeat", "0", "--devroot", str(npu.devroot)]) == 0
    capsys.readouterr()
    assert main(["compile", str(model), "-o", str(tmp_path / "named.nlb"), "--int16", "c1", *common]) == 0
    text = capsys.readouterr().out
    assert "int16 activations: 1 layer (c1)" in text and "memory plan:" in text
    assert main(["compile", str(model), "-o", str(tmp_path / "plain.nlb"), "--recipe", "fast", *common]) == 0
    assert "int16 activations" not in capsys.readouterr().out      # int8 only (the default would escalate)


def test_int16_option_errors(tmp_path, capsys):
    model, common = _model(tmp_path)
    out = ["-o", str(tmp_path / "x.nlb"), *common]
    assert main(["compile", str(model), "--int16", "nope", *out]) == 1
    assert "no op or tensor named 'nope'" in capsys.readouterr().err
    assert main(["compile", str(model), "--int16", "c1", "--int16-target", "0.9", *out]) == 2
    assert "need --int16 auto" in capsys.readouterr().err
    assert main(["compile", str(model), "--int16", "auto", "--int16-max-layers", "0", *out]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert not (tmp_path / "x.nlb").exists()


def test_report_measures_the_mixed_graph(tmp_path, capsys):
    """--report with --int16: each layer's error is that of the graph that runs (its int16
    layers more precise than in plain int8)."""
    model, common = _model(tmp_path)

    def errors(*extra: str) -> dict:
        assert main(["compile", str(model), "-o", str(tmp_path / "r.nlb"), "--report", "--json", "--recipe", "fast",
                     *extra, *common]) == 0
        return {row["tensor"]: row for row in json.loads(capsys.readouterr().out)["layer_errors"]}

    plain, mixed = errors(), errors("--int16", "c1,y")
    assert mixed["r1"]["local_sqnr_db"] > plain["r1"]["local_sqnr_db"] + 6  # int8 weights remain
    assert mixed["y"]["cosine"] > 0.999 > 0.99 > plain["y"]["cosine"]
    assert main(["compile", str(model), "-o", str(tmp_path / "r.nlb"), "--report", "--int16", "auto",
                 "--recipe", "fast", *common]) == 0
    text = capsys.readouterr().out
    assert "int16 activations: 2 layers" in text and "quantization accuracy per layer" in text


def test_int16_tflite_export_runs_in_litert(tmp_path, capsys, litert):
    """-o OUT.tflite --int16: the 16x8 model for LiteRT."""
    model, common = _model(tmp_path)
    out = tmp_path / "mixed.tflite"
    assert main(["compile", str(model), "-o", str(out), "--int16", "c1,y", *common]) == 0
    assert "int16 activations: 2 layers (c1, y)" in capsys.readouterr().out
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    (y,) = litert(out, [x])
    assert y.shape == (1, 4, 8, 8) and y.dtype == np.float32


def test_recipe_accurate_from_the_command_line(tmp_path, capsys):
    """--recipe accurate: GPTQ rounding and --int16 auto; options given explicitly win or add."""
    model, common = _model(tmp_path)
    out = tmp_path / "accurate.nlb"
    assert main(["compile", str(model), "-o", str(out), "--recipe", "accurate", "--int16-target", "0.999",
                 "--json", *common]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["int16_layers"]) == ["c1", "y"]
    assert Loadable.load(out).metadata["calibration"]["weight_rounding"] == "gptq"
    assert Loadable.load(out).metadata["calibration"]["bias_correction"] is False
    assert main(["compile", str(model), "-o", str(out), "--recipe", "accurate", "--int16", "none",
                 "--bias-correction", *common]) == 0
    assert "int16 activations" not in capsys.readouterr().out
    calibration = Loadable.load(out).metadata["calibration"]
    assert calibration["weight_rounding"] == "gptq" and calibration["bias_correction"] is True
    assert main(["compile", str(model), "-o", str(out), "--recipe", "accurate", "--int16", "none",
                 "--int16-target", "0.9", *common]) == 2
    assert "need --int16 auto" in capsys.readouterr().err


def test_int16_weights_from_the_command_line(npu, tmp_path, capsys):
    """--int16-weights: a16w16 on named int16 layers, reported, run on the device; refused
    without int16 activations; a .tflite export leaves them out unless asked (no TFLite kernel)."""
    model, common = _model(tmp_path)
    out = tmp_path / "w16.nlb"
    assert main(["compile", str(model), "-o", str(out), "--int16", "c1,y", "--int16-weights", "c1", *common]) == 0
    assert "int16 weights: 1 layer (c1)" in capsys.readouterr().out
    assert Loadable.load(out).metadata["int16_weights"] == ["c1"]
    assert main(["run", str(out), "--repeat", "0", "--devroot", str(npu.devroot)]) == 0
    capsys.readouterr()
    assert main(["compile", str(model), "-o", str(tmp_path / "x.nlb"), "--int16-weights", "c1", "--recipe", "fast",
                 *common]) == 2
    assert "--int16-weights needs int16 activations" in capsys.readouterr().err
    tfl = tmp_path / "w16.tflite"
    assert main(["compile", str(model), "-o", str(tfl), "--recipe", "accurate", *common]) == 0
    assert "int16 weights" not in capsys.readouterr().out
    assert main(["compile", str(model), "-o", str(tfl), "--int16", "c1", "--int16-weights", "c1", *common]) == 1
    assert "no TFLite kernel" in capsys.readouterr().err


def test_int16_headroom_from_the_command_line(npu, tmp_path, capsys):
    """--int16-headroom: a factor or 'held-out', kept in the loadable's metadata, run on the
    device; refused without int16 activations or out of range, with one clear line."""
    model, common = _model(tmp_path)
    out = tmp_path / "held.nlb"
    assert main(["compile", str(model), "-o", str(out), "--int16", "c1,y", "--int16-headroom", "held-out",
                 *common]) == 0
    summary = Loadable.load(out).metadata["int16_headroom"]
    assert 1.25 <= summary["min"] <= summary["max"] <= 2.0
    assert main(["run", str(out), "--repeat", "0", "--devroot", str(npu.devroot)]) == 0
    assert main(["compile", str(model), "-o", str(tmp_path / "f.nlb"), "--int16", "c1,y", "--int16-headroom", "1.5",
                 *common]) == 0
    assert Loadable.load(tmp_path / "f.nlb").metadata["int16_headroom"] == {"min": 1.5, "median": 1.5, "max": 1.5}
    capsys.readouterr()
    for bad, message in ((["--int16-headroom", "1.5", "--recipe", "fast"], "--int16-headroom needs int16 activations"),
                         (["--int16", "c1", "--int16-headroom", "0.5"], "a factor in [1, 16]"),
                         (["--int16", "c1", "--int16-headroom", "wide"], "a factor in [1, 16]")):
        assert main(["compile", str(model), "-o", str(tmp_path / "x.nlb"), *bad, *common]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_int16_grid_from_the_command_line(npu, tmp_path, capsys):
    """--int16-grid per-channel: kept in the loadable's metadata (how many tensors got one),
    run on the device; refused without int16 activations, with one clear line."""
    model, common = _model(tmp_path)
    out = tmp_path / "pc.nlb"
    assert main(["compile", str(model), "-o", str(out), "--int16", "c1,y", "--int16-weights", "y",
                 "--int16-grid", "per-channel", *common]) == 0
    meta = Loadable.load(out).metadata
    assert meta["int16_grid"] == "per_channel" and meta["int16_per_channel_tensors"] == 1   # c1 (y: an output)
    assert main(["run", str(out), "--repeat", "0", "--devroot", str(npu.devroot)]) == 0
    capsys.readouterr()
    assert main(["compile", str(model), "-o", str(tmp_path / "x.nlb"), "--int16-grid", "per-channel",
                 "--recipe", "fast", *common]) == 2
    err = capsys.readouterr().err
    assert "--int16-grid needs int16 activations" in err and "Traceback" not in err
