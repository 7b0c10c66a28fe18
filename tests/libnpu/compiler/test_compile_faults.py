"""Compiles that never crash: causes seen on real models, each reproduced on a small
synthetic one (docs/security.md, "Compiles that never crash")."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.frontend import load_model, to_int8_graph
from libnpu.compiler.ir import IRError
from libnpu.compiler.layer_faults import LayerFault
from libnpu.compiler.lower import compile_model
from libnpu.compiler.quantizer import NonFiniteValuesError
from libnpu.compiler.scales import choose_int16_scale, quantize_weights
from libnpu.compiler.small_islands import TOO_SMALL
from libnpu.compiler.tflite_import import import_tflite
from tests.support.model_builders import _Builder
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model

SMALLEST_SCALE = float(np.finfo(np.float32).tiny)   # scales.SMALLEST_SCALE: the finest normal float32
_RNG = np.random.default_rng(0)
_W = _RNG.normal(0, .3, (4, 4, 1, 1)).astype(np.float32)


def _two_convs(w2: np.ndarray, bias: bool = False, tail: tuple[str, np.ndarray] | None = None):
    """Conv + ReLU, then a 1x1 conv with weights ``w2`` (and a zero bias), then ReLU or
    ``tail`` (an op with a constant operand). Input [1, 3, 8, 8]."""
    b = _Builder(3)
    b.node("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    b.node("Relu", ["c1"], "r1")
    b.node("Conv", ["r1", b.const("w2", w2), *([b.const("b2", np.zeros(4, np.float32))] if bias else [])], "c2")
    if tail is None:
        b.node("Relu", ["c2"], "y")
    else:
        b.node(tail[0], ["c2", b.const("k", tail[1])], "y")
    return b.model("two_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]}).SerializeToString()


@pytest.mark.parametrize("denormal, bias", [(1e-45, False), (1e-42, True)])
def test_denormal_weights_get_a_grid(denormal, bias):
    """A channel of denormal weights (trained models carry them) made its float32 weight
    scale 0 (1e-45 / 127), or its bias scale (input scale x 1e-42 / 127): "scales must be
    finite and > 0", and the layer went to the CPU. Its weights now round to 0 on a
    finer-than-nothing grid, and the layer stays on the chip."""
    w = _W.copy()
    w[1] = denormal
    q = to_int8_graph(_two_convs(w, bias), kind="onnx", recipe="fast")
    conv = [op for op in q.ops if op.type == "CONV_2D"][-1]
    weights = q.tensors[conv.inputs[1]]
    assert not np.take(weights.data, 1, axis=weights.quant.axis).any()
    assert np.all(weights.quant.scale >= np.float32(SMALLEST_SCALE / 1e3))
    if bias:
        assert np.all(q.tensors[conv.inputs[2]].quant.scale > 0)


def test_zero_reach_gets_the_smallest_int16_scale():
    """A tensor or channel that is always 0 has a zero int16 reach: its scale was 0."""
    qp = choose_int16_scale(np.array([0.0, 1e-44, 2.0]))
    assert np.all(qp.scale > 0) and qp.scale[0] == np.float32(SMALLEST_SCALE)
    assert qp.scale[2] == np.float32(2.0 / 32767)


def test_infinite_constant_bound_saturates():
    """``Max(x, -inf)`` (a bound exporters write): the constant's range was [-inf, ...] and
    its grid's scale inf; the infinity now saturates to its grid's end."""
    model = _two_convs(_W, tail=("Max", np.array([0, -np.inf, 0, 0], np.float32).reshape(1, 4, 1, 1)))
    q = to_int8_graph(model, kind="onnx", recipe="fast")
    assert all(np.all(np.isfinite(t.quant.scale)) for t in q.tensors.values() if t.quant is not None)
    feeds = [{"x": np.random.default_rng(9).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}]
    assert min(output_scores(load_model(model, kind="onnx"), q, feeds).values()) > 0.99


def test_non_finite_weights_are_named():
    """inf or NaN in weights is the model's (no grid holds it): said as such, not as a
    scale that "must be finite and > 0"."""
    with pytest.raises(ValueError, match="not finite"):
        quantize_weights(np.array([[1.0, np.inf]]), 0, None, 0.1)


def test_invalid_utf8_names_import():
    """TFLite strings holding bytes that are not UTF-8 (tensor names, a custom code) failed
    with UnicodeDecodeError; they are kept as ``\\xNN`` escapes, and stay unique."""
    f32 = np.float32
    model = build_model([TensorSpec((1, 8), f32, name=b"mel\xff"),          # type: ignore[arg-type]
                         TensorSpec((1, 8), f32, name=b"a\xfe"),            # type: ignore[arg-type]
                         TensorSpec((1, 8), f32, name="a\\xfe")],
                        [OpSpec(tflite.BuiltinOperator.RELU, [0], [1]),
                         OpSpec(tflite.BuiltinOperator.RELU6, [1], [2])], [0], [2])
    g = import_tflite(model)
    assert g.inputs == ["mel\\xff"]
    assert "a\\xfe" in g.tensors and len(g.tensors) == 3
    loadable = compile_model(model, kind="tflite", recipe="fast")
    assert loadable is not None


def _host_pair_model():
    """Two consecutive ops the chip lacks (Sin, Cos) form one host call with two outputs,
    each read by a conv; a global average pool after the second."""
    b = _Builder(3)
    n = b.node
    n("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("Sin", ["c1"], "s")
    n("Cos", ["s"], "c")
    n("Conv", ["s", b.weight("w2", 4, 4, 1, 1), b.weight("b2", 4, scale=.1)], "y")
    n("Conv", ["c", b.weight("w3", 4, 4, 1, 1), b.weight("b3", 4, scale=.1)], "c3")
    n("GlobalAveragePool", ["c3"], "z")
    return b.model("host_pair", {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8], "z": [1, 4, 1, 1]}).SerializeToString()


def test_bias_correction_through_a_host_call_of_two_outputs():
    """Bias correction stacked a multi-output host call's values into one array (and left
    its second output unset: "'NoneType' object has no attribute ..."): it now keeps each."""
    data = [{"x": np.random.default_rng(i).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for i in range(4)]
    loadable = compile_model(_host_pair_model(), data, kind="onnx", recipe="fast", bias_correction=True)
    placed = {p[1]: p[2] for p in loadable.metadata["placement"]}
    assert placed["Sin"] == placed["Cos"] == "CPU" and placed["GlobalAveragePool"] == "NPU"


def _bn_after_dead_input(gamma: np.ndarray, beta: float):
    """Conv whose ReLU output is always 0 (bias -50), a 1x1 conv, batch norm (``gamma``,
    ``beta``) and ReLU: the norm folds into the conv only in the whole graph (the placement
    judges each operator alone and passes all of them). Input [1, 3, 8, 8]."""
    b = _Builder(3)
    n = b.node
    n("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.const("b1", np.full(4, -50, np.float32))], "c1", pads=[1, 1, 1, 1])
    n("Relu", ["c1"], "r1")
    n("Conv", ["r1", b.weight("w2", 3, 4, 1, 1)], "c2")
    n("BatchNormalization", ["c2", b.const("g", gamma.astype(np.float32)), b.const("be", np.full(3, beta, np.float32)),
                             b.const("mu", np.zeros(3, np.float32)), b.const("var", np.ones(3, np.float32))], "n2")
    n("Relu", ["n2"], "r2")
    n("Mul", ["r2", b.const("k", np.float32(1e-37))], "s2")
    n("Add", ["s2", "x"], "y")
    return b.model("bn_after_dead", {"x": [1, 3, 8, 8]}, {"y": [1, 3, 8, 8]}).SerializeToString()


_FEEDS = [{"x": np.random.default_rng(i).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for i in range(4)]


def test_batch_norm_with_a_vanishing_gamma_compiles():
    """A batch norm whose gamma is ~1e-40 on a channel folds denormal weights into the conv
    before it: the whole model's quantization failed ("scales must be finite and > 0") where
    each operator alone passed, so the compile ended. Now it compiles, all on the chip."""
    loadable = compile_model(_bn_after_dead_input(np.array([1.0, 1e-40, 1.0]), 0.0), _FEEDS,
                             kind="onnx", recipe="fast")
    assert "placement" not in loadable.metadata and "layer_faults" not in loadable.metadata


def test_a_layer_no_grid_holds_runs_on_the_cpu():
    """A layer whose folded bias (3e37 on an input that is always 0) no int8 weight step
    holds with an int32 bias: the whole model's quantization raised inside that layer, with
    no operator the placement refuses. That layer (and the ReLU fused into it) now runs on
    the CPU, with the real cause as its reason; strict mode refuses it, naming the layer."""
    model = _bn_after_dead_input(np.ones(3), 3e37)
    loadable = compile_model(model, _FEEDS, kind="onnx", recipe="fast")
    cpu = {p[1]: p[3] for p in loadable.metadata["placement"] if p[2] == "CPU"}
    assert set(cpu) == {"Conv", "BatchNormalization", "Relu"} and "no int8 weight step holds it" in cpu["Conv"]
    assert cpu["BatchNormalization"].startswith(TOO_SMALL)     # between the two: small_islands
    assert len(loadable.metadata["layer_faults"]) == 2
    assert loadable.metadata["layer_faults"][0].startswith("Conv (op 2) runs on the CPU: quantizing it")
    with pytest.raises(LayerFault, match="quantizing CONV_2D node 'c2' failed: .*no int8 weight step"):
        compile_model(model, _FEEDS, kind="onnx", recipe="fast", strict=True)


def test_the_users_mistakes_stay_errors():
    """The net catches a layer's faults, not the user's: a wrong input shape still ends the
    compile, as does calibration data that drives a tensor to infinity."""
    model = _bn_after_dead_input(np.ones(3), 0.0)
    with pytest.raises(IRError, match="x"):
        compile_model(model, _FEEDS, kind="onnx", recipe="fast", input_shapes={"x": (1, 3, 9)})
    with pytest.raises(NonFiniteValuesError):
        compile_model(model, [{"x": np.full((1, 3, 8, 8), np.inf, np.float32)}], kind="onnx", recipe="fast")


def test_zero_scales_in_a_tflite_file():
    """Quantization parameters with a zero scale on a float tensor (converters leave them)
    mean nothing to LiteRT: the import failed with "scales must be finite and > 0". They are
    ignored; on an int8 tensor, where they would mean something, the error names the tensor."""
    f32 = np.float32
    model = build_model([TensorSpec((1, 8), f32, scale=[0.0], zero_point=[0], name="mel"),
                         TensorSpec((1, 8), f32, scale=[0.0], zero_point=[0], name="out")],
                        [OpSpec(tflite.BuiltinOperator.RELU, [0], [1])], [0], [1])
    assert import_tflite(model).tensors["mel"].quant is None
    int8 = build_model([TensorSpec((1, 8), np.int8, scale=[0.1], zero_point=[0], name="in"),
                        TensorSpec((1, 8), np.int8, scale=[0.0], zero_point=[0], name="dead")],
                       [OpSpec(tflite.BuiltinOperator.RELU, [0], [1])], [0], [1])
    with pytest.raises(IRError, match="tensor 1 \\('dead'\\): its quantization scale 0.0 is not finite"):
        import_tflite(int8)
