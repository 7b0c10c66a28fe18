"""What the default compile's fidelity is measured and chosen on, so the figure it prints
holds on inputs calibration never saw (``benchmarks/fidelity_gap.py`` measures the gap on
real models): a small raw output's grid reaches the sign calibration never showed, and the
int16 search ranks layers on calibration samples, leaving the held-out ones to confirm."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.accuracy import quantized_feed
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize


def _presence_logit():
    """One raw logit: +0.1 x the first 8 inputs, -0.1 x the last 8 (a Gemm, no activation)."""
    w = np.concatenate([np.full(8, 0.1), np.full(8, -0.1)]).astype(np.float32).reshape(16, 1)
    return import_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["logit"])], "presence",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(1, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 17)]))


def _inputs(count: int, sign: float, seed: int) -> list[list[np.ndarray]]:
    """Inputs in [-1, 1] whose logit has the given sign (the same values, halves swapped)."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        low, high = rng.uniform(-1, 0, 8), rng.uniform(0, 1, 8)
        feeds.append([np.concatenate([high, low] if sign > 0 else [low, high]).astype(np.float32)[None]])
    return feeds


def test_a_small_raw_output_reaches_the_sign_calibration_never_saw() -> None:
    """A presence logit negative on every calibration sample (no face in any texture) had
    an int8 grid ending at 0: the first positive logit came out 0, as far off as its value,
    where held-out samples of the same kind measured it exact. Its grid now reaches its
    largest calibrated magnitude on both sides: within the bar's 0.05 either way."""
    graph = _presence_logit()
    q = to_int8_graph(graph, _inputs(10, -1.0, 0), recipe="fast")
    float_graph = optimize(graph)
    want, got = FloatInterpreter(float_graph), FloatInterpreter(q)
    name = q.outputs[0]
    for feed in _inputs(6, +1.0, 1) + _inputs(2, -1.0, 2):
        value = got.run(quantized_feed(q, float_graph, feed))[name]
        t = q.tensors[name]
        value = t.quant.dequantize(value) if t.quant is not None and t.dtype != "float32" else value
        expected = float(want.run(feed)["logit"].ravel()[0])
        assert abs(float(np.ravel(value)[0]) - expected) <= 0.05, (expected, value)


def _two_class_head():
    """Two logits, 4 x the sum of each half of 16 inputs, then a softmax (2 values)."""
    w = np.zeros((16, 2), np.float32)
    w[:8, 0], w[8:, 1] = 4.0, 4.0
    return import_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=-1)],
        "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(2, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 17)]))


def test_small_logits_are_judged_by_the_probability_they_can_move() -> None:
    """Logits around +-30 scored relative to their magnitude passed int8 (0.987, over the
    0.98 asked on eight samples for a target of 0.97) while every held-out sample was sure
    of its class (the probability exact): an unseen input where the two classes are close
    came out 0.061 off, over the bar's 0.05. Scored as the probability they can move where
    it is not saturated (a quarter of the spread of their errors, on the bar's absolute
    scale), int8 misses and int16 holds it."""
    rng = np.random.default_rng(0)

    def feed(first: float, second: float) -> list[np.ndarray]:
        return [np.concatenate([rng.uniform(0.6, 1, 8) * first, rng.uniform(0.6, 1, 8) * second])
                .astype(np.float32)[None]]

    graph = _two_class_head()
    q = to_int8_graph(graph, [feed(1, -1) if i % 2 else feed(-1, 1) for i in range(40)], target=0.97)
    fidelity = q.metadata["fidelity"]
    assert fidelity["steps"][0]["logits"]["y"] < fidelity["required"] and fidelity["chosen"] != "int8"
    float_graph = optimize(graph)
    want, got = FloatInterpreter(float_graph), FloatInterpreter(q)
    t = q.tensors[q.outputs[0]]
    for x in [feed(1, 1) for _ in range(6)] + [feed(-1, -1) for _ in range(6)]:
        value = got.run(quantized_feed(q, float_graph, x))[q.outputs[0]]
        value = t.quant.dequantize(value) if t.quant is not None and t.dtype != "float32" else value
        assert float(np.abs(np.ravel(value) - want.run(x)["y"].ravel()).max()) <= 0.05


def _location_model(spelled: bool = False):
    """A location model: (latitude, longitude, week) -> 512 sigmoid scores through two ReLU
    layers; ``spelled``: the sigmoid written out as BirdNET's location models write it,
    ``1 / (1 + exp(-0.5 * clip(z, -15, 15)))``."""
    rng = np.random.default_rng(1)
    weights = {"w1": rng.standard_normal((3, 64)) * 2, "b1": rng.standard_normal(64),
               "w2": rng.standard_normal((64, 64)) * 0.3, "b2": rng.standard_normal(64) * 0.3,
               "w3": rng.standard_normal((64, 512)) * 0.5, "b3": rng.standard_normal(512) - 3}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Gemm", ["r2", "w3", "b3"], ["z"])]
    if spelled:
        weights.update(lo=np.array(-15.0), hi=np.array(15.0), k=np.array(-0.5), one=np.array(1.0))
        nodes += [helper.make_node("Clip", ["z", "lo", "hi"], ["c"]), helper.make_node("Mul", ["c", "k"], ["m"]),
                  helper.make_node("Exp", ["m"], ["e"]), helper.make_node("Add", ["e", "one"], ["d"]),
                  helper.make_node("Div", ["one", "d"], ["y"])]
    else:
        nodes.append(helper.make_node("Sigmoid", ["z"], ["y"]))
    return import_onnx(helper.make_model(helper.make_graph(
        nodes, "location", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]),
        opset_imports=[helper.make_opsetid("", 17)]))


def _worst_unseen_cosine(graph, q, points) -> float:
    """The worst cosine of ``q`` against the float ``graph`` on ``points`` (float simulation)."""
    float_graph = optimize(graph)
    want, got = FloatInterpreter(float_graph), FloatInterpreter(q)
    t = q.tensors[q.outputs[0]]
    worst = 1.0
    for x in points:
        value = np.ravel(got.run(quantized_feed(q, float_graph, x))[q.outputs[0]]).astype(np.float64)
        value = t.quant.dequantize(value) if t.quant is not None and t.dtype != "float32" else value
        ref = want.run(x)[float_graph.outputs[0]].ravel().astype(np.float64)
        worst = min(worst, float(ref @ value / np.linalg.norm(ref) / np.linalg.norm(value)))
    return worst


def test_a_small_input_space_is_judged_past_the_held_out_points() -> None:
    """A location model calibrated on 30 points of a box kept int8 (0.9997 on its six
    held-out points) and scored 0.93 on points half as far again from the box's centre.
    Its inputs are three values, so the held-out points are judged with such points too
    (never calibrated on): int8 misses there, the int16 step's headroom holds them."""
    rng = np.random.default_rng(2)
    graph = _location_model()
    q = to_int8_graph(graph, [[rng.uniform(-1, 1, (1, 3)).astype(np.float32)] for _ in range(30)])
    fidelity = q.metadata["fidelity"]
    assert fidelity["chosen"] != "int8" and fidelity.get("extrapolated") == fidelity["samples"] == 6
    assert _worst_unseen_cosine(graph, q, [[rng.uniform(-1.5, 1.5, (1, 3)).astype(np.float32)]
                                           for _ in range(12)]) >= 0.98


def test_a_sigmoid_written_out_is_one_logistic_on_the_chip() -> None:
    """BirdNET's location models write their sigmoid out (``1 / (1 + exp(-0.5 * clip(z)))``):
    op by op the EXP's int8 grid (step ~7 over e^7.5) makes every score over ~0.22 a 1, the next
    0.12, and neither EXP nor DIV has an int16 kernel: the real models scored 0.83 on their
    held-out points with int16 activations on 32 layers (escalation capped), 0.88-0.91 on unseen ones;
    this one went to the CPU whole ("the front end is the model"). As one LOGISTIC it stays
    on the chip, judged on its logits, and unseen points hold."""
    rng = np.random.default_rng(3)
    graph = _location_model(spelled=True)
    q = to_int8_graph(graph, [[rng.uniform(-1, 1, (1, 3)).astype(np.float32)] for _ in range(30)])
    assert "cpu_float" not in q.metadata and "HOST" not in q.op_counts()
    assert q.producers()[q.outputs[0]].type in ("LOGISTIC", "DEQUANTIZE") and "EXP" not in q.op_counts()
    assert q.metadata["fidelity"].get("logits")      # judged as a probability on its logits
    assert _worst_unseen_cosine(graph, q, [[rng.uniform(-1, 1, (1, 3)).astype(np.float32)]
                                           for _ in range(12)]) >= 0.98
