"""GELU however exporters spell it becomes one GELU (libnpu/compiler/gelu_fusion.py): the
tanh approximation as jax2tf writes it (magika) and as PyTorch writes it (Pow 3), the erf
form; and the int8 result of the tanh form stays close to float where its ops one by one
did not (x^3 spans a thousand times x)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.gelu_fusion import gelu_reference
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize

SHAPE = [1, 16, 24]
_K = float(np.sqrt(2 / np.pi))


def _model(nodes: list, consts: dict[str, float], outputs: tuple[str, ...] = ("out",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tanh_as_jax(extra_output: bool = False) -> onnx.ModelProto:
    """jax2tf's ``0.5x(1 + tanh(k(x + 0.044715 x^3)))``: constants first, x^3 as x * (x * cx)."""
    n = helper.make_node
    nodes = [n("Mul", ["c", "x"], ["cx"]), n("Mul", ["x", "cx"], ["cx2"]), n("Mul", ["x", "cx2"], ["cx3"]),
             n("Add", ["x", "cx3"], ["inner"]), n("Mul", ["k", "inner"], ["scaled"]), n("Tanh", ["scaled"], ["t"]),
             n("Add", ["one", "t"], ["t1"]), n("Mul", ["half", "t1"], ["h"]), n("Mul", ["x", "h"], ["out"])]
    return _model(nodes, {"c": 0.044715, "k": _K, "one": 1.0, "half": 0.5},
                  ("out", "cx3") if extra_output else ("out",))


def tanh_as_pytorch(coefficient: float = 0.044715) -> onnx.ModelProto:
    """``0.5 * x * (1 + tanh(k * (x + c * pow(x, 3))))`` as torch.onnx writes it."""
    n = helper.make_node
    nodes = [n("Pow", ["x", "three"], ["p"]), n("Mul", ["p", "c"], ["cp"]), n("Add", ["x", "cp"], ["inner"]),
             n("Mul", ["inner", "k"], ["scaled"]), n("Tanh", ["scaled"], ["t"]), n("Add", ["t", "one"], ["t1"]),
             n("Mul", ["x", "half"], ["h"]), n("Mul", ["h", "t1"], ["out"])]
    return _model(nodes, {"three": 3.0, "c": coefficient, "k": _K, "one": 1.0, "half": 0.5})


def erf_with_div() -> onnx.ModelProto:
    """``x * 0.5 * (1 + erf(x / sqrt2))`` with the 0.5 folded into the erf side."""
    n = helper.make_node
    nodes = [n("Div", ["x", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["a"]),
             n("Mul", ["a", "half"], ["h"]), n("Mul", ["h", "x"], ["out"])]
    return _model(nodes, {"sqrt2": float(np.sqrt(2)), "one": 1.0, "half": 0.5})


@pytest.mark.parametrize("build, approximate", [(tanh_as_jax, True), (tanh_as_pytorch, True), (erf_with_div, False)])
def test_spellings_become_one_gelu(build, approximate) -> None:
    g = optimize(import_onnx(build()))
    assert g.op_counts() == {"GELU": 1} and g.ops[0].attrs == {"approximate": approximate}
    x = np.linspace(-6, 6, np.prod(SHAPE)).astype(np.float32).reshape(SHAPE)
    got = FloatInterpreter(g).run({"x": x})[g.outputs[0]]
    np.testing.assert_allclose(got, gelu_reference(x, approximate), atol=1e-5)


def test_not_gelu_stays_as_it_is() -> None:
    """A coefficient other than GELU's, or an intermediate value the model also returns: no GELU."""
    assert "GELU" not in optimize(import_onnx(tanh_as_pytorch(coefficient=0.06))).op_counts()
    counts = optimize(import_onnx(tanh_as_jax(extra_output=True))).op_counts()
    assert "GELU" not in counts and counts["TANH"] == 1


def test_tanh_gelu_of_a_wide_tensor_stays_accurate_in_int8() -> None:
    """x over [-70, 75] (magika's GELU after its convolution): x^3 reaches 1e5; as one GELU
    the int8 graph keeps cosine >= 0.999 with float on unseen inputs (0.99995; op by op 0.9956)."""
    rng = np.random.default_rng(0)
    data = [{"x": (rng.standard_normal(SHAPE) * 20 + 3).astype(np.float32)} for _ in range(10)]
    graph = import_onnx(tanh_as_jax())
    q = to_int8_graph(graph, data[:6], recipe="fast")
    assert output_scores(optimize(graph), q, data[6:])[q.outputs[0]] >= 0.999
