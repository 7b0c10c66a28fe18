"""What ``npu-compile`` did, through ``npu``: ``inspect`` (a model's graph and plan, a loadable),
``compile -o X.tflite`` (quantize only), ``fetch``; one parser, one set of exit codes."""
import numpy as np
import pytest

from libnpu.compiler.tflite_import import load_tflite
from libnpu.tools.cli import COMMANDS, main


def test_inspect_a_model_and_its_plan(resnet8_path, capsys):
    assert main(["inspect", str(resnet8_path)]) == 0
    out = capsys.readouterr().out
    assert "MACs: 12,501,632" in out and "CONV_2D 9" in out and "ACTIVATIONS" not in out
    assert main(["inspect", "resnet8", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "ACTIVATIONS" in out and "INPUT" in out and "OUTPUT" in out


def test_compile_to_tflite_with_calibration_file(blazeface_path, tmp_path, capsys):
    calib = np.random.default_rng(0).uniform(-1, 1, (2, 1, 128, 128, 3)).astype(np.float32)
    np.save(tmp_path / "calib.npy", calib)
    out = tmp_path / "bf_int8.tflite"
    assert main(["compile", str(blazeface_path), "-o", str(out), "--calibration", str(tmp_path / "calib.npy"),
                 "--int8-io", "--no-progress", "--recipe", "fast"]) == 0
    assert f"-> {out}" in capsys.readouterr().out
    g = load_tflite(out)
    assert [g.tensors[n].dtype for n in g.inputs + g.outputs] == ["int8"] * 3


def test_errors_are_reported(capsys, tmp_path):
    assert main(["inspect", str(tmp_path / "missing.onnx")]) == 2          # usage: nothing by that name
    assert "no such model file" in capsys.readouterr().err
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 100)
    assert main(["inspect", str(bad)]) == 1                                  # failure: named, unusable
    assert "npu inspect: error: " in capsys.readouterr().err
    assert main(["compile", "resnet8", "-o", str(tmp_path / "m.bin")]) == 2
    assert "(.nlb) or an int8 model (.tflite)" in capsys.readouterr().err
    assert main(["fetch", "nosuchmodel"]) == 2
    assert "no model-zoo file 'nosuchmodel'" in capsys.readouterr().err


def test_inspect_loadable(resnet8_path, tmp_path, capsys):
    from libnpu.compiler.memplan import plan_memory
    g = load_tflite(resnet8_path)
    path = tmp_path / "m.nlb"
    plan_memory(g).to_loadable(g, []).save(path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "region 1: ACTIVATIONS" in out and "input  input_1_int8 [1, 32, 32, 3] int8 scale 0.0078125 zp 0" in out
    raw = bytearray(path.read_bytes())
    raw[100] ^= 1
    path.write_bytes(bytes(raw))
    assert main(["inspect", str(path)]) == 1
    assert "checksum" in capsys.readouterr().err


def test_compile_and_inspect(tmp_path, capsys):
    out = tmp_path / "bf.nlb"
    assert main(["compile", "blazeface", "-o", str(out), "--random-calibration", "1", "--no-progress",
                 "--cache-dir", str(tmp_path / "c"), "--recipe", "fast"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DEPTHWISE_CONV_2D 16" in text and "output regressors [1, 896, 16] float32" in text


def _every_command() -> list[list[str]]:
    return [list(c.words) for c in COMMANDS]


@pytest.mark.parametrize("words", _every_command(), ids=" ".join)
def test_one_parser_style(words, capsys):
    """--help answers the same way everywhere (exit 0, 'usage: npu ...'); an unknown option is usage (2),
    in one line naming the command and its help; a command that uses a device takes --devroot."""
    assert main(words + ["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: npu {' '.join(words)} ")
    command = next(c for c in COMMANDS if list(c.words) == words)
    assert ("--devroot" in text) == command.device
    assert main(words + ["--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"npu {' '.join(words)}: error: ")
    assert err.count("\n") == 1 and f"npu {' '.join(words)} --help" in err


def test_usage_and_failure_exit_codes(tmp_path, capsys):
    assert main([]) == 2 and main(["nosuchcommand"]) == 2
    assert main(["bench"]) == 2
    capsys.readouterr()
    assert main(["info", "--devroot", str(tmp_path)]) == 1                   # no device there
    assert main(["smi", "--devroot", str(tmp_path), "--interval", "-1"]) == 2
    assert "npu smi: error: --interval must be >= 0" in capsys.readouterr().err
    assert main(["bench", "ops", "--devroot", str(tmp_path), "--repeat", "0"]) == 2
    assert "npu bench ops: error: --repeat must be at least 1" in capsys.readouterr().err


def test_fetch_names_the_cached_file(resnet8_path, capsys):
    assert main(["fetch", "resnet8"]) == 0
    assert capsys.readouterr().out.split() == ["resnet8", str(resnet8_path)]
