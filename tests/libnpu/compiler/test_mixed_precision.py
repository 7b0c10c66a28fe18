"""Mixed precision: int16 activations (a16w8) for chosen or automatically found layers,
compiled, run on the device and byte-identical to LiteRT BUILTIN_REF on the exported
.tflite (TFLite's 16x8 kernels)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import libnpu
from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import compile_model, lower
from libnpu.compiler.mixed_precision import (
    MixedPrecisionError,
    _goals,
    parse_selection,
    promotable,
    promote,
    quantize_mixed,
)
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import import_with_fallback
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from npu_hw import ops as spec_ops
from tests.support import model_builders as builders
from tests.support.rnn_models import cosine

CNN_SHAPE = (1, 3, 16, 16)
PROMOTED = ["c1", "c2", "c3", "a3", "p3", "c4", "logits", "prob"]  # conv, depthwise, add, max pool, FC, softmax


def _data(shape, count, seed):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(shape).astype(np.float32)] for _ in range(count)]


@pytest.fixture(scope="module")
def small_cnn():
    return import_onnx(builders.small_cnn())


def test_promoted_ops_get_int16_tensors_int64_bias_and_conversions(small_cnn) -> None:
    q8 = quantize_mixed(small_cnn, _data(CNN_SHAPE, 4, 0), int16="none")
    q = promote(q8, ["c1", "a3", "logits"], optimize(small_cnn))
    assert q.metadata["int16_layers"] == ["c1", "a3", "logits"]
    by_name = {op.name: op for op in q.ops}
    for name in ("c1", "a3", "logits"):
        op = by_name[name]
        for t in [q.tensors[i] for i in op.inputs if i and not q.tensors[i].is_constant] + \
                [q.tensors[o] for o in op.outputs]:
            assert t.dtype == "int16" and int(t.quant.zero_point[0]) == 0, (name, t.name)
        assert q.tensors[op.inputs[1]].dtype == "int8" if op.type != "ADD" else True
    assert q.tensors[by_name["c1"].inputs[2]].dtype == "int64"
    assert q.tensors[by_name["logits"].inputs[2]].dtype == "int64"
    # int8 <-> int16 conversions where precisions meet, and nothing else changed.
    conversions = [op for op in q.ops if op.type == "QUANTIZE" and op not in q8.ops]
    assert {q.tensors[op.outputs[0]].dtype for op in conversions} == {"int8", "int16"}
    untouched = [op for op in q8.ops if op.name not in ("c1", "a3", "logits")]
    assert all(q8.tensors[o].dtype == "int8" for op in untouched for o in op.outputs
               if q8.tensors[o].dtype != "float32")
    flags = {t.name: t.payload[4:8] for t in lower(q).tasks}
    assert int.from_bytes(flags["c1"], "little") & spec_ops.OPF_INT16
    assert not int.from_bytes(flags["c2"], "little") & spec_ops.OPF_INT16


def test_selection_errors_are_clear(small_cnn) -> None:
    q8 = quantize_mixed(small_cnn, _data(CNN_SHAPE, 2, 0), int16="none")
    with pytest.raises(MixedPrecisionError, match="no op or tensor named 'nope'"):
        promote(q8, ["nope"])
    with pytest.raises(MixedPrecisionError, match="QUANTIZE node 'x_int8' has no int16 kernel"):
        promote(q8, ["x_int8"])
    assert parse_selection(" c1, a3 ,c1") == ["a3", "c1"]
    assert parse_selection("auto") == "auto" and parse_selection(None) == parse_selection("") == "none"


def test_none_is_the_int8_quantizer_unchanged(small_cnn) -> None:
    data = _data(CNN_SHAPE, 3, 1)
    plain = quantize_model(small_cnn, data)
    mixed = quantize_mixed(small_cnn, data, int16="none")
    assert export_tflite(plain) == export_tflite(mixed)
    assert lower(plain).to_bytes() == lower(mixed).to_bytes()


@pytest.mark.parametrize("io_dtype", ["float32", "int8"])
def test_mixed_model_on_the_device_equals_litert(npu, small_cnn, litert, io_dtype) -> None:
    """The end-to-end check: quantized with int16 layers, compiled, run on the device, and
    byte-identical to LiteRT BUILTIN_REF running our exported 16x8 .tflite."""
    q = quantize_mixed(small_cnn, _data(CNN_SHAPE, 6, 2), int16=",".join(PROMOTED), io_dtype=io_dtype)
    assert q.metadata["int16_layers"] == PROMOTED
    tfl = export_tflite(q)
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        rng = np.random.default_rng(3)
        for _ in range(4):
            x = rng.standard_normal(CNN_SHAPE).astype(np.float32)
            if io_dtype == "int8":
                t = q.tensors[q.inputs[0]]
                x = t.quant.quantize(x, "int8")
            (ours,) = model.infer([x])
            (ref,) = litert(tfl, [x])
            assert ours.dtype == ref.dtype
            np.testing.assert_array_equal(ours, ref)
    finally:
        model.close()


def test_every_int16_operator_of_a_layout_model_on_the_device(npu, litert) -> None:
    """Concat, pad, average pool, transpose, reshape, MatMul (FC), conv: all int16."""
    from libnpu.compiler.mixed_precision import promotable
    graph = import_onnx(builders.layout_mix())
    shape = (1, 4, 8, 8)
    q8 = quantize_mixed(graph, _data(shape, 4, 7), int16="none")
    names = [op.outputs[0] for op in q8.ops if promotable(op)]
    q = promote(q8, names, optimize(graph))
    kinds = {op.type for op in q.ops if q.tensors[op.outputs[0]].dtype == "int16" and op.type != "QUANTIZE"}
    assert {"CONCATENATION", "PAD", "AVERAGE_POOL_2D", "TRANSPOSE", "FULLY_CONNECTED", "CONV_2D", "RESHAPE",
            "MEAN"} <= kinds
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        for x in _data(shape, 3, 8):
            for ours, ref in zip(model.infer(x), litert(export_tflite(q), x)):
                np.testing.assert_array_equal(ours, ref)
    finally:
        model.close()


def test_standalone_relus_in_int16_on_the_device(npu, litert) -> None:
    from libnpu.compiler.mixed_precision import promotable
    graph = import_onnx(builders.standalone_activations())
    shape = (1, 2, 4, 4)
    q8 = quantize_mixed(graph, _data(shape, 4, 12), int16="none")
    q = promote(q8, [op.outputs[0] for op in q8.ops if promotable(op)], optimize(graph))
    kinds = {op.type for op in q.ops if q.tensors[op.outputs[0]].dtype == "int16"}
    assert {"RELU", "RELU6"} <= kinds
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        for x in _data(shape, 2, 13):
            for ours, ref in zip(model.infer(x), litert(export_tflite(q), x)):
                np.testing.assert_array_equal(ours, ref)
    finally:
        model.close()


def test_mul_by_a_constant_gets_an_int16_constant(npu, litert) -> None:
    graph = import_onnx(builders.exporter_style())
    shape = (1, 3, 8, 8)
    q = quantize_mixed(graph, _data(shape, 4, 10), int16="xs,c1")
    mul = next(op for op in q.ops if op.type == "MUL")
    assert [q.tensors[i].dtype for i in mul.inputs] == ["int16", "int16"] and q.tensors[mul.inputs[1]].is_constant
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        x = _data(shape, 1, 11)[0]
        np.testing.assert_array_equal(model.infer(x)[0], litert(export_tflite(q), x)[0])
    finally:
        model.close()


def test_an_imported_16x8_tflite_runs_on_the_device_as_it_is(npu, small_cnn, litert, tmp_path) -> None:
    """A .tflite with int16 activations (here our own export; ai-edge-quantizer's a16w8
    recipes write the same operators) is compiled as it is, no re-quantization."""
    from libnpu.compiler.tflite_import import import_tflite
    q = quantize_mixed(small_cnn, _data(CNN_SHAPE, 4, 5), int16=",".join(PROMOTED), io_dtype="int8")
    tfl = export_tflite(q)
    imported = import_tflite(tfl)
    assert sum(t.dtype == "int16" for t in imported.tensors.values()) >= len(PROMOTED)
    model = libnpu.load(tfl, devroot=npu.devroot, cache_dir=tmp_path)
    try:
        x = q.tensors[q.inputs[0]].quant.quantize(_data(CNN_SHAPE, 1, 6)[0][0], "int8")
        np.testing.assert_array_equal(model.infer([x])[0], litert(tfl, [x])[0])
    finally:
        model.close()


def test_auto_promotes_the_layers_int8_ruins(npu, litert) -> None:
    graph = import_onnx(builders.outlier_channel())
    shape = (1, 4, 8, 8)
    data = _data(shape, 6, 4)
    opt = optimize(graph)
    plain = quantize_mixed(graph, data, int16="none")
    auto = quantize_mixed(graph, data, int16="auto", int16_target=0.999)
    before = min(output_scores(opt, plain, data).values())
    after = min(output_scores(opt, auto, data).values())
    assert before < 0.99 < 0.999 <= after
    assert set(auto.metadata["int16_layers"]) == {"c1", "y"}
    assert min(auto.metadata["int16_output_score"].values()) >= 0.999
    capped = quantize_mixed(graph, data, int16="auto", max_int16_layers=1)
    assert len(capped.metadata["int16_layers"]) == 1
    # ...and the chip computes the auto-selected graph exactly as LiteRT does.
    model = libnpu.load(lower(auto), devroot=npu.devroot)
    try:
        x = _data(shape, 1, 9)[0][0]
        np.testing.assert_array_equal(model.infer([x])[0], litert(export_tflite(auto), [x])[0])
    finally:
        model.close()


@pytest.mark.parametrize("builder,kind,name", [
    (builders.prelu_between_convs, "PRELU", "p"),
    (builders.hard_swish_between_convs, "HARD_SWISH", "h"),
    (builders.gelu_between_convs, "GELU", "g"),
])
def test_our_int16_formulas_on_the_device(npu, builder, kind: str, name: str) -> None:
    """LiteRT has no int16 PRELU, HARD_SWISH or GELU: the device follows the float simulation of
    the quantized graph within an output step, and does not lose to the all-int8 graph
    against float."""
    from libnpu.compiler.float_ref import FloatInterpreter
    graph = import_onnx(builder())
    data = _data((1, 3, 8, 8), 8, 21)
    q8 = quantize_mixed(graph, data, int16="none")
    q = quantize_mixed(graph, data, int16=[name])
    (promoted,) = [op for op in q.ops if op.type == kind]
    assert q.metadata["int16_layers"] == [name]
    assert {q.tensors[n].dtype for n in (*promoted.inputs, *promoted.outputs)} == {"int16"}
    flags = {t.name: int.from_bytes(t.payload[4:8], "little") for t in lower(q).tasks}
    assert flags[name] & spec_ops.OPF_INT16
    step = float(q.tensors["y"].quant.scale[0])
    reference, simulated = FloatInterpreter(graph), FloatInterpreter(q)
    errors = []
    for g in (q8, q):
        model = libnpu.load(lower(g), devroot=npu.devroot)
        try:
            worst = 0.0
            for x in data[:4]:
                got = model.infer(x)[0]
                worst = max(worst, float(np.abs(got - reference.run(x)[graph.outputs[0]]).max()))
                if g is q:
                    np.testing.assert_allclose(got, simulated.run(x)[q.outputs[0]], rtol=0, atol=1.01 * step)
            errors.append(worst)
        finally:
            model.close()
    assert errors[1] <= errors[0] + step / 2, (errors, step)


def test_layer_norm_in_int16_on_the_device(npu) -> None:
    """A LayerNorm all in int16: its statistics (INSTANCE_NORM over each row, exact integer
    sums: ops/normalization.py ``fuse_layer_norms``) and its scale and shift on the chip
    follow the float simulation within an output step, and are no further from float than
    int8's (whose statistics are exact sums too: before, its RSQRT of a small variance one
    step off differed by tens of steps and int16 halved the error)."""
    from libnpu.compiler.float_ref import FloatInterpreter
    graph = import_onnx(builders.layer_norm_between_convs())
    data = _data((1, 3, 8, 8), 8, 21)
    q8 = quantize_mixed(graph, data, int16="none")
    q = quantize_mixed(graph, data, int16=[op.outputs[0] for op in q8.ops if op.outputs[0].startswith("ln")])
    kinds = {op.type: op.outputs[0] for op in q.ops}
    assert q.tensors[kinds["INSTANCE_NORM"]].dtype == "int16"
    tasks = {t.name: t for t in lower(q).tasks}
    for name in (kinds["INSTANCE_NORM"],):
        assert int.from_bytes(tasks[name].payload[4:8], "little") & spec_ops.OPF_INT16
    step = float(q.tensors["y"].quant.scale[0])
    reference, simulated = FloatInterpreter(graph), FloatInterpreter(q)
    errors = []
    for g in (q8, q):
        model = libnpu.load(lower(g), devroot=npu.devroot)
        try:
            got = [model.infer(x)[0] for x in data[:4]]
        finally:
            model.close()
        errors.append(max(float(np.abs(v - reference.run(x)[graph.outputs[0]]).max()) for v, x in zip(got, data)))
        if g is q:
            for v, x in zip(got, data):
                np.testing.assert_allclose(v, simulated.run(x)[q.outputs[0]], rtol=0, atol=1.01 * step)
    assert errors[1] <= errors[0] < 8 * step, (errors, step)


W16_LAYERS = ["c1", "c2", "c3", "c4", "logits"]  # conv, depthwise, 1x1 conv, strided conv, fully connected


def test_int16_weights_on_the_device(npu, small_cnn) -> None:
    """a16w16 (``OPF_WEIGHTS16``, our formula: LiteRT has no 16x16 kernel): int16 weights
    and int64 biases on the chosen layers, the flag on their descriptors only, the device
    within a few output steps of the float simulation, and far closer to float than a16w8."""
    from libnpu.compiler.float_ref import FloatInterpreter
    from libnpu.compiler.mixed_precision import promotable
    data = _data(CNN_SHAPE, 6, 14)
    every = [op.name for op in quantize_mixed(small_cnn, data, int16="none").ops if promotable(op)]
    a16w8 = quantize_mixed(small_cnn, data, int16=every)
    q = quantize_mixed(small_cnn, data, int16=every, int16_weights=W16_LAYERS)
    assert q.metadata["int16_weights"] == W16_LAYERS
    by_name = {op.name: op for op in q.ops}
    for name in W16_LAYERS:
        op = by_name[name]
        assert (q.tensors[op.inputs[1]].dtype, q.tensors[op.inputs[2]].dtype) == ("int16", "int64"), name
        assert (a16w8.tensors[op.inputs[1]].dtype, a16w8.tensors[op.inputs[2]].dtype) == ("int8", "int64")
    flags = {t.name: int.from_bytes(t.payload[4:8], "little") for t in lower(q).tasks}
    assert all(flags[n] & spec_ops.OPF_WEIGHTS16 for n in W16_LAYERS)
    assert not any(flags[n] & spec_ops.OPF_WEIGHTS16 for n in flags if n not in W16_LAYERS)
    assert not any(int.from_bytes(t.payload[4:8], "little") & spec_ops.OPF_WEIGHTS16 for t in lower(a16w8).tasks)
    step = 2.0 ** -15  # the int16 softmax's output grid
    reference, simulated = FloatInterpreter(optimize(small_cnn)), FloatInterpreter(q)
    errors = []
    for g in (a16w8, q):
        model = libnpu.load(lower(g), devroot=npu.devroot)
        try:
            worst = 0.0
            for x in _data(CNN_SHAPE, 3, 15):
                got = model.infer(x)[0]
                worst = max(worst, float(np.abs(got - reference.run(x)[small_cnn.outputs[0]]).max()))
                if g is q:  # the simulation rounds each layer in float: a few steps apart at the end
                    np.testing.assert_allclose(got, simulated.run(x)[q.outputs[0]], rtol=0, atol=4 * step)
            errors.append(worst)
        finally:
            model.close()
    assert errors[1] < errors[0] / 5, errors


def test_int16_weights_auto_and_errors(small_cnn) -> None:
    from libnpu.compiler.mixed_precision import choose_weights16
    data = _data(CNN_SHAPE, 4, 16)
    opt = optimize(small_cnn)
    from libnpu.compiler.mixed_precision import promotable
    q8 = quantize_mixed(small_cnn, data, int16="none")
    names = [op.outputs[0] for op in q8.ops if promotable(op)]
    # A target the int8 weights already reach: none; one they do not: the fewest that do.
    assert choose_weights16(opt, q8, names, data, target=0.5)[0] == []
    chosen, scores = choose_weights16(opt, q8, names, data, target=0.99999)
    op_of = {op.outputs[0]: op.name for op in q8.ops}
    assert chosen and {op_of[n] for n in chosen} <= set(W16_LAYERS)
    before = output_scores(opt, promote(q8, names, opt), data)
    assert min(scores.values()) > min(before.values())
    auto = quantize_mixed(small_cnn, data, int16=names, int16_weights="auto", int16_weights_target=0.99999)
    assert set(auto.metadata["int16_weights"]) == {op_of[n] for n in chosen}
    # Where the int8 layers' error dominates, int16 weights would not help: none are chosen.
    assert choose_weights16(opt, q8, ["c1"], data, target=0.99999)[0] == []
    # int8 layers keep int8 weights: int16 weights only come with int16 activations.
    with pytest.raises(MixedPrecisionError, match="not a promoted op with weights"):
        promote(q8, ["c1"], opt, ["c2"])
    with pytest.raises(MixedPrecisionError, match="need int16 activations"):
        quantize_mixed(small_cnn, data, int16="none", int16_weights="c1")
    with pytest.raises(MixedPrecisionError, match="need the float graph"):
        promote(q8, ["c1"], None, ["c1"])


def test_int16_weights_of_a_dead_channel_stay_representable(npu, small_cnn) -> None:
    """A channel with near-zero weights and a real bias (folded batch norms leave such):
    a step of max|w| / 32767 would flush its multiplier to 0 and overflow its int64 bias
    past the chip's 48-bit sums; the step is floored, and the device follows float there."""
    from libnpu.compiler.float_ref import FloatInterpreter
    from libnpu.compiler.mixed_precision import promotable
    from libnpu.compiler.scales import BIAS16_BITS, MIN_MULTIPLIER
    from npu_hw.fixedpoint import effective_scale
    graph = small_cnn.copy()
    graph.tensors["w3"].data = graph.tensors["w3"].data.copy()
    graph.tensors["w3"].data[0] *= 1e-9
    graph.tensors["bb3"].data = graph.tensors["bb3"].data.copy()
    graph.tensors["bb3"].data[0] = 1.5
    data = _data(CNN_SHAPE, 4, 17)
    every = [op.name for op in quantize_mixed(graph, data, int16="none").ops if promotable(op)]
    q = quantize_mixed(graph, data, int16=every, int16_weights=["c3"])
    c3 = next(op for op in q.ops if op.name == "c3")
    w, b = q.tensors[c3.inputs[1]], q.tensors[c3.inputs[2]]
    real = effective_scale(float(q.tensors[c3.inputs[0]].quant.scale[0]), w.quant.scale,
                           float(q.tensors[c3.outputs[0]].quant.scale[0]))
    assert real.min() >= MIN_MULTIPLIER and np.abs(b.data).max() <= 2 ** BIAS16_BITS
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        x = _data(CNN_SHAPE, 1, 18)[0]
        np.testing.assert_allclose(model.infer(x)[0], FloatInterpreter(q).run(x)[q.outputs[0]], rtol=0,
                                   atol=4 * 2.0 ** -15)
    finally:
        model.close()


def test_int16_logistic_and_tanh_on_the_device_equal_litert(npu, litert) -> None:
    """LOGISTIC and TANH promoted (output scale 2**-15, the LUT descriptor's int16 mode):
    byte-identical to LiteRT's int16 kernels on the exported .tflite."""
    graph = import_onnx(builders.sigmoid_tanh_between_convs())
    data = _data((1, 3, 8, 8), 6, 31)
    q = quantize_mixed(graph, data, int16="s,t")
    promoted = {op.type: op for op in q.ops if op.name in ("s", "t")}
    assert set(promoted) == {"LOGISTIC", "TANH"}
    for op in promoted.values():
        assert {q.tensors[n].dtype for n in (*op.inputs, *op.outputs)} == {"int16"}
        out = q.tensors[op.outputs[0]].quant
        assert float(out.scale[0]) == 2.0 ** -15 and int(out.zero_point[0]) == 0
    flags = {t.name: int.from_bytes(t.payload[4:8], "little") for t in lower(q).tasks}
    assert flags["s"] & spec_ops.OPF_INT16 and flags["t"] & spec_ops.OPF_INT16
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        for x in data[:3]:
            np.testing.assert_array_equal(model.infer(x)[0], litert(export_tflite(q), x)[0])
    finally:
        model.close()


def test_an_output_out_of_reach_aims_for_the_ceiling() -> None:
    """When int16 activations everywhere cannot bring an output to the target, "auto" aims for
    what they do give (the ceiling), not a share of it: 90% stopped rapidocr-cls at 16 of 128
    layers and 0.400 off on unseen crops; an output they would not improve is left alone."""
    goals = _goals({"box": 0.88, "flat": 0.95, "fine": 0.999}, {"box": 0.987, "flat": 0.9505, "fine": 0.999}, 0.99)
    assert goals == {"box": 0.987, "flat": -1.0, "fine": 0.999}


# LEAKY_RELU, MAXIMUM and MINIMUM on int16 ------------------------------------------------------
LEAKY_SHAPE = (1, 4, 6, 6)


def _leaky_max_min():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.2),
             helper.make_node("Max", ["l", "floor"], ["m"]),
             helper.make_node("Min", ["m", "x"], ["y"])]
    graph = helper.make_graph(nodes, "leaky_max_min",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, LEAKY_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, LEAKY_SHAPE)],
                              [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(np.array(-0.4, np.float32), "floor")])
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _long_tail_data(count: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(LEAKY_SHAPE) * rng.uniform(0.05, 3)).astype(np.float32)] for _ in range(count)]


def test_leaky_relu_maximum_and_minimum_in_int16_on_the_device_equal_litert(npu, litert) -> None:
    """A long-tailed activation (rare large values, most near zero: openwakeword's speech
    embedding, LEAKY_RELU then ``max(x, -0.4)``) keeps its small values on int16,
    byte-identical to LiteRT's 16x8 kernels, and the constant on x's grid."""
    graph = _leaky_max_min()
    q8 = quantize_mixed(graph, _long_tail_data(4, 1), int16="none")
    q = promote(q8, [op.outputs[0] for op in q8.ops if promotable(op)], optimize(graph))
    kinds = {op.type for op in q.ops if q.tensors[op.outputs[0]].dtype == "int16"}
    assert {"LEAKY_RELU", "MAXIMUM", "MINIMUM"} <= kinds
    model = libnpu.load(lower(q), devroot=npu.devroot)
    try:
        for x in _long_tail_data(3, 2):
            for ours, ref in zip(model.infer(x), litert(export_tflite(q), x)):
                assert ours.dtype == ref.dtype
                np.testing.assert_array_equal(ours, ref)
            # and what float computes: max(x, -0.4)'s constant on x's grid (raw values compared)
            (real,) = model.infer(x, dequantized=True)
            (want,) = run_float(graph, x).values()
            assert np.abs(real - want).max() <= 0.02      # the int8 output's step: 0.003-0.02
    finally:
        model.close()


def test_an_int64_bias_beyond_its_range_saturates(small_cnn) -> None:
    """A float bias too large for int64 at the layer's bias scale saturates with its sign;
    numpy's cast would wrap it to the most negative value (and warn)."""
    src = optimize(small_cnn)
    c1 = next(op for op in src.ops if op.name == "c1")
    bias = src.tensors[c1.inputs[2]]
    data = np.array(bias.data, np.float32)
    data.reshape(-1)[:2] = [3e30, -3e30]
    bias.data = data
    q8 = quantize_mixed(small_cnn, _data(CNN_SHAPE, 4, 0), int16="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = promote(q8, ["c1"], src)
    got = np.asarray(q.tensors[c1.inputs[2]].data).reshape(-1)
    assert got.dtype == np.int64
    assert got[0] > 2 ** 61 and got[1] < -2 ** 61


def test_named_int16_layers_are_looked_up_once(monkeypatch, small_cnn) -> None:
    """``int16`` given as names (the escalation names its chosen layers when it calibrates a
    step again) resolves them once, not once per op: per op it cost ops x names x ops, and
    minutes for ddddocr-rec's 1388 int16 layers."""
    from libnpu.compiler import mixed_precision
    data = _data(CNN_SHAPE, 2, 3)
    every = [op.outputs[0] for op in quantize_mixed(small_cnn, data, int16="none").ops
             if mixed_precision.promotable(op)]
    calls = []
    real = mixed_precision._select
    monkeypatch.setattr(mixed_precision, "_select",
                        lambda g, names, *optional: calls.append(1) or real(g, names, *optional))
    q = quantize_mixed(small_cnn, data, int16=",".join(every))
    assert len(q.metadata["int16_layers"]) == len(every) and len(calls) <= 3, len(calls)


def test_names_resolve_in_one_walk_of_the_ops(small_cnn) -> None:
    """The names of an int16 selection resolve in one walk of the graph's ops, not one (or
    three) per name: an unrolled RNN's thousands of names over its thousands of ops took
    PLCMOS v2's int16 search 270 s of ~700 s profiled."""
    from libnpu.compiler import mixed_precision
    q = quantize_mixed(small_cnn, _data(CNN_SHAPE, 2, 3), int16="none")
    names = [op.outputs[0] for op in q.ops if mixed_precision.promotable(op)]
    expected = {id(op) for op in q.ops if op.outputs[0] in names}

    class Walked(list):
        walks = 0

        def __iter__(self):
            Walked.walks += 1
            return super().__iter__()
    q.ops = Walked(q.ops)
    assert mixed_precision._select(q, names) == expected
    assert Walked.walks == 1, Walked.walks


# ABS and CLIP on int16: a spectrum's compressed magnitude ------------------------------------
MAGNITUDE_SHAPE = (1, 64)


def _compressed_magnitude() -> bytes:
    """A speech enhancer's magnitude compression (FastEnhancer's ``x * clip(|x|, 1e-5)^-0.7``,
    i.e. ``sign(x) |x|^0.3``): the power a host call (no chip Pow by -0.7), its input the
    chip's ABS and CLIP. On an int8 grid every bin under half a step of the loudest reads 0,
    whose power is 1e-5^-0.7 = 3162: the small bins come out 100x too large."""
    nodes = [helper.make_node("Abs", ["x"], ["magnitude"]),
             helper.make_node("Clip", ["magnitude", "eps"], ["clamped"]),
             helper.make_node("Pow", ["clamped", "exponent"], ["gain"]),
             helper.make_node("Mul", ["x", "gain"], ["y"])]
    graph = helper.make_graph(nodes, "compressed_magnitude",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, MAGNITUDE_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, MAGNITUDE_SHAPE)],
                              [numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
                               numpy_helper.from_array(np.array(-0.7, np.float32), "exponent")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _spectra(count: int, seed: int) -> list[list[np.ndarray]]:
    """Bins of either sign whose magnitudes span four decades (1e-3 to 10), as a spectrum's."""
    rng = np.random.default_rng(seed)
    return [[(rng.choice([-1, 1], MAGNITUDE_SHAPE) * 10.0 ** rng.uniform(-3, 1, MAGNITUDE_SHAPE)).astype(np.float32)]
            for _ in range(count)]


def test_a_compressed_magnitude_reaches_the_target_with_abs_and_clip_on_int16(npu) -> None:
    """The default compile's int16 step takes ABS and CLIP too, so the small bins keep their
    values on the device: with both int8-only, every step stayed far under (fastenhancer-t:
    every output's cosine below 0). The CPU float step is ruled out: this model is all front
    end, which that step now keeps in float on the CPU whole (branch fastenh2), and the
    point here is the chip's int16 step."""
    model = _compressed_magnitude()
    loadable = compile_model(model, _spectra(20, 1), kind="onnx", cpu_float=False)
    assert {"magnitude", "clamped"} <= set(loadable.metadata.get("int16_layers", [])), loadable.metadata
    float_graph = import_with_fallback(model, "onnx")[0]
    loaded = libnpu.load(loadable, devroot=npu.devroot)
    try:
        for x in _spectra(4, 99):
            (got,), (want,) = loaded.infer(x), run_float(float_graph, x).values()
            assert cosine(got, want) >= 0.98
    finally:
        loaded.close()


def _unary(node: str, *consts: tuple[str, float]) -> bytes:
    extra = [name for name, _ in consts]
    graph = helper.make_graph([helper.make_node(node, ["x", *extra], ["y"])], node.lower(),
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, MAGNITUDE_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, MAGNITUDE_SHAPE)],
                              [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _int16(model: bytes, data: list) -> tuple:
    graph = import_onnx(model)
    q8 = quantize_mixed(graph, data, int16="none")
    return graph, promote(q8, [op.outputs[0] for op in q8.ops if promotable(op)], optimize(graph))


def test_abs_and_clip_in_int16_on_the_device(npu, litert) -> None:
    """int16 ABS is LiteRT's 16x8 kernel, byte for byte; int16 CLIP (RELU's int16
    descriptor, its bounds on the int16 grid) is its float function within a step."""
    data = _spectra(4, 3)
    _, q_abs = _int16(_unary("Abs"), data)
    graph, q_clip = _int16(_unary("Clip", ("low", 0.05), ("high", 4.0)), data)
    for q, kind in ((q_abs, "ABS"), (q_clip, "CLIP")):
        assert [op.type for op in q.ops if q.tensors[op.outputs[0]].dtype == "int16" and op.type != "QUANTIZE"] \
            == [kind]
    model, clip = libnpu.load(lower(q_abs), devroot=npu.devroot), libnpu.load(lower(q_clip), devroot=npu.devroot)
    try:
        for x in data[:2]:
            (ours,), (ref,) = model.infer(x), litert(export_tflite(q_abs), x)
            np.testing.assert_array_equal(ours, ref)
            (real,) = clip.infer(x, dequantized=True)
            (want,) = run_float(graph, x).values()
            step = 2 * 10 / 32767       # the input's int16 step (|x| up to 10): one each side
            assert np.abs(real - want).max() <= step and real.min() >= 0.05 - step
    finally:
        model.close()
        clip.close()
