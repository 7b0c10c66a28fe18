"""Hard-swish and hard-sigmoid however exporters spell them become one op
(libnpu/compiler/hard_swish_fusion.py): paddle2onnx's ``x * clip(x + 3, 0, 6) / 6``,
PyTorch's ``x * relu6(x + 3) * (1/6)``, ``x * HardSigmoid(x)``, ``relu6(x + 3) / 6`` and
``clip(0.2x + 0.5, 0, 1)``; an intermediate read elsewhere or another constant keeps the
ops. The fused int8 ops match onnxruntime within test_onnx_ops' single-op bar."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.lower import lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import quantize_model
from tests.support.chip_memory import ChipMemory, run_loadable

ort = pytest.importorskip("onnxruntime")

SHAPE = [1, 8, 6, 6]
n = helper.make_node
#: the input spread over both flat tails (-5..5) before the spelling under test
WIDEN = [n("Mul", ["x0", "five"], ["x"])]


def _model(nodes: list, consts: dict[str, float], outputs: tuple[str, ...] = ("out",)) -> onnx.ModelProto:
    graph = helper.make_graph(WIDEN + nodes, "hs", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k)
                               for k, v in dict(consts, five=5.0).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def paddle(outputs: tuple[str, ...] = ("out",), three: float = 3.0) -> onnx.ModelProto:
    """paddle2onnx: ``Mul(x, Clip(Add(x, 3), 0, 6))`` then ``Div 6``."""
    return _model([n("Add", ["x", "three"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]),
                   n("Mul", ["x", "c"], ["m"]), n("Div", ["m", "six"], ["out"])],
                  {"three": three, "zero": 0.0, "six": 6.0}, outputs)


def pytorch() -> onnx.ModelProto:
    """``x * relu6(x + 3) * (1/6)``, constants first."""
    return _model([n("Add", ["three", "x"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]),
                   n("Mul", ["c", "x"], ["m"]), n("Mul", ["sixth", "m"], ["out"])],
                  {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1 / 6})


def gate_first() -> onnx.ModelProto:
    """``(relu6(x + 3) / 6) * x``: the hard-sigmoid computed before the product."""
    return _model([n("Add", ["x", "three"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]),
                   n("Div", ["c", "six"], ["d"]), n("Mul", ["d", "x"], ["out"])],
                  {"three": 3.0, "zero": 0.0, "six": 6.0})


def hard_sigmoid_op() -> onnx.ModelProto:
    """``x * HardSigmoid(x)`` with alpha 1/6, beta 1/2."""
    return _model([n("HardSigmoid", ["x"], ["s"], alpha=1 / 6, beta=0.5), n("Mul", ["x", "s"], ["out"])], {})


def relu6_sigmoid() -> onnx.ModelProto:
    """hard-sigmoid as ``relu6(x + 3) / 6``."""
    return _model([n("Add", ["x", "three"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]),
                   n("Div", ["c", "six"], ["out"])], {"three": 3.0, "zero": 0.0, "six": 6.0})


def keras_sigmoid() -> onnx.ModelProto:
    """hard-sigmoid as ``clip(0.2 * x + 0.5, 0, 1)``."""
    return _model([n("Mul", ["x", "k"], ["s"]), n("Add", ["s", "half"], ["a"]),
                   n("Clip", ["a", "zero", "one"], ["out"])], {"k": 0.2, "half": 0.5, "zero": 0.0, "one": 1.0})


#: (model, the op it becomes, its attrs): a hard-sigmoid takes the widening MUL in too
#: (one table of ``x0``), a hard-swish reads the MUL's result.
SPELLINGS = [(paddle, "HARD_SWISH", {}), (pytorch, "HARD_SWISH", {}), (gate_first, "HARD_SWISH", {}),
             (hard_sigmoid_op, "HARD_SWISH", {}), (relu6_sigmoid, "HARD_SIGMOID", dict(alpha=5 / 6, beta=0.5)),
             (keras_sigmoid, "HARD_SIGMOID", dict(alpha=1.0, beta=0.5))]


@pytest.fixture(scope="module")
def mem(tmp_path_factory) -> ChipMemory:
    return ChipMemory(tmp_path_factory.mktemp("chip"), size=8 << 20)


@pytest.mark.parametrize("build, op_type, attrs", SPELLINGS, ids=[s[0].__name__ for s in SPELLINGS])
def test_spelling_becomes_one_op_and_runs_like_onnxruntime(mem, build, op_type, attrs) -> None:
    model = build()
    g = optimize(import_onnx(model))
    fused = g.ops[-1]
    if op_type == "HARD_SWISH":
        assert g.op_counts() == {"MUL": 1, op_type: 1} and fused.inputs == [g.ops[0].outputs[0]]
    else:
        assert g.op_counts() == {op_type: 1} and fused.inputs == ["x0"]
    for key, value in attrs.items():
        assert fused.attrs[key] == pytest.approx(value, abs=1e-6)
    ld = lower(quantize_model(import_onnx(model), random_count=64, seed=0))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).uniform(-1, 1, SHAPE).astype(np.float32)
    (want,), (got,) = sess.run(None, {"x0": x}), run_loadable(mem, ld, [x])
    assert float(np.abs(got.reshape(want.shape) - want).max()) <= 0.05 * float(np.abs(want).max()) + 1e-6


def test_intermediate_read_elsewhere_or_other_constant_keeps_the_ops() -> None:
    shared = optimize(import_onnx(paddle(outputs=("out", "c"))))
    assert "HARD_SWISH" not in shared.op_counts() and shared.op_counts()["MUL"] == 3
    shifted = optimize(import_onnx(paddle(three=2.0)))
    assert "HARD_SWISH" not in shifted.op_counts() and shifted.op_counts()["MUL"] == 3
