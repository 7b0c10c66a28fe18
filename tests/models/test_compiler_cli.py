import numpy as np

from libnpu.tools.compiler_cli import main
from libnpu.compiler.tflite_import import load_tflite


def test_summary_and_plan(resnet8_path, capsys):
    assert main(["summary", str(resnet8_path)]) == 0
    out = capsys.readouterr().out
    assert "MACs: 12,501,632" in out and "CONV_2D 9" in out
    assert main(["plan", "resnet8"]) == 0
    out = capsys.readouterr().out
    assert "ACTIVATIONS" in out and "INPUT" in out and "OUTPUT" in out


def test_quantize_with_calibration_file(blazeface_path, tmp_path, capsys):
    calib = np.random.default_rng(0).uniform(-1, 1, (2, 1, 128, 128, 3)).astype(np.float32)
    np.save(tmp_path / "calib.npy", calib)
    out = tmp_path / "bf_int8.tflite"
    assert main(["quantize", str(blazeface_path), "-o", str(out), "--calib", str(tmp_path / "calib.npy"),
                 "--int8-io"]) == 0
    assert "'runs': 2" in capsys.readouterr().out
    g = load_tflite(out)
    assert [g.tensors[n].dtype for n in g.inputs + g.outputs] == ["int8"] * 3


def test_errors_are_reported(capsys, tmp_path):
    assert main(["summary", str(tmp_path / "missing.onnx")]) == 1
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 100)
    assert main(["summary", str(bad)]) == 1
    assert "not a TFLite" in capsys.readouterr().err


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
    assert main(["compile", "blazeface", "-o", str(out), "--random", "1"]) == 0
    assert "CONV_2D 21" in capsys.readouterr().out
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DEPTHWISE_CONV_2D 16" in text and "output regressors [1, 896, 16] float32" in text
