"""Model inputs as users' models have them: frozen to a value (``--freeze-input``), integer
inputs taken in their own dtype, and rank-0 tensors, on the real device against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import libnpu
from libnpu.compiler.frozen_inputs import FreezeInputError
from libnpu.compiler.lower import compile_model
from libnpu.loadable import Loadable
from libnpu.tools.cli import main


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _rate_scaled() -> onnx.ModelProto:
    """y = x * (Cast(sr) / 16000 + 1): an int64 scalar rate driving constant arithmetic,
    as audio models take their sample rate."""
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "rate"], ["ratio"]),
             helper.make_node("Add", ["ratio", "one"], ["gain"]),
             helper.make_node("Mul", ["x", "gain"], ["y"])]
    graph = helper.make_graph(
        nodes, "rate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
                        helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor("rate", TensorProto.FLOAT, [], [16000.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_frozen_input_leaves_the_model_and_its_arithmetic_folds(npu, tmp_path, capsys):
    model = _rate_scaled()
    path = tmp_path / "rate.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "rate.nlb"
    assert main(["compile", str(path), "-o", str(out), "--freeze-input", "sr=8000", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--random-calibration", "4"]) == 0
    loadable = Loadable.load(out)
    assert [t.name for t in loadable.inputs()] == ["x"] and not loadable.host_steps
    x = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    for rate in (8000, 16000):
        with libnpu.load(path, devroot=npu.devroot, freeze_inputs={"sr": rate},
                         cache_dir=tmp_path / "cache") as compiled:
            got = compiled.infer([x])[0]
        want = _ort(model, {"x": x, "sr": np.array(rate, np.int64)})[0]
        np.testing.assert_allclose(got, want, atol=2 * np.abs(want).max() / 127)


@pytest.mark.parametrize("given, message", [
    ({"rate": 1}, "--freeze-input names no input 'rate' (inputs: 'x', 'sr')"),
    ({"sr": 1.5}, "the input is int64; 1.5 is not a whole number"),
    ({"sr": [1, 2]}, "2 value(s) given, the input [] takes 1"),
    ({"sr": 1, "x": np.zeros(16)}, "would freeze every input"),
])
def test_a_value_the_input_cannot_take_is_refused(given, message):
    with pytest.raises(FreezeInputError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        compile_model(_rate_scaled().SerializeToString(), freeze_inputs=given)


def test_freeze_input_on_the_command_line_says_what_is_wrong(tmp_path, capsys):
    path = tmp_path / "rate.onnx"
    path.write_bytes(_rate_scaled().SerializeToString())
    common = ["-o", str(tmp_path / "r.nlb"), "--no-progress", "--cache-dir", str(tmp_path / "cache")]
    assert main(["compile", str(path), "--freeze-input", "sr", *common]) == 2
    assert "expected NAME=VALUE[,VALUE...], e.g. sr=16000" in capsys.readouterr().err
    assert main(["compile", str(path), "--freeze-input", "sr=-1e30", *common]) == 2
    assert "outside int64's range" in capsys.readouterr().err
