"""A 16x8 layer's requantization multiplier never flushes to 0 on the chip: a near-dead
depthwise channel (weights ~0, a bias) on a per-channel int16 input, whose fine channel
scale the int8 weights carry, output 0 on the chip where the float simulation the
escalation measures with kept its bias (paddleocr-en-v4-rec's escalated compile: 51
channels of 4 layers, some 0 on the chip where the simulation had -513 steps)."""
from __future__ import annotations

import numpy as np

from libnpu.compiler.accuracy import quantized_feed
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from npu_hw.fixedpoint import quantize_multiplier_array
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.model_builders import _Builder

SHAPE = (1, 3, 8, 8)


def _dead_depthwise_channel():
    """Conv (channels 2 and 3 twenty times narrower than 0 and 1), then a depthwise conv
    whose channel 2 has weights ~0 and a bias of ~300 steps of the output's int16 grid."""
    b = _Builder(21)
    gains = np.array([1, 1, .05, .05], np.float32)
    w1 = b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.4 * gains[:, None, None, None]
    dw = b.rng.standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.5
    dw[2] = 1e-12
    bias = np.array([0.1, -0.1, 0.07, 0.05], np.float32)
    b.node("Conv", ["x", b.const("w1", w1), b.weight("b1", 4, scale=.01)], "c1", pads=[1, 1, 1, 1])
    b.node("Conv", ["c1", b.const("dw", dw), b.const("bd", bias)], "y", pads=[1, 1, 1, 1], group=4)
    return b.model("dead_depthwise_channel", {"x": list(SHAPE)}, {"y": [1, 4, 8, 8]})


def test_the_chip_keeps_a_dead_channels_bias_as_the_simulation_does(tmp_path) -> None:
    graph = import_onnx(_dead_depthwise_channel())
    rng = np.random.default_rng(0)
    data = [[rng.standard_normal(SHAPE).astype(np.float32)] for _ in range(6)]
    q8 = quantize_mixed(graph, data, int16="none")
    q = quantize_mixed(graph, data, int16=[op.name for op in q8.ops if promotable(op)], int16_grid="per_channel")
    dw = next(op for op in q.ops if op.type == "DEPTHWISE_CONV_2D")
    assert q.tensors[dw.inputs[0]].quant.per_channel        # the case: a folded per-channel input
    assert q.tensors[dw.inputs[1]].dtype == "int8"
    out = q.tensors[dw.outputs[0]]
    multipliers, _ = quantize_multiplier_array(
        q.tensors[dw.inputs[1]].quant.scale.astype(np.float64) / out.quant.scale.astype(np.float64))
    assert np.all(multipliers != 0)                          # none flushed
    feed = quantized_feed(q, optimize(graph), data[0])
    sim = FloatInterpreter(q).run(feed)[q.outputs[0]]
    chip = run_loadable(ChipMemory(tmp_path), lower(q), [feed[n] for n in q.inputs])[0]
    diff = np.abs(np.asarray(sim, np.float64) - np.asarray(chip, np.float64))   # float outputs
    assert diff.max() <= 2 * float(out.quant.scale.max()), diff.max()    # within 2 steps of the int16 grid
