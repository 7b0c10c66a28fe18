"""A LayerNorm whose variance is ``E[x^2] - E[x]^2`` (Flax's, as jax2tf exports it: magika)
is quantized in the centred form ``E[(x - E[x])^2]`` (libnpu/compiler/variance.py): same
float function, an int8 result close to float where the difference of two large terms
was not."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.accuracy import output_scores
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.variance import center_variances

SHAPE = [1, 32, 48]


def flax_layer_norm(reduce: str, axis: int = -1) -> onnx.ModelProto:
    """``(x - m) / sqrt(max(E[x^2] - m^2, 0) + eps)`` with ``m = E[x]``, the means as
    ReduceMean or as ReduceSum times ``1/n`` (jax2tf), over ``axis`` (keepdims 0 for the sums)."""
    n = helper.make_node
    count = SHAPE[axis]
    consts = {"inv_n": np.float32(1 / count), "zero": np.float32(0), "eps": np.float32(1e-6),
              "one": np.float32(1), "axes": np.array([axis], np.int64)}
    if reduce == "mean":
        means = [n("ReduceMean", ["x", "axes"], ["m"], keepdims=1), n("Mul", ["x", "x"], ["xx"]),
                 n("ReduceMean", ["xx", "axes"], ["m2"], keepdims=1)]
        opset = 18
    else:
        keep = [d if i != axis % len(SHAPE) else 1 for i, d in enumerate(SHAPE)]
        consts["keep"] = np.array(keep, np.int64)
        means = [n("ReduceSum", ["x", "axes"], ["s"], keepdims=0), n("Mul", ["s", "inv_n"], ["m0"]),
                 n("Mul", ["x", "x"], ["xx"]), n("ReduceSum", ["xx", "axes"], ["s2"], keepdims=0),
                 n("Mul", ["s2", "inv_n"], ["m20"]), n("Reshape", ["m0", "keep"], ["m"]),
                 n("Reshape", ["m20", "keep"], ["m2"])]
        opset = 13
    nodes = means + [n("Mul", ["m", "m"], ["mm"]), n("Sub", ["m2", "mm"], ["var"]), n("Max", ["zero", "var"], ["v"]),
                     n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Reciprocal", ["sd"], ["r"]),
                     n("Sub", ["x", "m"], ["d"]), n("Mul", ["d", "r"], ["out"])]
    graph = helper.make_graph(nodes, "layer_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _data(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Values around 40 with a spread of 1 to 3 per row: the means squared (~1600) far above the variances."""
    rng = np.random.default_rng(seed)
    return [{"x": (40 + rng.uniform(1, 3, SHAPE[:-1] + [1]) * rng.standard_normal(SHAPE)).astype(np.float32)}
            for _ in range(count)]


@pytest.mark.parametrize("reduce, axis", [("mean", -1), ("sum", -1), ("sum", 1)])
def test_variance_is_centred_with_the_same_float_function(reduce, axis) -> None:
    graph = import_onnx(flax_layer_norm(reduce, axis))
    assert center_variances(graph.copy()) == 1
    g = optimize(graph)
    assert center_variances(g) == 0          # none left after the optimizer
    feed = _data(1, seed=5)[0]
    x = feed["x"].astype(np.float64)
    m = x.mean(axis=axis, keepdims=True)
    want = (x - m) / np.sqrt(((x - m) ** 2).mean(axis=axis, keepdims=True) + 1e-6)
    np.testing.assert_allclose(FloatInterpreter(g).run(feed)[g.outputs[0]], want, atol=2e-3)


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_centred_variance_keeps_int8_close_to_float(reduce) -> None:
    """cosine >= 0.99 on unseen rows (0.9989; the uncentred form 0.935)."""
    data = _data(10)
    graph = import_onnx(flax_layer_norm(reduce))
    q = to_int8_graph(graph, data[:6], recipe="fast")
    assert output_scores(optimize(graph), q, data[6:])[q.outputs[0]] >= 0.99


@pytest.mark.parametrize("axis, bias", [(-1, True), (1, False)])
def test_onnx_layer_normalization_matches_onnxruntime(axis, bias) -> None:
    """ONNX LayerNormalization (PyTorch's nn.LayerNorm at opset 17) imports as the ops it
    computes, the variance centred, with nothing left for the CPU: float as onnxruntime,
    int8 cosine >= 0.99 on unseen inputs."""
    ort = pytest.importorskip("onnxruntime")
    normalized = SHAPE[axis % 3:]
    consts = {"scale": np.linspace(0.5, 1.5, np.prod(normalized)).reshape(normalized).astype(np.float32)}
    if bias:
        consts["bias"] = np.full(normalized, 0.25, np.float32)
    node = helper.make_node("LayerNormalization", ["x", *consts], ["out"], axis=axis, epsilon=1e-5)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    imported = import_onnx(model)
    assert "HOST" not in imported.op_counts() and imported.op_counts()["RSQRT"] == 1
    data = _data(10, seed=2)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, data[0])
    np.testing.assert_allclose(FloatInterpreter(optimize(imported)).run(data[0])["out"], want, atol=1e-4)
    q = to_int8_graph(imported, data[:6], recipe="fast")
    assert output_scores(optimize(imported), q, data[6:])[q.outputs[0]] >= 0.99


def test_graph_walked_once_per_rewrite(monkeypatch) -> None:
    """The producers of a graph's tensors are built once for the pass and again only after a
    rewrite, not once per SUB: an unrolled GRU (a SUB a step, thousands of ops) spent most
    of its optimize there, every quantization of an escalating compile."""
    n = helper.make_node
    subs = [n("Sub", [f"x{k}" if k else "x", "c"], [f"x{k + 1}"]) for k in range(40)]
    graph = helper.make_graph(subs, "subs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("x40", TensorProto.FLOAT, SHAPE)],
                              [numpy_helper.from_array(np.float32(0.5), "c")])
    chain = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    norm = import_onnx(flax_layer_norm("mean"))
    walks = []
    walk = type(chain).producers

    def counted(g):
        walks.append(g)
        return walk(g)
    monkeypatch.setattr(type(chain), "producers", counted)
    assert center_variances(chain) == 0
    assert len(walks) == 1          # 40 before
    walks.clear()
    assert center_variances(norm) == 1
    assert len(walks) <= 2          # the pass's, and one after its rewrite
