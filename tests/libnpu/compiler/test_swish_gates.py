"""Equalization through a hard-swish (:mod:`libnpu.compiler.swish_gates`): a
``conv -> HardSwish -> a*h + b -> depthwise`` block whose depthwise layer amplifies a
channel the int8 grids starve (PP-LCNetV3, PP-OCR's text detectors) keeps it at int8."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from libnpu.compiler import swish_gates as gates
from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import quantize_model
from tests.support import model_builders as builders

SHAPE = (1, 3, 12, 12)
QUIET = 1 / 100     # how far below the others the starved channel stays


def swish_block(seed: int = 7, affine: bool = True, quiet: float = QUIET, tap: str = "") -> onnx.ModelProto:
    """Conv (3 -> 8, channel 0 ``quiet`` times the others, mostly below -3 in the others)
    -> HardSwish -> (``affine``: * 0.7 + -0.2, PP-LCNetV3's learnable affine block) ->
    depthwise conv whose edge filter multiplies channel 0 by about 10 / ``quiet`` -> ReLU
    -> 1x1 conv.
    ``tap``: the depthwise input is also read by a 1x1 "Conv" or by an "Add"."""
    b = builders._Builder(seed)
    w1 = b.rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 2.0
    b1 = b.rng.normal(-4.0, 1.0, 8).astype(np.float32)
    w1[0] *= quiet
    b1[0] = 0.0
    dw = b.rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.01
    dw[0] = (dw[0] - dw[0].mean()) * 10 / quiet    # an edge filter: what it amplifies is how channel 0 moves
    b.node("Conv", ["x", b.const("w1", w1), b.const("b1", b1)], "c1", pads=[1, 1, 1, 1])
    h = b.node("HardSwish", ["c1"], "h1")
    if affine:
        m = b.node("Mul", [h, b.const("a", np.array([0.7], np.float32))], "m1")
        h = b.node("Add", [m, b.const("bb", np.array([-0.2], np.float32))], "z1")
    b.node("Conv", [h, b.const("dw", dw), b.weight("bd", 8, scale=.1)], "d1", pads=[1, 1, 1, 1], group=8)
    b.node("Relu", ["d1"], "r2")
    head = "r2"
    if tap == "Conv":
        b.node("Conv", [h, b.weight("wt", 8, 8, 1, 1), b.weight("bt", 8, scale=.1)], "t1")
        head = b.node("Add", ["r2", "t1"], "sum")
    elif tap == "Add":
        head = b.node("Add", ["r2", h], "sum")
    b.node("Conv", [head, b.weight("w3", 4, 8, 1, 1), b.weight("b3", 4, scale=.1)], "y")
    return b.model("swish_block", {"x": list(SHAPE)}, {"y": [1, 4, 12, 12]}, opset=14)


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, SHAPE).astype(np.float32)] for _ in range(count)]


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("tap", ["", "Conv"])
def test_gated_graph_computes_the_same_function(affine: bool, tap: str) -> None:
    g = optimize(import_onnx(swish_block(affine=affine, tap=tap)))
    chains = gates.gate_chains(g)
    assert [(c.producer.type, c.swish.type, len(c.affine), [r.type for r in c.readers]) for c in chains] == \
        [("CONV_2D", "HARD_SWISH", 2 if affine else 0, ["DEPTHWISE_CONV_2D", *(["CONV_2D"] if tap else [])])]
    gated = gates.gate_swishes(g, _data(6, 1))
    assert gated.metadata[gates.GATED] == 1
    assert not any(op.type == "HARD_SWISH" for op in gated.ops)
    (floor,) = gated.metadata[gates.RANGE_FLOORS].values()
    assert floor < 0
    out = g.outputs[0]
    for feed in _data(3, 2):
        want, got = FloatInterpreter(g).run(feed)[out], FloatInterpreter(gated).run(feed)[out]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert gates.GATED not in g.metadata                     # the graph given is not changed


def test_int8_keeps_the_channel_the_depthwise_layer_amplifies() -> None:
    # Before: the conv output's, the hard-swish's and the affine's int8 grids gave the quiet
    # channel a step or two, which the depthwise layer amplified (output cosine 0.981).
    model = import_onnx(swish_block())
    g = optimize(model)
    q = quantize_model(model, _data(8, 3))                   # int8, the quantizer's defaults
    assert q.metadata["calibration"][gates.GATED] == 1
    score = output_scores(g, q, _data(4, 4))[g.outputs[0]]
    assert score > 0.995, score


def test_blocks_left_alone() -> None:
    # Channels already alike: nothing to lift, the block stays as it was.
    g = optimize(import_onnx(swish_block(quiet=1.0)))
    assert len(gates.gate_chains(g)) == 1
    assert gates.gate_swishes(g, _data(4, 5)).metadata[gates.GATED] == 0
    # The depthwise input is also read by an Add: a division in the weights cannot cover it.
    assert gates.gate_chains(optimize(import_onnx(swish_block(tap="Add")))) == []
