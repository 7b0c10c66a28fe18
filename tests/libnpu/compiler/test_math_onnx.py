"""Single-node float ONNX models of the activations and elementwise math compile (random
calibration in [-1, 1]), run on the chip and match onnxruntime within 5% of the largest
reference value on inputs in [-1, 1]."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import libnpu
from libnpu.compiler.lower import compile_model

ort = pytest.importorskip("onnxruntime")

SHAPE = [1, 3, 4, 5]


def _model(op: str, *, inputs: int = 1, consts: dict[str, np.ndarray] | None = None, opset: int = 17,
           shape: list[int] = SHAPE, extra_nodes: list | None = None, **attrs) -> onnx.ModelProto:
    names = ["x", "y", "z"][:inputs]
    consts = consts or {}
    node = helper.make_node(op, names + list(consts), ["out"], **attrs)
    graph = helper.make_graph(
        [node] + (extra_nodes or []), op,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _gelu_pattern(half_first: bool = False) -> onnx.ModelProto:
    """x * 0.5 * (1 + erf(x / sqrt(2))), as exporters write GELU (0.5 applied last or first)."""
    c = {"sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"])]
    if half_first:
        nodes += [helper.make_node("Mul", ["half", "x"], ["m"]), helper.make_node("Mul", ["a", "m"], ["out"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["out"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _hard_swish_pattern() -> onnx.ModelProto:
    """x * HardSigmoid(x, 1/6, 1/2), as exporters write HardSwish."""
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "h"], ["out"])]
    graph = helper.make_graph(nodes, "hswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _after_conv(op: str, consts: dict[str, np.ndarray] | None = None, **attrs) -> onnx.ModelProto:
    """Conv (NHWC inside the compiler) -> ``op``: the operator on a channels-last tensor."""
    rng = np.random.default_rng(3)
    consts = consts or {}
    inits = {"w": rng.normal(0, 0.4, (3, 3, 1, 1)).astype(np.float32), **consts}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node(op, ["c", *consts], ["out"], **attrs)]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_SLOPE = np.array([0.1, -0.3, 0.25], np.float32).reshape(3, 1, 1)
CASES = {
    "HardSigmoid": lambda: _model("HardSigmoid", alpha=0.3, beta=0.4),
    "HardSwish": lambda: _model("HardSwish"),
    "HardSwish-pattern": _hard_swish_pattern,
    "LeakyRelu": lambda: _model("LeakyRelu", alpha=0.1),
    "PRelu": lambda: _model("PRelu", consts={"slope": _SLOPE}),
    "Gelu": lambda: _model("Gelu", opset=20),
    "Gelu-tanh": lambda: _model("Gelu", opset=20, approximate="tanh"),
    "Erf-GELU": _gelu_pattern,
    "Erf-GELU-half-first": lambda: _gelu_pattern(half_first=True),
    "Erf": lambda: _model("Erf"),
    "Div": lambda: _model("Div", inputs=2),
    "Sub": lambda: _model("Sub", inputs=2),
    "Sqrt": lambda: _model("Sqrt"),
    "Reciprocal": lambda: _model("Reciprocal"),
    "Pow0.5": lambda: _model("Pow", consts={"half": np.float32(0.5)}),
    "Pow2": lambda: _model("Pow", consts={"two": np.float32(2)}),
    "Pow3": lambda: _model("Pow", consts={"three": np.float32(3)}),
    "Exp": lambda: _model("Exp"),
    "Log": lambda: _model("Log"),
    "Softplus": lambda: _model("Softplus"),
    "Clip": lambda: _model("Clip", consts={"lo": np.float32(-0.4), "hi": np.float32(0.7)}),
    "Clip-min": lambda: _model("Clip", consts={"lo": np.float32(-0.25)}),
    "LpNormalization": lambda: _model("LpNormalization", axis=1, p=2),
    "LpNormalization-last": lambda: _model("LpNormalization", axis=-1, p=2),
    "Abs": lambda: _model("Abs"),
    "Neg": lambda: _model("Neg"),
    "Max": lambda: _model("Max", inputs=2),
    "Min": lambda: _model("Min", inputs=3),
    "Elu": lambda: _model("Elu"),
    "Elu-alpha": lambda: _model("Elu", alpha=0.6),
    "Conv-PRelu": lambda: _after_conv("PRelu", {"slope": _SLOPE}),
    "Conv-LpNormalization": lambda: _after_conv("LpNormalization", axis=1, p=2),
    "Conv-Softmax-channels": lambda: _after_conv("Softmax", axis=1),
    "Conv-LogSoftmax-width": lambda: _after_conv("LogSoftmax", axis=3),
    "Conv-HardSwish": lambda: _after_conv("HardSwish"),
    "LogSoftmax": lambda: _model("LogSoftmax"),
    "LogSoftmax-axis1": lambda: _model("LogSoftmax", axis=1),
    "Softmax-axis1": lambda: _model("Softmax", axis=1),
    "Softmax-axis2": lambda: _model("Softmax", axis=2),
    "GlobalMaxPool": lambda: _model("GlobalMaxPool"),
    "GlobalMaxPool-1d": lambda: _model("GlobalMaxPool", shape=[1, 6, 20]),
    "Conv-GlobalMaxPool": lambda: _after_conv("GlobalMaxPool"),
}

# Inputs where the operator is defined (the calibration and the check use the same range).
_POSITIVE = {"Sqrt", "Log", "Reciprocal", "Pow0.5"}
_NONZERO_DIVISOR = {"Div"}


def _inputs(name: str, model: onnx.ModelProto, rng: np.random.Generator, corners: bool = False) -> list[np.ndarray]:
    """Uniform inputs in the operator's range, or (``corners``) each element at one end of it:
    calibration sees the extremes a convolution in front of the operator can reach."""
    feeds = []
    for i, vi in enumerate(model.graph.input):
        lo = 0.05 if name in _POSITIVE or (name in _NONZERO_DIVISOR and i == 1) else -1.0
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        x = rng.choice([lo, 1.0], shape) if corners else rng.uniform(lo, 1.0, shape)
        feeds.append(x.astype(np.float32))
    return feeds


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_op_on_the_chip_matches_onnxruntime(name: str, npu, tmp_path) -> None:
    model = CASES[name]()
    rng = np.random.default_rng(21)
    calibration = [_inputs(name, model, rng, corners=k % 2 == 1) for k in range(16)]
    loadable = compile_model(model.SerializeToString(), calibration, kind="onnx")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = libnpu.load(loadable, devroot=npu.devroot)
    try:
        for _ in range(3):
            feeds = _inputs(name, model, rng)
            (ref,) = session.run(None, {vi.name: x for vi, x in zip(model.graph.input, feeds)})
            (got,) = compiled.infer(feeds, dequantized=True)
            err = np.abs(got.reshape(ref.shape) - ref).max()
            assert err <= 0.05 * np.abs(ref).max(), f"{name}: max |err| {err} vs max |ref| {np.abs(ref).max()}"
    finally:
        compiled.close()


@pytest.mark.parametrize("half_first", [False, True])
def test_erf_gelu_pattern_becomes_one_gelu(half_first: bool) -> None:
    from libnpu.compiler.onnx_import import import_onnx
    from libnpu.compiler.optimize import optimize
    g = optimize(import_onnx(_gelu_pattern(half_first)))
    assert g.op_counts() == {"GELU": 1} and g.ops[0].attrs == {"approximate": False}


def test_hard_sigmoid_times_x_becomes_one_hard_swish() -> None:
    from libnpu.compiler.onnx_import import import_onnx
    from libnpu.compiler.optimize import optimize
    assert optimize(import_onnx(_hard_swish_pattern())).op_counts() == {"HARD_SWISH": 1}


def test_clip_bounds_are_exact_on_the_grid() -> None:
    """Clip with any bounds runs on the RELU descriptor: the clamp lands on the bounds."""
    from libnpu.compiler.frontend import to_int8_graph
    g = to_int8_graph(CASES["Clip"]().SerializeToString(), kind="onnx")
    (clip,) = [op for op in g.ops if op.type == "CLIP"]
    assert clip.attrs == {"min": pytest.approx(-0.4), "max": pytest.approx(0.7)}


@pytest.mark.parametrize("op,attrs,message", [
    ("Softmax", dict(axis=1, opset=11), "before opset 13"),
    ("LpNormalization", dict(axis=2, p=2), "over axis 2"),
    ("LpNormalization", dict(axis=1, p=1), "p=1"),
])
def test_unsupported_variants_are_named(op, attrs, message) -> None:
    from libnpu.compiler.onnx_import import ONNXImportError, import_onnx
    with pytest.raises(ONNXImportError, match=message):
        opset = attrs.pop("opset", 17)
        import_onnx(_model(op, opset=opset, **attrs))


@pytest.mark.parametrize("shape", [SHAPE, [1, 6, 20]])
def test_global_max_pool_is_one_reduce_max(shape) -> None:
    """GlobalMaxPool (after magika's 1-D convolution) runs on the chip, not the CPU."""
    from libnpu.compiler.onnx_import import import_onnx
    counts = import_onnx(_model("GlobalMaxPool", shape=shape)).op_counts()
    assert counts["REDUCE_MAX"] == 1 and set(counts) <= {"REDUCE_MAX", "TRANSPOSE"}   # NCHW <-> NHWC at the edges


@pytest.mark.parametrize("op, neutral", [("Max", -np.inf), ("Min", np.inf)])
def test_max_with_minus_infinity_is_its_other_input(op, neutral) -> None:
    """jax's softmax takes max(-inf, max(x)): no op, where quantizing -inf failed (CPU fallback)."""
    from libnpu.compiler.onnx_import import import_onnx
    from libnpu.compiler.optimize import optimize
    model = _model(op, consts={"inf": np.float32(neutral)}, extra_nodes=[helper.make_node("Relu", ["out"], ["r"])])
    model.graph.output[0].name = "r"
    assert optimize(import_onnx(model)).op_counts() == {"RELU": 1}


def test_pow_by_other_exponents_is_refused() -> None:
    from libnpu.compiler.onnx_import import ONNXImportError, import_onnx
    with pytest.raises(ONNXImportError, match="Pow by"):
        import_onnx(_model("Pow", consts={"e": np.float32(4)}))
