"""Channel equalization (``equalize=True``, in ``--recipe accurate``): a channel that its
tensor's per-tensor grid starves is lifted, and the next (depthwise) layer divides it back."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from libnpu.compiler import equalization
from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import quantize_model
from tests.support import model_builders as builders

SHAPE = (1, 3, 12, 12)
QUIET = 1 / 400     # how far below the others the starved channel stays


def starved_channel(activation: str = "Relu", seed: int = 11, second_reader: bool = False) -> onnx.ModelProto:
    """Conv (3 -> 8) + activation whose channel 0 stays ~400x below the others, a depthwise
    conv that multiplies it back by 400 (batch norm folded into it, as in mediapipe's
    pose_landmark_full), then a 1x1 conv. ``second_reader``: the first conv's output is
    also read by an Add (no pair to equalize)."""
    b = builders._Builder(seed)
    w1 = b.rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5
    b1 = b.rng.normal(0.5, 0.1, 8).astype(np.float32)
    w1[0] *= QUIET
    b1[0] *= QUIET
    dw = b.rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    dw[0] /= QUIET
    b.node("Conv", ["x", b.const("w1", w1), b.const("b1", b1)], "c1", pads=[1, 1, 1, 1])
    if activation == "Relu6":
        b.node("Clip", ["c1", b.const("lo", np.float32(0)), b.const("hi", np.float32(6))], "a1")
    else:
        b.node(activation, ["c1"], "a1")
    b.node("Conv", ["a1", b.const("dw", dw), b.weight("bd", 8, scale=.1)], "d1", pads=[1, 1, 1, 1], group=8)
    b.node("Relu", ["d1"], "r2")
    head = "r2"
    if second_reader:
        head = b.node("Add", ["r2", "a1"], "sum")
    b.node("Conv", [head, b.weight("w3", 4, 8, 1, 1), b.weight("b3", 4, scale=.1)], "y")
    return b.model("starved_channel", {"x": list(SHAPE)}, {"y": [1, 4, 12, 12]})


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(0, 1, SHAPE).astype(np.float32)] for _ in range(count)]


def _first_conv_output(g) -> str:
    return next(op for op in g.ops if op.type == "CONV_2D").outputs[0]


def _channel_max(g, name: str, data) -> np.ndarray:
    run = FloatInterpreter(g)
    return np.max([np.abs(run.run(f, keep=[name])[name]).reshape(-1, 8).max(0) for f in data], axis=0)


@pytest.mark.parametrize("activation", ["Relu", "Relu6"])
def test_equalized_graph_computes_the_same_function_with_the_quiet_channel_lifted(activation: str) -> None:
    g = optimize(import_onnx(starved_channel(activation)))
    pairs = equalization.equalization_pairs(g)
    assert [(a.type, b.type) for a, b in pairs] == [("CONV_2D", "DEPTHWISE_CONV_2D")]
    calibration, held_out = _data(6, 1), _data(4, 2)
    eq = equalization.equalize(g, calibration)
    assert eq.metadata["equalized_channels"] == 1            # only the quiet channel is worth lifting
    lifted = _first_conv_output(g)
    before, after = _channel_max(g, lifted, calibration), _channel_max(eq, lifted, calibration)
    assert before[0] < before.max() / 100
    assert after[0] == pytest.approx(before.max() / equalization.HEADROOM, rel=1e-4)
    np.testing.assert_allclose(after[1:], before[1:])         # the others untouched
    for feed in held_out:
        out = g.outputs[0]
        want, got = FloatInterpreter(g).run(feed)[out], FloatInterpreter(eq).run(feed)[out]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert "equalized_channels" not in g.metadata            # the graph given is not changed


def test_equalization_takes_the_starved_channels_error_out_of_the_int8_graph() -> None:
    model = import_onnx(starved_channel())
    g = optimize(model)
    calibration, held_out = _data(8, 3), _data(4, 4)
    plain = quantize_model(model, calibration)
    lifted = quantize_model(model, calibration, equalize=True)
    assert lifted.metadata["calibration"]["equalized_channels"] == 1
    assert "equalized_channels" not in plain.metadata["calibration"]
    out = g.outputs[0]
    before, after = output_scores(g, plain, held_out)[out], output_scores(g, lifted, held_out)[out]
    assert 1 - after < (1 - before) / 4, (before, after)


def test_mixed_precision_measures_against_the_equalized_float_graph() -> None:
    model = import_onnx(starved_channel())
    calibration = _data(6, 5)
    q = to_int8_graph(model, calibration, recipe="accurate", equalize=True, int16_target=0.9999, layer_report=True)
    assert q.metadata["calibration"]["equalized_channels"] == 1
    g = optimize(model)
    out = g.outputs[0]
    reached = q.metadata["int16_output_score"][out]
    assert output_scores(g, q, calibration)[out] == pytest.approx(reached, abs=1e-6)
    # Per layer, the lifted tensor is compared with the lifted float tensor (against the
    # graph before equalization its channel 0 would be 100 times off).
    row = next(r for r in q.metadata["layer_errors"] if r["tensor"] == _first_conv_output(g))
    assert row["sqnr_db"] > 30 and row["cosine"] > 0.999


def test_no_pair_where_the_rescaling_would_not_cancel() -> None:
    # The first conv's output also goes to an Add: dividing it back in the depthwise layer
    # would not cover the Add.
    g = optimize(import_onnx(starved_channel(second_reader=True)))
    assert equalization.equalization_pairs(g) == []
    # A fused activation that does not commute with a positive scale (sigmoid).
    g = optimize(import_onnx(starved_channel("Sigmoid")))
    assert equalization.equalization_pairs(g) == []
    # Followed by an ungrouped conv (its weights are per output channel, not per input
    # channel: dividing one input channel would cost its precision): no pair.
    g = optimize(import_onnx(builders.outlier_channel()))
    assert equalization.equalization_pairs(g) == []
    assert equalization.equalize(g, _data(1, 6)).metadata["equalized_channels"] == 0


def test_channel_scales() -> None:
    top = 6.0
    maxima = np.array([top, top / 2, top / 5, top / 100, 0.0, top * 1e-9])
    s = equalization.channel_scales(maxima)
    h = equalization.HEADROOM
    assert s[0] == s[1] == 1.0                  # within reach of the widest
    assert s[2] == 1.0                          # top / 5: lifting by 5 / HEADROOM < MIN_SCALE is not worth it
    assert s[3] == pytest.approx(100 / h)
    assert s[4] == 1.0                          # always zero: nothing to lift
    assert s[5] == equalization.MAX_SCALE
