"""Per-channel int16 activation grids (``int16_grid="per_channel"``): which tensors get
them, folding into the weights, the chip's per-channel ADD / PRELU in the loadable, the
device following the compiler's simulation and beating per-tensor grids against float,
and int8 graphs untouched."""
from __future__ import annotations

import numpy as np
import pytest

import libnpu
from libnpu.compiler.channel_grids import (
    CHANNEL_MARGIN,
    CHANNEL_SPREAD,
    MIN_CHANNEL_RATIO,
    channel_quant,
    spread_limited,
)
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import MixedPrecisionError, promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.tflite_export import TFLiteExportError, export_tflite
from npu_hw import ops as spec_ops
from tests.support import model_builders as builders

SHAPE = (1, 3, 8, 8)
WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
# The trunk's activations between its first conv and its output conv (graph output: per tensor).
TRUNK = ["c1", "p1", "c2", "a1", "d1", "m1", "q1", "c3", "a2"]


def _data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(SHAPE).astype(np.float32)] for _ in range(count)]


@pytest.fixture(scope="module")
def trunk():
    graph = import_onnx(builders.channel_trunk())
    data = _data(8, 0)
    q8 = quantize_mixed(graph, data, int16="none")
    every = [op.name for op in q8.ops if promotable(op)]
    weighted = [op.name for op in q8.ops if op.type in WEIGHTED]
    grids = {grid: quantize_mixed(graph, data, int16=every, int16_weights=weighted, int16_grid=grid)
             for grid in ("per_tensor", "per_channel")}
    return graph, q8, grids


def _per_channel(q) -> list[str]:
    return [n for n, t in q.tensors.items() if t.dtype == "int16" and not t.is_constant and t.quant.per_channel]


def _opcodes(q) -> dict[str, int]:
    return {t.name: t.opcode for t in lower(q).tasks}


def test_the_trunk_gets_per_channel_grids_and_the_edges_stay_per_tensor(trunk) -> None:
    graph, _, grids = trunk
    pc, pt = grids["per_channel"], grids["per_tensor"]
    assert sorted(_per_channel(pc)) == sorted(TRUNK) and _per_channel(pt) == []
    assert pc.metadata["int16_grid"] == "per_channel" and pc.metadata["int16_per_channel_tensors"] == len(TRUNK)
    assert "int16_grid" not in pt.metadata and "int16_channel_peaks" not in pc.metadata
    for name in (*pc.inputs, *pc.outputs, "y", "x_int8__int16"):   # the edges, and what a TRANSPOSE reads
        assert pc.tensors[name].quant is None or not pc.tensors[name].quant.per_channel, name
    # the narrow channels (4..7 of c1) get finer steps; padding channels take the widest step
    c1 = pc.tensors["c1"].quant
    assert c1.axis == 3 and c1.scale[4:].max() < c1.scale[:4].min() / 5
    q1, m1 = pc.tensors["q1"].quant.scale, pc.tensors["m1"].quant.scale
    np.testing.assert_array_equal(q1[:8], m1)
    assert np.all(q1[8:] == m1.max())
    assert pc.tensors["m1"].quant is not None and np.array_equal(m1, pc.tensors["d1"].quant.scale)
    # ADD and PRELU run on the chip's per-channel descriptors, the rest on the usual ones
    codes, plain = _opcodes(pc), _opcodes(pt)
    assert codes["a1"] == codes["a2"] == spec_ops.OP_ADD16_PER_CHANNEL
    assert codes["p1"] == spec_ops.OP_PRELU16_PER_CHANNEL
    assert plain["a1"] == spec_ops.OP_ADD and plain["p1"] == spec_ops.OP_PRELU
    assert {k: v for k, v in codes.items() if k not in ("a1", "a2", "p1")} == \
        {k: v for k, v in plain.items() if k not in ("a1", "a2", "p1")}


def test_folded_weights_keep_the_real_weights(trunk) -> None:
    """The depthwise layer's int8 weights could keep their integers: only their scales took
    the input's; the int16 conv weights were requantized from float weights times the input
    scales. Either way the simulation's real weights are the float graph's (to a step)."""
    graph, _, grids = trunk
    pc, pt = grids["per_channel"], grids["per_tensor"]
    float_graph = optimize(graph)
    sim = FloatInterpreter(pc)
    by_name = {op.name: k for k, op in enumerate(pc.ops)}
    for name in ("c2", "d1", "c3"):
        op = pc.ops[by_name[name]]
        real = sim._unfolded[by_name[name]]
        want = np.asarray(float_graph.tensors[op.inputs[1]].data, np.float32)
        step = np.abs(want).max() / 127
        assert np.abs(real - want).max() <= step, name
        assert pc.tensors[op.inputs[1]].dtype == pt.tensors[op.inputs[1]].dtype


def test_per_channel_on_the_device_follows_the_simulation_and_beats_per_tensor(npu, trunk) -> None:
    graph, _, grids = trunk
    reference = FloatInterpreter(optimize(graph))
    errors = {}
    for grid, q in grids.items():
        simulated = FloatInterpreter(q)
        step = float(q.tensors[q.outputs[0]].quant.scale[0]) if q.tensors[q.outputs[0]].quant else 0.0
        model = libnpu.load(lower(q), devroot=npu.devroot)
        try:
            worst = 0.0
            for x in _data(4, 7):
                got = model.infer(x)[0]
                want = reference.run(x)[graph.outputs[0]]
                worst = max(worst, float(np.abs(got - want).max()))
                sim = simulated.run(x)[q.outputs[0]]
                assert np.abs(got - sim).max() <= max(4 * step, 1e-3 * float(np.abs(sim).max())), grid
            errors[grid] = worst
        finally:
            model.close()
    assert errors["per_channel"] < errors["per_tensor"] / 2, errors


def test_int8_graphs_and_the_default_are_unchanged(trunk) -> None:
    graph, q8, grids = trunk
    data = _data(8, 0)
    again = quantize_mixed(graph, data, int16="none", int16_grid="per_channel")
    assert lower(again).tasks == lower(q8).tasks or \
        [t.payload for t in lower(again).tasks] == [t.payload for t in lower(q8).tasks]
    assert "int16_grid" not in again.metadata
    every = list(grids["per_tensor"].metadata["int16_layers"])
    plain = quantize_mixed(graph, data, int16=every)
    assert _per_channel(plain) == []


def test_channel_grids_without_int16_weights_stop_at_convolutions(trunk) -> None:
    """With int8 weights a conv or FC does not take a per-channel input (the fold would give
    a starved channel's weights fewer steps): what feeds one stays per tensor; the
    depthwise layer still takes one."""
    graph, q8, _ = trunk
    every = [op.name for op in q8.ops if promotable(op)]
    q = quantize_mixed(graph, _data(8, 0), int16=every, int16_grid="per_channel")
    # p1, q1 and a2 are read by convs with int8 weights, and d1 -> m1 -> q1 must share
    # q1's grid; c1 (read by the PRELU), c2 and c3 (ADDs) and a1 (the depthwise conv) keep theirs
    assert set(_per_channel(q)) == {"c1", "c2", "a1", "c3"}
    assert q.tensors["d1"].dtype == "int16" and not q.tensors["d1"].quant.per_channel


def test_errors_and_export(trunk) -> None:
    graph, _, _ = trunk
    with pytest.raises(MixedPrecisionError, match="int16 grid 'rows'"):
        quantize_mixed(graph, _data(2, 0), int16="c1", int16_grid="rows")
    q = quantize_mixed(graph, _data(4, 0), int16="c1,p1", int16_grid="per_channel")   # int8 weights
    assert _per_channel(q) == ["c1"]
    with pytest.raises(TFLiteExportError, match="per-channel int16 activations"):
        export_tflite(q)


def test_channel_quant_floors_dead_channels() -> None:
    q = channel_quant(np.array([0.0, 1.0, 4.0]), 2.0, 4)
    assert q.axis == 3 and q.scale.dtype == np.float32
    np.testing.assert_allclose(q.scale, np.array([8 * MIN_CHANNEL_RATIO, 2, 8]) / 32767, rtol=1e-6)


def test_channel_peaks_keep_a_margin_within_the_widest_channel() -> None:
    peaks = {"t": np.array([0.0, 0.01, 0.2, 1.0, 4.0])}
    got = spread_limited(peaks, spread=16.0, margin=2.0)["t"]
    # at least the widest / 16, twice its own peak, never beyond the widest channel's
    np.testing.assert_allclose(got, [0.25, 0.25, 0.4, 2.0, 4.0])
    np.testing.assert_allclose(spread_limited(peaks, 1.0, 1.0)["t"], [4.0] * 5)   # spread 1: per tensor
    assert CHANNEL_SPREAD >= 1 and CHANNEL_MARGIN >= 1


def test_channel_options_are_checked(trunk) -> None:
    graph, _, _ = trunk
    for option in (dict(int16_channel_spread=0.5), dict(int16_channel_margin="wide")):
        with pytest.raises(MixedPrecisionError, match="int16 channel"):
            quantize_mixed(graph, _data(2, 0), int16="c1", int16_grid="per_channel", **option)


def test_the_accuracy_report_measures_per_channel_layers(trunk) -> None:
    """Each layer's own error (folded weights divided back out) is no worse than with
    per-tensor grids: the report measures what the chip runs."""
    from libnpu.compiler.accuracy import layer_errors
    graph, _, grids = trunk
    data = _data(4, 3)
    pt, pc = (layer_errors(optimize(graph), grids[g], data) for g in ("per_tensor", "per_channel"))
    for name in (*TRUNK, "y"):
        assert pc[name].local_sqnr_db >= pt[name].local_sqnr_db - 0.5 > 40, name
