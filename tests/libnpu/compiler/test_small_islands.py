"""A chip partition too small to pay for a device trip, between two host calls, joins them
(libnpu.compiler.small_islands); a large one, and every one with the rule off, stays."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import libnpu
from libnpu.compiler.ir import IRError
from libnpu.compiler.lower import compile_model
from libnpu.compiler.small_islands import MIN_NPU_PARTITION, SMALL_ISLANDS, TOO_SMALL
from libnpu.loadable import Loadable
from libnpu.tools.cli import main


def _sandwich(middle: int) -> bytes:
    """x -> CumSum (CPU) -> the middle (chip) -> CumSum (CPU) -> MatMul (chip): the middle a
    Mul by a constant (``middle`` 0: a few values) or a MatMul of ``middle`` x ``middle``."""
    rng = np.random.default_rng(0)
    width = middle or 8
    if middle:
        mid = [numpy_helper.from_array((rng.standard_normal((width, width)) / width).astype(np.float32), "m")]
        node = helper.make_node("MatMul", ["a", "m"], ["b"])
    else:
        mid = [numpy_helper.from_array(np.float32(0.5), "m")]
        node = helper.make_node("Mul", ["a", "m"], ["b"])
    inits = [numpy_helper.from_array(np.array(1, np.int64), "axis"),
             numpy_helper.from_array(rng.standard_normal((width, 4)).astype(np.float32) / width, "w"), *mid]
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["a"]), node,
             helper.make_node("CumSum", ["b", "axis"], ["c"]), helper.make_node("MatMul", ["c", "w"], ["y"])]
    graph = helper.make_graph(nodes, "sandwich", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _calibration(width: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(1)
    return [[rng.uniform(-1, 1, (1, width)).astype(np.float32)] for _ in range(4)]


def _jobs(loadable: Loadable) -> int:
    return sum(1 for tasks, _ in loadable.partitions() if tasks)


def test_a_tiny_chip_partition_between_host_calls_joins_them(npu):
    model = _sandwich(0)
    loadable = compile_model(model, _calibration(8), recipe="fast")
    assert [s.op for s in loadable.host_steps] == ["CumSum+Mul+CumSum"]      # one host call, not two
    assert _jobs(loadable) == 1                                               # the MatMul's
    assert loadable.metadata[SMALL_ISLANDS] == [f"Mul (op 1) runs on the CPU: {TOO_SMALL}: 8 MACs between "
                                                "CPU partitions"]
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).uniform(-1, 1, (1, 8)).astype(np.float32)
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        (got,) = compiled.infer([x], dequantized=True)
    (want,) = session.run(None, {"x": x})
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_the_rule_off_keeps_the_tiny_partition_on_the_chip():
    loadable = compile_model(_sandwich(0), _calibration(8), recipe="fast", min_npu_partition=0)
    assert [s.op for s in loadable.host_steps] == ["CumSum", "CumSum"]
    assert _jobs(loadable) == 2 and SMALL_ISLANDS not in loadable.metadata


def test_a_large_chip_partition_between_host_calls_stays():
    width = 320                         # 102,400 MACs: just over the threshold
    assert width * width > MIN_NPU_PARTITION
    loadable = compile_model(_sandwich(width), _calibration(width), recipe="fast")
    assert [s.op for s in loadable.host_steps] == ["CumSum", "CumSum"]
    assert _jobs(loadable) == 2


@pytest.mark.parametrize("value", [-1, 1.5, "big", True])
def test_a_bad_threshold_is_refused(value):
    with pytest.raises(IRError, match="min_npu_partition must be a whole number"):
        compile_model(_sandwich(0), _calibration(8), recipe="fast", min_npu_partition=value)


def test_a_model_the_chip_runs_whole_is_never_split():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    loadable = compile_model(model.SerializeToString(), _calibration(8), recipe="fast")
    assert not loadable.host_steps and _jobs(loadable) == 1


def test_npu_compile_says_why_and_takes_the_threshold(tmp_path, capsys):
    model = tmp_path / "sandwich.onnx"
    model.write_bytes(_sandwich(0))
    common = ["compile", str(model), "--recipe", "fast", "--cache-dir", str(tmp_path / "c"), "--no-progress"]
    assert main([*common, "-o", str(tmp_path / "m.nlb"), "--report"]) == 0
    out = capsys.readouterr().out
    assert f"Mul (op 1) runs on the CPU: {TOO_SMALL}: 8 MACs between CPU partitions" in out
    assert any(line.split()[:3] == ["1", "Mul", "CPU"] and TOO_SMALL in line for line in out.splitlines())
    assert main([*common, "-o", str(tmp_path / "off.nlb"), "--min-npu-partition", "0"]) == 0
    assert len(Loadable.load(tmp_path / "off.nlb").host_steps) == 2
    capsys.readouterr()
    assert main([*common, "-o", str(tmp_path / "bad.nlb"), "--min-npu-partition", "-1"]) == 2
    assert "--min-npu-partition is a number of multiply-adds >= 0" in capsys.readouterr().err


def test_the_last_chip_partition_stays():
    # CumSum -> Mul -> CumSum and nothing else: the Mul is the model's only chip work.
    model = onnx.load_from_string(_sandwich(0))
    del model.graph.node[3:]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 8]))
    loadable = compile_model(model.SerializeToString(), _calibration(8), recipe="fast")
    assert [s.op for s in loadable.host_steps] == ["CumSum", "CumSum"] and SMALL_ISLANDS not in loadable.metadata
