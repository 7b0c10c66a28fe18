"""The ONNX front end's folding (``libnpu/compiler/onnx_fold.py``) on graphs written the
way PyTorch's exporter writes them (``tests/support/exporter_patterns.py``): every model
is compared with onnxruntime running the original, unfolded file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import libnpu
from libnpu.compiler.float_ref import run_float
from libnpu.compiler.ir import Graph
from libnpu.compiler.onnx_fold import ONNXShapeWarning, fold_onnx
from libnpu.compiler.onnx_import import ONNXImportError, import_onnx, import_onnx_sources
from libnpu.compiler.placement import NPU, plan_placement
from tests.support import exporter_patterns as patterns
from tests.support.model_builders import _Builder

ort = pytest.importorskip("onnxruntime")


def _ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """onnxruntime running every node as written: its own constant folding off (it folds
    Shape from a stale value_info and returns [2, 4] where running the nodes gives [1, 4])."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _float_matches_ort(model: onnx.ModelProto, x: np.ndarray, graph: Graph | None = None) -> None:
    graph = graph or import_onnx(model)
    ours = run_float(graph, [x])
    for name, ref in zip(graph.outputs, _ort(model, x)):
        assert ours[name].shape == ref.shape
        np.testing.assert_allclose(ours[name], ref, rtol=1e-5, atol=1e-5)


def _placements(model: onnx.ModelProto) -> list:
    placements = plan_placement(model.SerializeToString()).placements
    assert len(placements) == len(model.graph.node)
    return placements


def _cpu(model: onnx.ModelProto) -> list[tuple[int, str, str]]:
    return [(p.index, p.op, p.reason) for p in _placements(model) if p.device != NPU]


def test_torch_pad_compiles_with_no_cpu_op_and_matches_onnxruntime(npu, tmp_path) -> None:
    """F.pad with pads from Shape -> Mod arithmetic and torch's paddings chain
    (ConstantOfShape, Concat, Reshape, Slice of step -1, Transpose): one PAD on the chip
    ("Pad node ... shape ... unknown or dynamic" before)."""
    model = patterns.torch_pad_to_multiple()
    assert _cpu(model) == []
    assert import_onnx(model).op_counts() == {"TRANSPOSE": 2, "PAD": 1, "CONV_2D": 1}
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1, 3, 10, 13)).astype(np.float32)
    _float_matches_ort(model, x)
    calibration = [[rng.uniform(-1, 1, x.shape).astype(np.float32)] for _ in range(32)]
    compiled = libnpu.load(model.SerializeToString(), devroot=npu.devroot, calibration=calibration,
                           cache_dir=tmp_path / "cache")
    try:
        assert compiled.loadable is not None and not compiled.loadable.host_steps
        (got,), (ref,) = compiled.infer([x], dequantized=True), _ort(model, x)
        assert got.shape == ref.shape == (1, 4, 16, 16)
        assert float(np.abs(got - ref).max()) <= 0.05 * float(np.abs(ref).max())
    finally:
        compiled.close()


@pytest.mark.parametrize("opset", [11, 12])
def test_torch_pad_at_older_opsets(opset) -> None:
    """Each node is evaluated at the model's opset: Unsqueeze's axes attribute (opset < 13,
    tf2onnx's and older torch exports) folds as well."""
    model = patterns.torch_pad_to_multiple(opset=opset)
    assert import_onnx(model).op_counts() == {"TRANSPOSE": 2, "PAD": 1, "CONV_2D": 1}
    _float_matches_ort(model, np.random.default_rng(9).uniform(-1, 1, (1, 3, 10, 13)).astype(np.float32))


def test_torch_interpolate_size_from_shape_is_one_resize() -> None:
    """Resize's ``sizes`` from Shape -> Slice -> Cast -> Mul -> Floor -> Cast -> Concat
    ("unsupported op Floor" before): one nearest-neighbour resize on the chip."""
    model = patterns.torch_interpolate()
    assert import_onnx(model).op_counts() == {"TRANSPOSE": 2, "RESIZE_NEAREST_NEIGHBOR": 1}
    assert _cpu(model) == []
    _float_matches_ort(model, np.random.default_rng(11).standard_normal((1, 3, 5, 6)).astype(np.float32))


def test_yolov8_head_keeps_no_constant_op_on_the_cpu() -> None:
    """Anchors and strides from Shape / Range / Expand / ConstantOfShape arithmetic fold
    into constants: every node runs on the NPU or nowhere (9 constant ops on the CPU in 7
    partitions on a real YOLOv8 before), and the float graph matches onnxruntime."""
    model = patterns.yolov8_head()
    assert _cpu(model) == []
    graph, sources = import_onnx_sources(model)
    kinds = {"Shape", "Gather", "Range", "Cast", "Expand", "ConstantOfShape", "Unsqueeze"}
    constant_nodes = [s for s in sources if s.op in kinds]
    assert len(constant_nodes) > 20 and all(not s.ir_ops for s in constant_nodes)
    assert not any(op.type in ("GATHER", "BROADCAST_TO", "HOST") for op in graph.ops)
    _float_matches_ort(model, np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32))


@pytest.mark.parametrize("channels,ops", [(3, {"MUL": 1, "ADD": 1, "RELU": 1}), (4, {"RELU": 1})])
def test_if_on_a_constant_condition_is_inlined(channels, ops) -> None:
    """``If(Equal(x.shape[1], 3))``: the branch taken replaces the If, reading the outer
    scope and its own initializers; its ops count as the If's (one placement)."""
    model = patterns.if_on_shape()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = channels
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = channels
    assert import_onnx(model).op_counts() == ops
    assert _cpu(model) == []
    _float_matches_ort(model, np.random.default_rng(5).standard_normal((1, channels, 4, 4)).astype(np.float32))


def test_declared_output_shape_that_inference_contradicts_warns() -> None:
    """A free batch fixed to 1 while the output and an intermediate still declare the
    exported batch 2: onnxruntime warns and runs; so does the import ("ShapeInferenceError
    ... (1) vs (2)" before). The warning names where the disagreement starts (r), not each
    value computed from it; Shape(r) folds to r's real shape."""
    model = patterns.declared_output_mismatch()
    with pytest.warns(ONNXShapeWarning) as warned:
        graph = import_onnx(model)
    assert sorted(str(w.message) for w in warned) == [
        f"model: {kind} {name!r} is declared [2, 4] but its inputs make it [1, 4]; using the inferred shape "
        "(as onnxruntime does)" for kind, name in (("output", "y"), ("value_info", "r"))]
    assert graph.tensors[graph.outputs[0]].shape == (1, 4)
    _float_matches_ort(model, np.random.default_rng(6).standard_normal((1, 4)).astype(np.float32), graph)


def _loop_with_a_stale_body_shape() -> onnx.ModelProto:
    """A Loop whose body declares its carried value [1, 5] while its inputs make it [1, 4]."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("Add", ["acc_in", "r"], ["acc_out"])],
        "body",
        [h.make_tensor_value_info("i", TensorProto.INT64, []),
         h.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         h.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4])],
        [h.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         h.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 5])])
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Loop", ["n", "", "r"], ["acc"], body=body),
         h.make_node("Mul", ["acc", "two"], ["y"])],
        "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [h.make_tensor("n", TensorProto.INT64, [], [3]), h.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_subgraph_shape_that_inference_contradicts_warns() -> None:
    """onnxruntime merges a Loop body's stale declared shape leniently and runs the model;
    the import refused it ("ONNX shape inference failed: ... (4) vs (5)") before."""
    model = _loop_with_a_stale_body_shape()
    with pytest.warns(ONNXShapeWarning, match="inside a subgraph.*'acc_out'"):
        graph = import_onnx_sources(model, fallback=True)[0]      # the Loop runs on the CPU
    assert graph.tensors[graph.outputs[0]].shape == (1, 4)
    _float_matches_ort(model, np.random.default_rng(7).standard_normal((1, 4)).astype(np.float32), graph)


def test_where_on_a_constant_condition_is_its_operand() -> None:
    """``Where(Size(x) > 0, x, 0)``: the condition folds to true, the Where to its first
    operand (it had no NPU operator)."""
    b = _Builder(30)
    b.node("Size", ["x"], "n")
    b.node("Greater", ["n", b.const("zero", np.int64(0))], "nonempty")
    b.node("Where", ["nonempty", "x", b.const("fill", np.zeros((1, 6), np.float32))], "w")
    b.node("Relu", ["w"], "y")
    model = b.model("where", {"x": [1, 6]}, {"y": [1, 6]})
    assert import_onnx(model).op_counts() == {"RELU": 1}
    assert _cpu(model) == []
    _float_matches_ort(model, np.random.default_rng(8).standard_normal((1, 6)).astype(np.float32))


def test_dead_nodes_and_unused_initializers_go() -> None:
    """What only folded nodes read is dropped with them; what the graph still reads stays."""
    model, origin = fold_onnx(patterns.torch_pad_to_multiple())
    assert [n.op_type for n in model.graph.node] == ["Pad", "Conv"]
    assert {i.name for i in model.graph.initializer} == {"pads", "pad_value", "w", "bias"}
    assert origin[("y",)] == (len(patterns.torch_pad_to_multiple().graph.node) - 1, "Conv")


def test_a_free_dim_leaves_its_shape_arithmetic_unfolded() -> None:
    """Folding needs the dims fixed: Shape of a free dim stays (the importer, which fixes
    them first, folds it); what does not depend on it still folds."""
    b = _Builder(31)
    b.node("Shape", ["x"], "s")
    b.node("Reshape", ["x", "s"], "r")
    b.node("Add", [b.const("one", np.int64(1)), b.const("two", np.int64(2))], "three")
    b.node("Cast", ["three"], "f", to=TensorProto.FLOAT)
    b.node("Mul", ["r", "f"], "y")
    graph = h.make_graph(b.nodes, "free", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], b.inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    folded, _ = fold_onnx(model)
    assert [n.op_type for n in folded.graph.node] == ["Shape", "Reshape", "Mul"]
    assert import_onnx(model).op_counts() == {"RESHAPE": 1, "MUL": 1}


def test_a_huge_constant_is_not_folded() -> None:
    """A model's ConstantOfShape of 8192 x 8193 floats (268 MB; a few more digits and the
    import would exhaust memory), its shape itself folded first, is left for the importer,
    which refuses it by name."""
    b = _Builder(32)
    b.node("Add", [b.const("big", np.array([8191, 8192], np.int64)), b.const("one", np.int64(1))], "shape")
    cos = h.make_node("ConstantOfShape", ["shape"], ["zeros"],
                      value=h.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
    b.nodes.append(cos)
    b.node("ReduceMax", ["zeros"], "m", keepdims=0)
    b.node("Add", ["x", "m"], "y")
    model = b.model("huge", {"x": [1, 4]}, {"y": [1, 4]})
    folded, _ = fold_onnx(model)
    assert [n.op_type for n in folded.graph.node] == ["ConstantOfShape", "ReduceMax", "Add"]
    with pytest.raises(ONNXImportError, match="ConstantOfShape"):
        import_onnx(model)


def _branch(nodes: list[onnx.NodeProto], outputs: list[str], consts: dict[str, float]) -> onnx.GraphProto:
    return h.make_graph(nodes, "branch", [], [h.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                        [onnx.numpy_helper.from_array(np.float32(v), k) for k, v in consts.items()])


def test_nested_ifs_are_inlined_with_their_own_names() -> None:
    """An If in the branch taken is inlined in its turn; a name the inner branch defines
    again ("t") is the inner one there, the outer branch's elsewhere."""
    inner = h.make_node("If", ["c"], ["u"], then_branch=_branch([h.make_node("Mul", ["x", "k2"], ["t"])], ["t"],
                                                                {"k2": 3.0}),
                        else_branch=_branch([h.make_node("Neg", ["x"], ["t2"])], ["t2"], {}))
    outer_then = _branch([h.make_node("Shape", ["x"], ["s"]), h.make_node("Size", ["s"], ["r"]),
                          h.make_node("Equal", ["r", "four"], ["c"]), inner,
                          h.make_node("Add", ["u", "k"], ["t"])], ["t", "u"], {"k": 0.5})
    outer_then.initializer.append(onnx.numpy_helper.from_array(np.int64(4), "four"))
    b = _Builder(33)
    b.node("Shape", ["x"], "shp")
    b.node("ReduceSum", ["shp"], "total", keepdims=0)
    b.node("Greater", ["total", b.const("zero", np.int64(0))], "cond")
    b.nodes.append(h.make_node("If", ["cond"], ["a", "b"], then_branch=outer_then,
                               else_branch=_branch([h.make_node("Identity", ["x"], ["e"])], ["e", "e"], {})))
    b.node("Add", ["a", "b"], "y")
    model = b.model("nested_if", {"x": [1, 2, 3, 3]}, {"y": [1, 2, 3, 3]})
    assert import_onnx(model).op_counts() == {"MUL": 1, "ADD": 2}
    assert _cpu(model) == []
    _float_matches_ort(model, np.random.default_rng(10).standard_normal((1, 2, 3, 3)).astype(np.float32))


def test_an_output_folded_to_a_constant_is_given_by_the_host(npu, tmp_path) -> None:
    """A length output from shape arithmetic (NeMo's ``signal_len``) folds to a constant:
    it was "graph output ... is not computed by any node"; now a host Identity gives it,
    int64 as declared, beside the chip's output."""
    model = patterns.length_output()
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 2, 16, 1)).astype(np.float32)
    calibration = [[rng.uniform(-1, 1, x.shape).astype(np.float32)] for _ in range(8)]
    compiled = libnpu.load(model.SerializeToString(), devroot=npu.devroot, calibration=calibration,
                           cache_dir=tmp_path / "cache", recipe="fast")
    try:
        (y, length), (ref_y, ref_len) = compiled.infer([x], dequantized=True), _ort(model, x)
        assert length.dtype == np.int64 and length.tolist() == ref_len.tolist() == [16]
        assert float(np.abs(y - ref_y).max()) <= 0.05 * float(np.abs(ref_y).max())
    finally:
        compiled.close()
