"""Nodes listed after their readers (an fp16 conversion's Casts last): sorted at import, numbered as the file's."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.onnx_import import import_onnx_sources
from libnpu.compiler.onnx_order import NodeCycleError, sort_nodes

ort = pytest.importorskip("onnxruntime")


def _fp16_casts_last() -> onnx.ModelProto:
    """float32 in and out, float16 inside: the input and output Casts are the file's last
    nodes, as onnxconverter-common's keep_io_types conversion writes them."""
    w = np.random.default_rng(3).standard_normal((4, 3, 3, 3)).astype(np.float16) * np.float16(0.3)
    nodes = [
        helper.make_node("Conv", ["x16", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y16"], name="pool"),
        helper.make_node("Cast", ["x"], ["x16"], name="in_cast", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["y16"], ["y"], name="out_cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "casts_last",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_nodes_after_their_readers_import_and_keep_file_numbers():
    model = _fp16_casts_last()
    graph, sources = import_onnx_sources(model, fallback=True)     # as compiles do
    # the Casts between float widths are no ops: the float16 input cast ran on the CPU, and
    # its float16 tensor made the CPU float step's LiteRT cut refuse the convolutions after it
    assert not [s for s in sources if s.reason] and {graph.tensors[t].dtype for t in graph.tensors} == {"float32"}
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_float(graph, [x])[graph.outputs[0]]
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=2e-2, atol=2e-2)   # float16 weights, float IR
    by_index = {s.index: s.op for s in sources}
    assert by_index == {0: "Conv", 1: "Relu", 2: "GlobalAveragePool", 3: "Cast", 4: "Cast"}
    # placement's numbers are the file's: node 0 is the Conv, even though it imports after the Cast
    _, placed = import_onnx_sources(model, fallback=True, force_host={0: "asked"})
    assert [s.op for s in placed if s.reason == "asked"] == ["Conv"]


def test_subgraph_nodes_sorted_and_cycle_refused():
    then_nodes = [helper.make_node("Relu", ["t"], ["out"], name="late_reader"),
                  helper.make_node("Neg", ["a"], ["t"], name="producer")]
    then = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["a"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [2])])
    top = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
                             helper.make_node("Identity", ["x"], ["a"], name="made_last")], "g",
                            [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                             helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    assert sort_nodes(top) == [1, 0]        # the If reads 'a' inside its branches: after its producer
    branch = next(a.g for a in top.node[1].attribute if a.name == "then_branch")
    assert [n.name for n in branch.node] == ["producer", "late_reader"]
    assert sort_nodes(top) is None          # in order now

    loop = helper.make_graph([helper.make_node("Add", ["x", "q"], ["p"], name="first"),
                              helper.make_node("Relu", ["p"], ["q"], name="second"),
                              helper.make_node("Neg", ["q"], ["z"], name="after")], "loop",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    with pytest.raises(NodeCycleError, match=r"cycle.*Add node 0 \('first'\), Relu node 1 \('second'\)$"):
        sort_nodes(loop, "loop")
