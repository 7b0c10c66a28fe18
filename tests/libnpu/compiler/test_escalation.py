"""Accurate by default: the default compile holds out calibration samples, measures every
output on them and escalates until each reaches the target (``libnpu.compiler.escalation``)."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.cpu_float import MAX_CPU_TRIALS
from libnpu.compiler.escalation import LADDER, FidelityWarning, TargetError, _as_chosen, split_held_out
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.mixed_precision import quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.recipes import RecipeError
from libnpu.tools.cli import main
from tests.support import model_builders as builders

SHAPE = (1, 4, 8, 8)


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(SHAPE).astype(np.float32)] for _ in range(count)]


def test_a_fifth_is_held_out_spread_over_the_data() -> None:
    assert split_held_out(list(range(10))) == ([0, 1, 3, 4, 5, 6, 8, 9], [2, 7])
    assert split_held_out(list(range(20)))[1] == [2, 7, 12, 17]
    assert len(split_held_out(list(range(256)))[1]) == 8           # at most eight
    assert split_held_out(list(range(5)))[1] == [1, 3]            # at least two
    assert split_held_out(list(range(10)), stateful=True)[1] == [8, 9]  # a stream: its tail
    assert split_held_out(list(range(3))) == ([0, 1, 2], [])      # too few to hold any out


def test_the_default_escalates_where_int8_misses_the_target() -> None:
    """A channel 40x wider than the others: int8 loses the narrow ones (cosine ~0.6 on unseen
    data, the default before escalation); the default now escalates to int16 activations
    and meets the target on data it never saw."""
    graph = import_onnx(builders.outlier_channel())
    unseen = _data(4, 99)
    q = to_int8_graph(graph, _data(10, 4))
    fidelity = q.metadata["fidelity"]
    assert fidelity["measured_on"] == "held-out" and fidelity["samples"] == 2 and fidelity["calibration_samples"] == 8
    assert [s["step"] for s in fidelity["steps"]] == ["int8", "int16 activations"]
    assert fidelity["steps"][0]["scores"]["y__nchw"] < 0.99 <= fidelity["scores"]["y__nchw"]
    assert fidelity["chosen"] == "int16 activations" and fidelity["missed"] == [] and q.metadata["int16_layers"]
    assert min(output_scores(optimize(graph), q, unseen).values()) >= 0.99
    fast = to_int8_graph(graph, _data(10, 4), recipe="fast")
    assert "fidelity" not in fast.metadata and "int16_layers" not in fast.metadata
    assert min(output_scores(optimize(graph), fast, unseen).values()) < 0.9


def test_a_model_that_passes_at_int8_costs_one_step_and_random_calibration_is_fasts() -> None:
    graph = import_onnx(builders.small_cnn())
    q = to_int8_graph(graph)              # random calibration: two more random inputs are held out
    fidelity = q.metadata["fidelity"]
    assert [s["step"] for s in fidelity["steps"]] == ["int8"] and fidelity["measured_on"] == "random"
    fast = to_int8_graph(graph, recipe="fast")
    assert [op.type for op in q.ops] == [op.type for op in fast.ops]
    for name, t in fast.tensors.items():   # calibrated as fast is: the same graph
        assert q.tensors[name].quant == t.quant
        assert t.data is None or np.array_equal(q.tensors[name].data, t.data)


def test_a_missed_target_warns_naming_the_output_and_keeps_the_best_step() -> None:
    graph = import_onnx(builders.outlier_channel())
    with pytest.warns(FidelityWarning, match=r"y__nchw \(0\.\d+\) under the fidelity target 1\.0.*--calibration"):
        q = to_int8_graph(graph, _data(3, 4), target=1.0, int16="none")
    fidelity = q.metadata["fidelity"]
    assert fidelity["measured_on"] == "calibration" and fidelity["missed"] == ["y__nchw"]
    assert 1 <= len(fidelity["steps"]) <= len(LADDER) + MAX_CPU_TRIALS
    assert all("int16" not in s["chose"] for s in fidelity["steps"])   # the caller's int16="none" held
    best = max(s["scores"]["y__nchw"] for s in fidelity["steps"] if not s["step"].startswith("CPU float"))
    assert fidelity["scores"]["y__nchw"] == best     # CPU float layers only where they reach the target


def test_target_errors() -> None:
    graph = import_onnx(builders.small_cnn())
    with pytest.raises(TargetError, match="expected a score in"):
        to_int8_graph(graph, target=1.5)
    with pytest.raises(RecipeError, match="default recipe"):
        to_int8_graph(graph, recipe="fast", target=0.9)


def test_npu_compile_prints_the_choice_and_warns_last(tmp_path, capsys) -> None:
    path = tmp_path / "outlier.onnx"
    onnx.save(builders.outlier_channel(), path)
    np.save(tmp_path / "cal.npy", np.stack([d[0] for d in _data(10, 4)]))
    common = ["--calibration", str(tmp_path / "cal.npy"), "--cache-dir", str(tmp_path / "c"), "--no-progress"]
    assert main(["compile", str(path), "-o", str(tmp_path / "a.nlb"), *common]) == 0
    out = capsys.readouterr()
    assert "accuracy: each output's score vs float on 2 held-out samples (calibrated on 8), target 0.99" in out.out
    assert "<- chosen" in out.out and "warning" not in out.err
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # the CLI says it once, itself
        assert main(["compile", str(path), "-o", str(tmp_path / "b.nlb"), "--target", "1", "--int16", "none",
                     "--json", *common]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["fidelity"]["missed"] == ["y__nchw"]
    assert out.err.strip().splitlines()[-1].startswith("npu compile: warning: y__nchw (")
    assert main(["compile", str(path), "-o", str(tmp_path / "c.nlb"), "--recipe", "fast", "--target", "0.9",
                 *common]) == 2
    assert "--target goes with the default recipe" in capsys.readouterr().err


def test_a_step_past_int8_is_calibrated_again_on_every_sample() -> None:
    """The held-out samples choose the step; the model it makes is calibrated on them too
    (an input only they showed was never calibrated before: magika-v1's pictures). A step
    that stays int8 keeps its one quantization, on the calibration part."""
    graph = import_onnx(builders.outlier_channel())
    data = _data(10, 4)
    _, held = split_held_out(list(range(10)))
    for k in held:                        # the held-out samples reach 3x the others' range
        data[k] = [data[k][0] * 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FidelityWarning)     # the outlier channel misses 0.99: no matter here
        q = to_int8_graph(graph, data)
    fidelity = q.metadata["fidelity"]
    assert fidelity["chosen"] == "int16 activations" and fidelity["recalibrated_on"] == 10
    assert q.metadata["calibration"]["runs"] == 10
    (edge,) = [op for op in q.ops if op.inputs[0] == q.inputs[0]]
    reach = float(np.max(q.tensors[edge.outputs[0]].quant.scale)) * 32767
    assert reach >= max(float(np.abs(data[k][0]).max()) for k in held)
    rng = np.random.default_rng(5)
    plain = to_int8_graph(import_onnx(builders.small_cnn()), target=0.9,    # int8 meets so low a target
                          dataset=[[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(10)])
    assert plain.metadata["fidelity"]["chosen"] == "int8" and "recalibrated_on" not in plain.metadata["fidelity"]
    assert plain.metadata["calibration"]["runs"] == 8


def test_layers_a_step_chose_are_named_again_whatever_their_names_hold():
    """A step's chosen int16 layers are named again when it is calibrated again (and by the
    next step); they went as one comma-joined string, so a tensor named with a comma (an
    ONNX output named '{"0": "1_minute_timer", "2": "5_minute_timer"}') was split and the
    compile stopped: "int16: no op or tensor named '"2": "5_minute_timer"'"."""
    model = builders.hard_swish_between_convs()
    odd = '{"0": "c1", "2": "c1"}'
    for node in model.graph.node:
        node.output[:] = [odd if o == "c1" else o for o in node.output]
        node.input[:] = [odd if i == "c1" else i for i in node.input]
    graph = import_onnx(model)
    data = [[np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)] for i in range(4)]
    again = _as_chosen({"int16": "auto"}, {"int16_tensors": [odd, "y"], "int16_weight_tensors": [odd]})
    q = quantize_mixed(graph, data, **again)
    assert odd in q.metadata["int16_tensors"] and odd in q.metadata["int16_weight_tensors"]
