"""What kept Silero VAD (an STFT as a 1-D conv, its magnitude, an LSTM cell with its state as
inputs and outputs, a sigmoid speech probability) off the bar with default options, one
rule each on small onnx.helper models: the magnitude as REDUCE_L2, layers reused by output
tensor between escalation steps, small outputs scored against their range over all held-out
samples, float-to-float Casts as no op, and bias correction on a stateful LSTM."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from libnpu.compiler.escalation import _reusing, held_out_scores
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import quantize_model
from tests.support.rnn_models import rnn_model

BINS, FRAMES = 16, 4


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _magnitude_model() -> onnx.ModelProto:
    """``sqrt(re^2 + im^2)`` of an STFT output [1, 2 * BINS, FRAMES] split in halves, as
    Silero VAD's export writes it (Slice, Pow 2, Add, Sqrt)."""
    consts = [nh.from_array(np.array(v, np.int64), n) for n, v in
              (("lo", [0]), ("mid", [BINS]), ("hi", [2 * BINS]), ("ax", [1]))]
    two = nh.from_array(np.array(2.0, np.float32), "two")
    nodes = [h.make_node("Slice", ["x", "lo", "mid", "ax"], ["re"]),
             h.make_node("Slice", ["x", "mid", "hi", "ax"], ["im"]),
             h.make_node("Pow", ["re", "two"], ["re2"]), h.make_node("Pow", ["im", "two"], ["im2"]),
             h.make_node("Add", ["re2", "im2"], ["power"]), h.make_node("Sqrt", ["power"], ["y"])]
    return _model(nodes, [("x", [1, 2 * BINS, FRAMES])], [("y", [1, BINS, FRAMES])], [*consts, two])


def _spectra(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """A few loud bins, most of them quiet: the magnitudes a grid of squares loses."""
    rng = np.random.default_rng(seed)
    loud = np.where(np.arange(2 * BINS) % BINS < 2, 10.0, 0.15)[None, :, None]
    return [{"x": (rng.standard_normal((1, 2 * BINS, FRAMES)) * loud).astype(np.float32)} for _ in range(count)]


def test_a_magnitude_is_an_l2_norm_of_exact_squares() -> None:
    g = optimize(import_onnx(_magnitude_model()))
    assert [op.type for op in g.ops].count("REDUCE_L2") == 1
    assert not {"SQRT", "MUL", "ADD"} & {op.type for op in g.ops}
    feed = _spectra(1, 5)[0]
    x = feed["x"].astype(np.float64)
    want = np.sqrt(x[:, :BINS] ** 2 + x[:, BINS:] ** 2)
    np.testing.assert_allclose(FloatInterpreter(g).run(feed)["y"], want, rtol=1e-5)
    # every layer int16: the quiet bins keep their magnitude (before, a grid of squares from
    # 0 to 200 left them a step or two: cosine 0.92-0.96 on the quiet part)
    q = _all_int16(import_onnx(_magnitude_model()), _spectra(16, 6))
    quiet = np.arange(BINS) >= 2
    for feed in _spectra(4, 7):
        got = FloatInterpreter(q).run(feed)["y"][0, quiet].reshape(-1)
        ref = FloatInterpreter(g).run(feed)["y"][0, quiet].reshape(-1)
        assert np.dot(got, ref) / np.linalg.norm(got) / np.linalg.norm(ref) > 0.999


def _all_int16(g, data, **options):
    """``g`` quantized with int16 activations on every op the chip runs in int16."""
    names = [op.outputs[0] for op in quantize_model(g, data).ops if promotable(op)]
    return quantize_mixed(g, data, int16=",".join(names), **options)


def _conv1d_model() -> onnx.ModelProto:
    """A 1-D conv whose op the importer names as the TRANSPOSE's output after it ("c")."""
    rng = np.random.default_rng(3)
    w = nh.from_array(rng.standard_normal((6, 2, 3)).astype(np.float32), "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]), h.make_node("Tanh", ["c"], ["y"])]
    return _model(nodes, [("x", [1, 2, 12])], [("y", [1, 6, 12])], [w])


def test_the_next_escalation_step_promotes_the_same_layers() -> None:
    g = import_onnx(_conv1d_model())
    rng = np.random.default_rng(4)
    data = [{"x": rng.standard_normal((1, 2, 12)).astype(np.float32)} for _ in range(4)]
    first = _all_int16(g, data)
    assert first.metadata["int16_layers"].count("c") == 2        # the CONV_2D and the TRANSPOSE
    again = quantize_mixed(g, data, **_reusing({"int16": "auto"}, first.metadata, {}))
    convs = [next(op for op in q.ops if op.type == "CONV_2D") for q in (first, again)]
    assert [q.tensors[c.outputs[0]].dtype for q, c in zip((first, again), convs)] == ["int16", "int16"]
    assert sorted(first.metadata["int16_layers"]) == sorted(again.metadata["int16_layers"])


def test_a_small_output_is_scored_against_its_range_over_the_samples() -> None:
    """One sample near 0 (a silent window) and one near 1: an error of 0.002 is 0.2% of the
    output's range, not 67% of the silent sample's value."""
    def model(bias: float) -> onnx.ModelProto:
        w = nh.from_array(np.full((4, 1), 0.25, np.float32), "w")
        b = nh.from_array(np.array([bias], np.float32), "b")
        return _model([h.make_node("Gemm", ["x", "w", "b"], ["y"])], [("x", [1, 4])], [("y", [1, 1])], [w, b])
    exact, off = (optimize(import_onnx(model(b))) for b in (0.0, 0.002))
    data = [{"x": np.full((1, 4), v, np.float32)} for v in (0.003, 0.9)]
    assert held_out_scores(exact, off, data)["y"] > 0.99


def test_bias_correction_runs_an_lstm_whose_state_it_carries() -> None:
    model = rnn_model("LSTM", steps=1, outputs=("Y_h", "Y_c"), initial="input")
    rng = np.random.default_rng(8)
    data = [{"X": rng.standard_normal((1, 1, 5)).astype(np.float32)} for _ in range(6)]
    q = to_int8_graph(model.SerializeToString(), data, kind="onnx", states={"h0": "Y_h", "c0": "Y_c"},
                      recipe="fast", bias_correction=True)
    assert q.metadata["calibration"]["bias_correction"]
    assert {s.input for s in q.states} == {"h0", "c0"}


def test_a_cast_to_the_type_it_has_is_no_op() -> None:
    """Silero VAD's opset-15 export casts its STFT's float slices to float: three Cast
    nodes on the CPU before, splitting the model into four partitions."""
    nodes = [h.make_node("Cast", ["x"], ["same"], to=TensorProto.FLOAT), h.make_node("Relu", ["same"], ["y"])]
    g = import_onnx(_model(nodes, [("x", [1, 4])], [("y", [1, 4])]))
    assert [op.type for op in g.ops] == ["RELU"]
