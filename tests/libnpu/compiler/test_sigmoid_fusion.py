"""A sigmoid however a model spells it becomes one LOGISTIC (libnpu/compiler/sigmoid_fusion.py):
``1 / (1 + exp(-x))``, ``exp(x) / (1 + exp(x))``, a slope and a shift (BirdNET's "flat
sigmoid" ``1 / (1 + exp(-0.5 * clip(x, -15, 15)))``); a swish or an intermediate value read
elsewhere keeps the ops. The location model of that kind compiles for the chip and holds
unseen points: ``test_honest_fidelity``."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize

SHAPE = [1, 4, 40]
n = helper.make_node


def _model(nodes: list, consts: dict[str, float], outputs: tuple[str, ...] = ("out",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "sigmoid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reciprocal(outputs: tuple[str, ...] = ("out",)) -> onnx.ModelProto:
    """``1 / (1 + exp(-x))``."""
    return _model([n("Neg", ["x"], ["m"]), n("Exp", ["m"], ["e"]), n("Add", ["e", "one"], ["d"]),
                   n("Div", ["one", "d"], ["out"])], {"one": 1.0}, outputs)


def ratio() -> onnx.ModelProto:
    """``exp(x) / (1 + exp(x))``, the constant first."""
    return _model([n("Exp", ["x"], ["e"]), n("Add", ["one", "e"], ["d"]), n("Div", ["e", "d"], ["out"])],
                  {"one": 1.0})


def flat() -> onnx.ModelProto:
    """BirdNET's ``1 / (1 + exp(-0.5 * clip(x, -15, 15)))``, then a shift ``x - 2`` before it."""
    return _model([n("Clip", ["x", "lo", "hi"], ["c"]), n("Sub", ["c", "two"], ["s"]), n("Mul", ["s", "k"], ["m"]),
                   n("Exp", ["m"], ["e"]), n("Add", ["e", "one"], ["d"]), n("Div", ["one", "d"], ["out"])],
                  {"lo": -15.0, "hi": 15.0, "two": 2.0, "k": -0.5, "one": 1.0})


def swish() -> onnx.ModelProto:
    """``x / (1 + exp(-x))``: not a sigmoid."""
    return _model([n("Neg", ["x"], ["m"]), n("Exp", ["m"], ["e"]), n("Add", ["e", "one"], ["d"]),
                   n("Div", ["x", "d"], ["out"])], {"one": 1.0})


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


@pytest.mark.parametrize("build, want, rest", [
    (reciprocal, _sigmoid, {}), (ratio, _sigmoid, {}),
    (flat, lambda x: _sigmoid(0.5 * (np.clip(x, -15, 15) - 2)), {"CLIP": 1, "MUL": 1, "ADD": 1})])
def test_spellings_become_one_logistic(build, want, rest) -> None:
    g = optimize(import_onnx(build()))
    assert g.op_counts() == {"LOGISTIC": 1, **rest} and g.producers()[g.outputs[0]].type == "LOGISTIC"
    x = np.linspace(-30, 30, np.prod(SHAPE)).astype(np.float32).reshape(SHAPE)
    got = FloatInterpreter(g).run({"x": x})[g.outputs[0]]
    np.testing.assert_allclose(got, want(x), atol=2e-6)


def test_not_a_sigmoid_stays_as_it_is() -> None:
    """A swish, or an intermediate value the model also returns: the ops stay."""
    assert "LOGISTIC" not in optimize(import_onnx(swish())).op_counts()
    counts = optimize(import_onnx(reciprocal(("out", "e")))).op_counts()
    assert "LOGISTIC" not in counts and counts["EXP"] == 1
