"""Escalation's CPU float step for front ends (libnpu.compiler.cpu_float): a layer that
magnifies its input grid's error (the log of a power spectrum) moves to the CPU with its
whole front end, even when that holds every layer with weights; over the cost cap, only
when int16 on the front end alone does not hold it (libnpu.compiler.front_end_check)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler import cpu_float
from libnpu.compiler.accuracy import layer_errors, output_scores
from libnpu.compiler.cpu_float import MAX_FRONT_END_MACS, amplified_layers, errors_by_float_name, front_end_blamed
from libnpu.compiler.frontend import load_model, to_int8_graph
from libnpu.compiler.held_out import required_score, split_held_out
from libnpu.compiler.lower import lower
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import import_with_fallback, plan_placement
from libnpu.tools.cli import main
from tests.support.log_mel_models import audio, log_mel_onnx, log_mel_tflite

BINS, MELS = 34, 8


def _log_mel() -> bytes:
    """openwakeword's mel front end in small: the real and imaginary parts of a DFT
    (MatMuls), the power ``re^2 + im^2``, a mel filter bank, ``10 log10(max(x, 1e-10))``
    and a shift. The power spans 1e-10 to 1e4 over quiet and loud frames."""
    n = np.arange(64)
    k = np.arange(BINS)[:, None]
    cos = np.cos(2 * np.pi * k * n / 64).T.astype(np.float32)
    sin = -np.sin(2 * np.pi * k * n / 64).T.astype(np.float32)
    mel = np.zeros((BINS, MELS), np.float32)
    for m in range(MELS):
        mel[4 * m:4 * m + 6, m] = np.hanning(8)[1:7]
    nodes = [helper.make_node("MatMul", ["x", "cos"], ["re"]), helper.make_node("MatMul", ["x", "sin"], ["im"]),
             helper.make_node("Mul", ["re", "re"], ["re2"]), helper.make_node("Mul", ["im", "im"], ["im2"]),
             helper.make_node("Add", ["re2", "im2"], ["power"]), helper.make_node("MatMul", ["power", "mel"], ["m"]),
             helper.make_node("Clip", ["m", "eps"], ["clipped"]), helper.make_node("Log", ["clipped"], ["ln"]),
             helper.make_node("Mul", ["ln", "db"], ["decibels"]), helper.make_node("Add", ["decibels", "shift"], ["y"])]
    consts = {"cos": cos, "sin": sin, "mel": mel, "eps": np.float32(1e-10),
              "db": np.float32(10 / np.log(10)), "shift": np.float32(40.0)}
    graph = helper.make_graph(nodes, "log_mel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, MELS])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _frames(count: int, seed: int) -> list[list[np.ndarray]]:
    """A tone over quiet noise (1e-4 to 1e-2 of it) in each frame: the power spans 1e-10 to 1e3."""
    rng = np.random.default_rng(seed)
    t = np.arange(64)
    return [[(np.sin(2 * np.pi * rng.uniform(2, 30) * t / 64) * rng.uniform(0.5, 1)
              + rng.standard_normal(64) * 10.0 ** rng.uniform(-4, -2)).astype(np.float32)[None]]
            for _ in range(count)]


def test_the_log_of_a_power_spectrum_keeps_its_whole_front_end_in_float_on_the_cpu() -> None:
    model = _log_mel()
    q = to_int8_graph(model, _frames(20, 1))
    fidelity = q.metadata["fidelity"]
    # int16 cannot hold the power: the front end goes to the CPU right after int8, the rest int8 again
    assert [s["step"] for s in fidelity["steps"]] == ["int8", "int8 + CPU front end"]
    assert fidelity["chosen"] == "int8 + CPU front end" and not fidelity["missed"], fidelity
    moved = [layer.split()[0] for layer in fidelity["cpu_float"]["layers"]]
    assert moved.count("FULLY_CONNECTED") == 3 and "LOG" in moved     # every layer with weights
    unseen = _frames(6, 99)
    assert output_scores(optimize(load_model(model, kind="onnx")), q, unseen)["y"] >= 0.99


def _pcm_log_mel() -> bytes:
    """:func:`_log_mel` taking 16-bit PCM samples as audio exports do (MarbleNet's VAD):
    Cast to float (a host call: the chip reads no int16 samples) and scaled by 1 / 32768."""
    model = onnx.load_from_string(_log_mel())
    graph = model.graph
    graph.node.insert(0, helper.make_node("Cast", ["pcm"], ["samples"], to=TensorProto.FLOAT))
    graph.node.insert(1, helper.make_node("Mul", ["samples", "full_scale"], ["x"]))
    graph.initializer.append(numpy_helper.from_array(np.float32(1 / 32768), "full_scale"))
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info("pcm", TensorProto.INT16, [1, 64]))
    return model.SerializeToString()


def test_a_front_end_after_the_cast_of_int16_samples_goes_to_the_cpu_in_float() -> None:
    # The Cast of the int16 input is a host call already, an ONNX one no float .tflite holds:
    # the front end upstream of the log reached it and stayed on the chip (every integer step
    # missed: 0.874 at best, int16 activations, and no CPU float trial could start). The
    # Cast stays the call it is; its float values feed the front end's.
    plan = plan_placement(_pcm_log_mel())
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    pcm = [[np.clip(np.round(frame * 32767), -32768, 32767).astype(np.int16)] for (frame,) in _frames(26, 1)]
    q = to_int8_graph(graph, pcm[:20])
    fidelity = q.metadata["fidelity"]
    assert fidelity["chosen"] == "int8 + CPU front end" and not fidelity["missed"], fidelity
    moved = [layer.split()[0] for layer in fidelity["cpu_float"]["layers"]]
    assert "LOG" in moved and "HOST" not in moved and moved.count("FULLY_CONNECTED") == 3, moved
    assert [step.op for step in lower(q).host_steps][0] == "Cast"
    assert output_scores(optimize(graph), q, pcm[20:])["y"] >= 0.99


def _compressed_spectrum() -> bytes:
    """FastEnhancer's compressed spectrum in small: ``X * clip(|X|, 1e-5)^-0.7`` of an
    ONNX DFT of 8 frames, then a Conv. The DFT and the Pow by -0.7 are host calls (ONNX
    ones, which no float .tflite holds); the gain spans 0.02 to 3162 (silent frames). ``X``
    is scaled on the way, so the float call making it feeds both the Abs and the Mul after
    the Pow: two float calls around the Pow's."""
    w = (np.random.default_rng(0).standard_normal((8, 2, 1, 5)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["spec"], onesided=1),
             helper.make_node("Mul", ["spec", "norm"], ["x_k"]),
             helper.make_node("Abs", ["x_k"], ["mag"]), helper.make_node("Clip", ["mag", "eps"], ["floor"]),
             helper.make_node("Pow", ["floor", "power"], ["gain"]), helper.make_node("Mul", ["x_k", "gain"], ["comp"]),
             helper.make_node("Transpose", ["comp"], ["chw"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["chw", "w"], ["y"], pads=[0, 2, 0, 2])]
    consts = {"axis": np.int64(2), "norm": np.float32(2.0), "eps": np.float32(1e-5), "power": np.float32(-0.7),
              "w": w}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 128, 1])
    graph = helper.make_graph(nodes, "compressed", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 65])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def _spectra(count: int, seed: int) -> list[list[np.ndarray]]:
    """8 frames of a tone over noise each, 30% of them silent (every bin at the clamp)."""
    rng = np.random.default_rng(seed)
    t = np.arange(128)
    x = np.zeros((count, 1, 8, 128, 1), np.float32)
    for frame in x[:, 0, :, :, 0].reshape(-1, 128):
        if rng.uniform() >= 0.3:
            frame[:] = np.sin(2 * np.pi * rng.uniform(2, 30) * t / 128) * rng.uniform(0.05, 1) \
                + rng.standard_normal(128) * 10.0 ** rng.uniform(-3, -1)
    return [[sample] for sample in x]


def test_a_front_end_holding_onnx_host_calls_stays_in_float_on_the_cpu() -> None:
    # The DFT and the Pow are ONNX host calls: no float .tflite holds them, so no chain
    # through them could move, the CPU float step never started and the gain stayed on an
    # int16 grid its silent frames set (int16 activations chosen, target missed, 0.921 on
    # unseen spectra). They stay the calls they are, between the float calls, on no grid (and the
    # float call after the Pow reads X from the one before it: it found no call making it).
    plan = plan_placement(_compressed_spectrum())
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    q = to_int8_graph(graph, _spectra(20, 1))
    fidelity = q.metadata["fidelity"]
    # the Pow magnifies its input grid's error (the gain of a quiet bin): a front end, moved after int8
    assert fidelity["chosen"] == "int8 + CPU front end" and not fidelity["missed"], fidelity
    moved = [layer.split()[0] for layer in fidelity["cpu_float"]["layers"]]
    assert sorted(moved) == ["ABS", "CLIP", "MUL", "MUL"], moved
    calls = {step.op for step in lower(q).host_steps}
    assert {"DFT", "Pow"} <= calls, calls
    assert all(q.tensors[n].quant is None for n in ("spec", "x_k", "gain"))      # host to host, in float
    (out,) = graph.outputs
    assert output_scores(optimize(graph), q, _spectra(8, 99))[out] >= 0.99


def test_the_log_is_the_layer_that_magnifies_its_input_grid() -> None:
    graph = optimize(load_model(_log_mel(), kind="onnx"))
    q = to_int8_graph(graph, _frames(20, 1), recipe="fast")
    found = amplified_layers(layer_errors(graph, q, _frames(4, 7)), graph)
    assert list(found) == ["ln"]


# A model that is all front end: a log-mel spectrogram (tests.support.log_mel_models)

_BIG = {"frames": 48, "window": 512, "bins": 257, "mels": 32}    # 12.9M multiply-adds: over MAX_FRONT_END_MACS


def _whole_model_case(name: str) -> tuple[bytes, str]:
    if name == "onnx":
        return log_mel_onnx(**_BIG).SerializeToString(), "onnx"
    return log_mel_tflite(**_BIG, framing=name.split("+")[0], head=16 if "+head" in name else 0), "tflite"


@pytest.mark.parametrize("name", ["conv", "matmul+head", "onnx"])
def test_a_log_mel_model_over_the_cost_cap_keeps_its_front_end_in_float(name: str) -> None:
    # The front end is the model (or all of it but a dense head of 25K multiply-adds): over
    # 8M multiply-adds and over a quarter of the model, it stayed on the chip and missed the
    # target at every step (0.23 int8, 0.32 after the int16 steps).
    model, kind = _whole_model_case(name)
    graph = optimize(load_model(model, kind=kind))
    assert graph.macs() > MAX_FRONT_END_MACS
    samples = _BIG["frames"] * _BIG["window"]
    q = to_int8_graph(model, audio(12, samples, 1), kind=kind)
    fidelity = q.metadata["fidelity"]
    assert [s["step"] for s in fidelity["steps"]][:2] == ["int8", "int8 + CPU front end"], fidelity
    assert not fidelity["missed"], fidelity
    moved = [layer.split()[0] for layer in fidelity["cpu_float"]["layers"]]
    assert "LOG" in moved and moved.count("FULLY_CONNECTED") + moved.count("CONV_2D") == 2
    assert "the front end is the model" in fidelity["cpu_float"]["reason"]
    assert "multiply-adds per inference on the CPU" in fidelity["cpu_float"]["reason"]
    (out,) = graph.outputs
    assert output_scores(graph, q, audio(3, samples, 99))[out] >= 0.99


def test_a_log_that_is_the_models_output_is_seen_magnifying_its_input_grid() -> None:
    # The quantized graph names the last op's output y_int8 (a DEQUANTIZE makes y): the blame
    # looked the log up by its float name, found no error, and the front end stayed on the chip.
    model = log_mel_tflite(decibels=False)
    q = to_int8_graph(model, audio(12, 24 * 64, 1))
    fidelity = q.metadata["fidelity"]
    assert fidelity["chosen"] == "int8 + CPU front end" and not fidelity["missed"], fidelity
    assert fidelity["cpu_float"]["layers"][-1] == "LOG log_mel"


def test_npu_compile_report_places_the_front_end_kept_in_float_on_the_cpu(tmp_path, capsys) -> None:
    # --report placed the source model's operators before the escalation moved any: the
    # whole model on the CPU read "7 ops on the NPU in 1 partition(s), 0 on the CPU".
    model, calibration = tmp_path / "log_mel.tflite", tmp_path / "audio.npy"
    model.write_bytes(log_mel_tflite(decibels=False))
    np.save(calibration, np.concatenate([clip for (clip,) in audio(12, 24 * 64, 1)]))
    assert main(["compile", str(model), "--calibration", str(calibration), "-o", str(tmp_path / "m.nlb"),
                 "--report", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(None, 3) for line in out[out.index("placement of"):out.index("summary:")].splitlines()[2:]]
    assert [row[1:3] for row in rows] == [["RESHAPE", "CPU"], ["CONV_2D", "CPU"], ["SQUARE", "CPU"], ["RESHAPE", "CPU"],
                                         ["FULLY_CONNECTED", "CPU"], ["MAXIMUM", "CPU"], ["LOG", "CPU"]]
    assert all("kept in float on the CPU" in row[3] and "the front end is the model" in row[3] for row in rows)
    assert "summary: 0 ops on the NPU in 0 partition(s), 7 on the CPU" in out


# A front end over the cost cap that is not the whole model: a log-mel an audio classifier
# ships inside (78% of its multiply-adds, a CNN head doing the rest)

def test_a_log_mel_that_is_most_of_a_classifier_goes_to_the_cpu_when_int16_does_not_hold_it() -> None:
    # Over 8M multiply-adds and a quarter of the model, under 99% of it: the front end stayed
    # on the chip and the classes scored 0.61 at int8, 0.95 after every step (0.94 unseen).
    model = log_mel_tflite(**_BIG, conv_head=16)
    graph = optimize(load_model(model, kind="tflite"))
    samples = _BIG["frames"] * _BIG["window"]
    q = to_int8_graph(model, audio(12, samples, 1), kind="tflite")
    fidelity = q.metadata["fidelity"]
    assert [s["step"] for s in fidelity["steps"]] == ["int8", "int8 + CPU front end"], fidelity
    assert not fidelity["missed"], fidelity
    moved = fidelity["cpu_float"]["layers"]
    assert moved[-1] == "LOG log_mel" and not any("conv1" in layer or "classes" in layer for layer in moved)
    reason = fidelity["cpu_float"]["reason"]     # what int16 scored on the front end, what the CPU does
    assert "int16 on the front end alone scored 0." in reason, reason
    assert "13.4M multiply-adds per inference on the CPU (78.1% of the model's)" in reason, reason
    assert output_scores(graph, q, audio(3, samples, 99))["classes"] >= 0.99


def _backbone_ending_in_a_log() -> bytes:
    """Two dense layers, their output squared, floored at 1e-3 and its log, a dense head:
    the log magnifies int8's error (the squares span 1e-6 to 10), int16 holds it."""
    rng = np.random.default_rng(0)
    consts = {"w1": rng.standard_normal((32, 64)) / np.sqrt(32), "w2": rng.standard_normal((64, 32)) / 8,
              "w3": rng.standard_normal((32, 4)) / np.sqrt(32), "eps": 1e-3}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["f"]), helper.make_node("Mul", ["f", "f"], ["e"]),
             helper.make_node("Max", ["e", "eps"], ["floored"]), helper.make_node("Log", ["floored"], ["l"]),
             helper.make_node("MatMul", ["l", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "backbone_log", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _normal(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 32)).astype(np.float32)] for _ in range(count)]


@pytest.mark.parametrize("name", ["backbone", "log-mel"])
def test_over_the_cost_cap_a_front_end_moves_only_when_int16_does_not_hold_it(name: str, monkeypatch) -> None:
    # The cap made small (as if both were large models): the measurement alone decides. The
    # backbone's log magnifies int8's error as the log-mel's does, but int16 holds its values.
    monkeypatch.setattr(cpu_float, "MAX_FRONT_END_MACS", 0)
    monkeypatch.setattr(cpu_float, "MAX_FRONT_END_SHARE", 0.0)
    model, kind, data = (_backbone_ending_in_a_log(), "onnx", _normal(16, 1)) if name == "backbone" else \
        (log_mel_tflite(), "tflite", audio(16, 24 * 64, 1))
    graph = optimize(load_model(model, kind=kind))
    calibration, held = split_held_out(data)
    q = to_int8_graph(graph, calibration, recipe="fast")
    need = required_score(0.99, len(held))
    magnifying = "l" if name == "backbone" else "log_mel"
    assert list(amplified_layers(errors_by_float_name(graph, q, held), graph)) == [magnifying]
    blamed = front_end_blamed(graph, q, held, calibration=calibration, need=need)
    if name == "backbone":
        assert blamed == []
    else:
        assert blamed[0].tensor == "log_mel" and blamed[0].int16_score is not None and blamed[0].int16_score < need
