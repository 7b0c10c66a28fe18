"""``--calibration`` with an .npz of named inputs (or a directory of them): multi-input models."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from libnpu.tools.models import load_calibration
from tests.support.stateful_models import recurrent_onnx


def _two_inputs() -> onnx.ModelProto:
    """out = a * 2 + b, two float inputs of different shapes (b broadcast)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "two"], ["m"]), helper.make_node("Add", ["m", "b"], ["out"])], "two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _compile(tmp_path, model, calibration, *extra) -> int:
    return main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--calibration", str(calibration),
                 "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--recipe", "fast", *extra])


def test_an_npz_of_named_inputs_calibrates_a_two_input_model(tmp_path, capsys):
    model = tmp_path / "two.onnx"
    model.write_bytes(_two_inputs().SerializeToString())
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (5, 1, 8)).astype(np.float32), rng.uniform(-3, 3, (5, 1, 1)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", b=b, a=a)         # any order: taken by name
    assert _compile(tmp_path, model, tmp_path / "cal.npz") == 0
    calibration = Loadable.load(tmp_path / "m.nlb").metadata["calibration"]
    assert calibration["runs"] == 5 and not calibration["random"]
    # a directory of .npz files: their samples one after the other
    folder = tmp_path / "dir"
    folder.mkdir()
    np.savez(folder / "1.npz", a=a[:2], b=b[:2])
    np.savez(folder / "2.npz", a=a[2:], b=b[2:])
    assert _compile(tmp_path, model, folder) == 0
    assert Loadable.load(tmp_path / "m.nlb").metadata["calibration"]["runs"] == 5


def test_npz_names_and_counts_that_do_not_fit_are_one_line_errors(tmp_path, capsys):
    model = tmp_path / "two.onnx"
    model.write_bytes(_two_inputs().SerializeToString())
    a, b = np.zeros((4, 1, 8), np.float32), np.zeros((4, 1, 1), np.float32)
    cases = {
        "missing.npz": ({"a": a}, "no array for input 'b'"),
        "extra.npz": ({"a": a, "b": b, "sr": np.zeros(4, np.int64)}, "array 'sr' names no input calibrated"),
        "count.npz": ({"a": a, "b": b[:3]}, "inputs have different sample counts (a 4, b 3)"),
        "shape.npz": ({"a": a.reshape(4, 8), "b": b}, "array 'a' is (4, 8); input 'a' takes samples of shape (1, 8)"),
    }
    for name, (arrays, message) in cases.items():
        np.savez(tmp_path / name, **arrays)
        assert _compile(tmp_path, model, tmp_path / name) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    np.save(tmp_path / "a.npy", a)
    assert _compile(tmp_path, model, tmp_path / "a.npy") == 2
    assert "this model has 2 inputs ('a', 'b'): give an .npz file" in capsys.readouterr().err
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert _compile(tmp_path, model, tmp_path / "junk.npz") == 2
    assert "junk.npz: not a readable .npz file" in capsys.readouterr().err


def test_an_npz_leaves_out_the_state_inputs(tmp_path, capsys):
    model = tmp_path / "elman.onnx"
    model.write_bytes(recurrent_onnx().SerializeToString())
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(1).standard_normal((6, 1, 16)).astype(np.float32))
    assert _compile(tmp_path, model, tmp_path / "x.npz", "--state", "h_in=h_out") == 0
    np.savez(tmp_path / "xh.npz", x=np.zeros((6, 1, 16), np.float32), h_in=np.zeros((6, 1, 16), np.float32))
    assert _compile(tmp_path, model, tmp_path / "xh.npz", "--state", "h_in=h_out") == 2
    assert "array 'h_in' names no input calibrated" in capsys.readouterr().err


def test_integer_ids_keep_their_dtype_in_npy_and_npz_files(tmp_path):
    ids = np.random.default_rng(2).integers(0, 257, (3, 1, 32), dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    np.savez(tmp_path / "ids.npz", bytes=ids, rate=np.full((3,), 16000, np.int64))
    (sample,), *_ = load_calibration(tmp_path / "ids.npy", {"bytes": (1, 32)})
    assert sample.dtype == np.int32 and np.array_equal(sample, ids[0])
    feeds = load_calibration(tmp_path / "ids.npz", {"bytes": (1, 32), "rate": ()})
    assert [(a.dtype, a.shape) for a in feeds[2]] == [(np.int32, (1, 32)), (np.int64, ())]
