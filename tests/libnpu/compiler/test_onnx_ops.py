"""Single-node float ONNX models: imported, quantized on random calibration in [-1, 1],
lowered, run on the chip; on inputs in [-1, 1] every output matches onnxruntime within
5% of its largest magnitude (issue 13's bar for the FuriosaAI operator list)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from libnpu.compiler.lower import lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from tests.support.chip_memory import ChipMemory, run_loadable

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def mem(tmp_path_factory) -> ChipMemory:
    return ChipMemory(tmp_path_factory.mktemp("chip"), size=8 << 20)


def single_node(op: str, inputs: dict[str, tuple], outputs: dict[str, tuple], consts: dict | None = None,
                opset: int = 13, **attrs) -> onnx.ModelProto:
    """A model of one ``op`` node: float inputs/outputs, constants as initializers."""
    consts = consts or {}
    node = h.make_node(op, list(inputs) + list(consts) if not attrs.get("_order") else attrs.pop("_order"),
                       list(outputs), **{k: v for k, v in attrs.items() if k != "_order"})
    graph = h.make_graph([node], op,
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in outputs.items()],
                         [nh.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def check_against_onnxruntime(mem: ChipMemory, model: onnx.ModelProto, seed: int = 0, runs: int = 3) -> None:
    graph = import_onnx(model)
    q = quantize_model(graph, random_count=64, seed=seed)   # enough runs to see the outputs' tails
    ld = lower(q)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed + 1)
    names = [i.name for i in sess.get_inputs()]
    for _ in range(runs):
        feeds = [rng.uniform(-1, 1, graph.tensors[n].shape).astype(np.float32) for n in graph.inputs]
        expected = sess.run(None, dict(zip(names, feeds)))
        got = run_loadable(mem, ld, feeds)
        for k, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert a.shape == b.shape, (k, a.shape, b.shape)
            bound = 0.05 * float(np.abs(b).max())
            err = float(np.abs(a - b).max())
            assert err <= bound + 1e-6, f"output {k}: max|err| {err:.4g} > 5% of max|ref| ({bound:.4g})"


X4 = (1, 8, 6, 6)


def box_indices(*ranges) -> np.ndarray:
    """ScatterND indices of a box, one range per leading axis (PyTorch's ``x[:, :, a:b] = y``)."""
    return np.stack(np.meshgrid(*[np.arange(*r) for r in ranges], indexing="ij"), -1).astype(np.int64)


@pytest.mark.parametrize("name,model", [
    ("Split", single_node("Split", {"x": X4}, {"a": (1, 3, 6, 6), "b": (1, 5, 6, 6)},
                          {"split": np.int64([3, 5])}, axis=1)),
    ("Split equal", single_node("Split", {"x": (2, 6, 4)}, {"a": (2, 3, 4), "b": (2, 3, 4)}, axis=1)),
    ("Slice NCHW", single_node("Slice", {"x": X4}, {"y": (1, 3, 2, 6)},
                               {"s": np.int64([1, 1]), "e": np.int64([7, 5]), "a": np.int64([1, 2]),
                                "st": np.int64([2, 2])})),
    ("Slice negative step", single_node("Slice", {"x": (3, 10)}, {"y": (3, 3)},
                                        {"s": np.int64([-2]), "e": np.int64([-100]), "a": np.int64([1]),
                                         "st": np.int64([-3])})),
    ("Unsqueeze", single_node("Unsqueeze", {"x": (4, 6)}, {"y": (1, 4, 1, 6)}, {"axes": np.int64([0, 2])})),
    ("Squeeze", single_node("Squeeze", {"x": (1, 4, 1, 6)}, {"y": (4, 6)}, {"axes": np.int64([0, 2])})),
    ("DepthToSpace DCR", single_node("DepthToSpace", {"x": X4}, {"y": (1, 2, 12, 12)}, blocksize=2)),
    ("DepthToSpace CRD", single_node("DepthToSpace", {"x": X4}, {"y": (1, 2, 12, 12)}, blocksize=2, mode="CRD")),
    ("SpaceToDepth", single_node("SpaceToDepth", {"x": X4}, {"y": (1, 32, 3, 3)}, blocksize=2)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_movement(mem, name, model) -> None:
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceMean"])
@pytest.mark.parametrize("axes,keep", [([1], 1), ([2, 3], 1), ([1, 3], 0), ([0, 1, 2, 3], 1)])
def test_reductions(mem, op, axes, keep) -> None:
    out = tuple(1 if i in axes else d for i, d in enumerate(X4))
    if not keep:
        out = tuple(d for i, d in enumerate(X4) if i not in axes)
    opset = 13 if op == "ReduceSum" else 18   # the opsets where axes became an input
    model = single_node(op, {"x": X4}, {"y": out}, {"axes": np.int64(axes)}, opset=opset, keepdims=keep)
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("a,b,out", [((4, 8), (8, 5), (4, 5)), ((2, 3, 4, 8), (2, 3, 8, 6), (2, 3, 4, 6)),
                                     ((2, 1, 4, 8), (3, 8, 6), (2, 3, 4, 6))])
def test_matmul_of_two_activations(mem, a, b, out) -> None:
    check_against_onnxruntime(mem, single_node("MatMul", {"a": a, "b": b}, {"y": out}))


def test_gemm_of_two_activations(mem) -> None:
    model = single_node("Gemm", {"a": (8, 4), "b": (5, 8)}, {"y": (4, 5)}, transA=1, transB=1, alpha=0.5)
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("attrs,out", [
    (dict(strides=[2, 2]), (1, 4, 13, 13)),
    (dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), (1, 4, 12, 12)),
    (dict(strides=[1, 2], pads=[0, 1, 0, 0]), (1, 4, 8, 12)),
    (dict(strides=[2, 2], auto_pad="SAME_UPPER"), (1, 4, 12, 12)),
    (dict(strides=[2, 2], output_shape=[12, 12]), (1, 4, 12, 12)),
])
def test_conv_transpose(mem, attrs, out) -> None:
    rng = np.random.default_rng(9)
    consts = {"w": (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32),
              "b": (rng.standard_normal(4) * 0.1).astype(np.float32)}
    check_against_onnxruntime(mem, single_node("ConvTranspose", {"x": X4}, {"y": out}, consts, **attrs))


@pytest.mark.parametrize("name,model", [
    ("Gather", single_node("Gather", {"x": X4}, {"y": (1, 3, 6, 6)}, {"i": np.int64([4, -1, 0])}, axis=1)),
    ("Gather 2-D indices", single_node("Gather", {"x": (5, 7)}, {"y": (5, 2, 2)}, {"i": np.int64([[1, 2], [6, 0]])},
                                       axis=1)),
    ("Expand", single_node("Expand", {"x": (1, 8, 1, 6)}, {"y": (2, 8, 5, 6)}, {"s": np.int64([2, 1, 5, 6])})),
    ("Expand rank", single_node("Expand", {"x": (6,)}, {"y": (3, 4, 6)}, {"s": np.int64([3, 4, 1])})),
    ("Pad reflect", single_node("Pad", {"x": X4}, {"y": (1, 8, 9, 8)}, {"p": np.int64([0, 0, 1, 2, 0, 0, 2, 0])},
                                mode="reflect")),
    ("Pad edge", single_node("Pad", {"x": X4}, {"y": (1, 8, 10, 7)}, {"p": np.int64([0, 0, 3, 0, 0, 0, 1, 1])},
                             mode="edge")),
    # a streaming cache's slice assignment, a batch row replaced, single values anywhere
    ("ScatterND box", single_node("ScatterND", {"x": X4, "u": (1, 8, 2, 6)}, {"y": X4},
                                  {"i": box_indices((1,), (8,), (2, 4))}, _order=["x", "i", "u"])),
    ("ScatterND row", single_node("ScatterND", {"x": (2, 3, 4), "u": (1, 3, 4)}, {"y": (2, 3, 4)},
                                  {"i": np.int64([[1]])}, _order=["x", "i", "u"])),
    ("ScatterND points", single_node("ScatterND", {"x": (4, 5), "u": (3,)}, {"y": (4, 5)},
                                     {"i": np.int64([[0, 4], [3, 1], [-1, 0]])}, _order=["x", "i", "u"])),
], ids=lambda v: v if isinstance(v, str) else "")
def test_gathers(mem, name, model) -> None:
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("coord,nearest,out", [
    ("half_pixel", "round_prefer_floor", (1, 8, 12, 12)),      # ONNX's defaults
    ("half_pixel", "round_prefer_floor", (1, 8, 9, 4)),
    ("pytorch_half_pixel", "round_prefer_ceil", (1, 8, 10, 7)),
    ("asymmetric", "round_prefer_floor", (1, 8, 11, 3)),
    ("align_corners", "floor", (1, 8, 12, 12)),
    ("tf_half_pixel_for_nn", "ceil", (1, 8, 7, 13)),
])
def test_resize_nearest_any_mode(mem, coord, nearest, out) -> None:
    model = single_node("Resize", {"x": X4}, {"y": out}, {"roi": np.zeros(0, np.float32),
                        "scales": np.zeros(0, np.float32), "sizes": np.int64(out)},
                        mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest)
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("coord", ["asymmetric", "align_corners", "half_pixel"])
def test_resize_linear(mem, coord) -> None:
    model = single_node("Resize", {"x": X4}, {"y": (1, 8, 11, 9)}, {"roi": np.zeros(0, np.float32),
                        "scales": np.zeros(0, np.float32), "sizes": np.int64([1, 8, 11, 9])},
                        mode="linear", coordinate_transformation_mode=coord)
    check_against_onnxruntime(mem, model)


def test_global_average_pool(mem) -> None:
    check_against_onnxruntime(mem, single_node("GlobalAveragePool", {"x": X4}, {"y": (1, 8, 1, 1)}))


def after_conv(op: str, out: tuple[int, ...], consts: dict | None = None, extra_outputs: dict | None = None,
               opset: int = 13, inputs: list[str] | None = None, **attrs) -> onnx.ModelProto:
    """Conv (so the operator meets an NHWC activation inside the graph) then ``op``."""
    rng = np.random.default_rng(5)
    consts = consts or {}
    inits = [nh.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "w")]
    inits += [nh.from_array(np.asarray(v), k) for k, v in consts.items()]
    outputs = {"y": out, **(extra_outputs or {})}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(op, inputs or ["c", *consts], list(outputs), **attrs)]
    graph = h.make_graph(nodes, op, [h.make_tensor_value_info("x", TensorProto.FLOAT, list(X4))],
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in outputs.items()],
                         inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("name,model", [
    ("Split channels", after_conv("Split", (1, 3, 6, 6), {"s": np.int64([3, 5])}, {"z": (1, 5, 6, 6)}, axis=1)),
    ("Split H", after_conv("Split", (1, 8, 2, 6), {"s": np.int64([2, 4])}, {"z": (1, 8, 4, 6)}, axis=2)),
    ("Slice C and W", after_conv("Slice", (1, 3, 6, 2), {"s": np.int64([1, 5]), "e": np.int64([7, 1]),
                                                          "a": np.int64([1, 3]), "t": np.int64([2, -2])})),
    ("Squeeze", after_conv("Squeeze", (8, 6, 6), {"a": np.int64([0])})),
    ("Unsqueeze", after_conv("Unsqueeze", (1, 8, 1, 6, 6), {"a": np.int64([2])})),
    ("Flatten", after_conv("Flatten", (1, 288), axis=1)),
    ("DepthToSpace", after_conv("DepthToSpace", (1, 2, 12, 12), blocksize=2)),
    ("DepthToSpace CRD", after_conv("DepthToSpace", (1, 2, 12, 12), blocksize=2, mode="CRD")),
    ("SpaceToDepth", after_conv("SpaceToDepth", (1, 32, 3, 3), blocksize=2)),
    ("ReduceSum C", after_conv("ReduceSum", (1, 1, 6, 6), {"a": np.int64([1])})),
    ("ReduceMax HW", after_conv("ReduceMax", (1, 8), {"a": np.int64([2, 3])}, opset=18, keepdims=0)),
    ("ReduceL2 C", after_conv("ReduceL2", (1, 6, 6), {"a": np.int64([1])}, opset=18, keepdims=0)),
    ("ReduceMean C", after_conv("ReduceMean", (1, 1, 6, 6), {"a": np.int64([1])}, opset=18)),
    ("Gather C", after_conv("Gather", (1, 2, 6, 6), {"i": np.int64([5, 1])}, axis=1)),
    ("Expand", after_conv("Expand", (2, 8, 6, 6), {"s": np.int64([2, 1, 1, 1])})),
    ("Pad reflect", after_conv("Pad", (1, 8, 8, 9), {"p": np.int64([0, 0, 1, 1, 0, 0, 1, 2])}, mode="reflect")),
    ("Resize nearest", after_conv("Resize", (1, 8, 12, 12), {"r": np.zeros(0, np.float32),
                                                             "sc": np.float32([1, 1, 2, 2])}, mode="nearest")),
    ("Resize nearest 1.5", after_conv("Resize", (1, 8, 9, 9), {"r": np.zeros(0, np.float32),
                                                               "sc": np.float32([1, 1, 1.5, 1.5])}, mode="nearest")),
    ("ConvTranspose", after_conv("ConvTranspose", (1, 4, 12, 12), {
        "wt": (np.random.default_rng(6).standard_normal((8, 4, 2, 2)) * 0.3).astype(np.float32)}, strides=[2, 2])),
    ("MatMul", after_conv("MatMul", (1, 8, 6, 6), inputs=["c", "c"])),
    ("ScatterND", after_conv("ScatterND", X4, {"i": box_indices((1,), (8,), (6,), (4, 6)), "u": np.linspace(
        -1, 1, 96, dtype=np.float32).reshape(1, 8, 6, 2)})),
], ids=lambda v: v if isinstance(v, str) else "")
def test_after_a_convolution(mem, name, model) -> None:
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_mean_of_inputs(mem, count) -> None:
    if count == 1:  # a lone Mean is its input: give the graph an operator to run
        model = after_conv("Mean", (1, 8, 6, 6))
    else:
        model = single_node("Mean", {f"x{k}": X4 for k in range(count)}, {"y": X4})
    check_against_onnxruntime(mem, model)


def test_batch_normalization(mem) -> None:
    rng = np.random.default_rng(8)
    consts = {"s": rng.uniform(0.5, 1.5, 8).astype(np.float32), "b": rng.normal(0, .1, 8).astype(np.float32),
              "m": rng.normal(0, .1, 8).astype(np.float32), "v": rng.uniform(0.5, 1.5, 8).astype(np.float32)}
    check_against_onnxruntime(mem, single_node("BatchNormalization", {"x": X4}, {"y": X4}, consts))   # standalone
    model = after_conv("BatchNormalization", X4, consts)                                              # folded
    check_against_onnxruntime(mem, model)
    from libnpu.compiler.optimize import optimize
    assert optimize(import_onnx(model)).op_counts() == {"CONV_2D": 1, "TRANSPOSE": 2}


def test_batch_normalization_after_conv_transpose_is_folded(mem) -> None:
    rng = np.random.default_rng(10)
    nodes = [h.make_node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2]),
             h.make_node("BatchNormalization", ["t", "s", "b", "m", "v"], ["y"])]
    inits = [nh.from_array((rng.standard_normal((8, 4, 2, 2)) * 0.3).astype(np.float32), "w"),
             nh.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "s"),
             nh.from_array(rng.normal(0, .1, 4).astype(np.float32), "b"),
             nh.from_array(rng.normal(0, .1, 4).astype(np.float32), "m"),
             nh.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "v")]
    graph = h.make_graph(nodes, "ct_bn", [h.make_tensor_value_info("x", TensorProto.FLOAT, list(X4))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    check_against_onnxruntime(mem, model)
    from libnpu.compiler.optimize import optimize
    assert "MUL" not in optimize(import_onnx(model)).op_counts()


@pytest.mark.parametrize("name,model", [
    ("ConvTranspose", after_conv("ConvTranspose", (1, 4, 12, 12), {
        "wt": (np.random.default_rng(6).standard_normal((8, 4, 2, 2)) * 0.3).astype(np.float32)}, strides=[2, 2])),
    ("MatMul", after_conv("MatMul", (1, 8, 6, 6), inputs=["c", "c"])),
    ("ScatterND", after_conv("ScatterND", X4, {"i": box_indices((1,), (8,), (6,), (4, 6)), "u": np.linspace(
        -1, 1, 96, dtype=np.float32).reshape(1, 8, 6, 2)})),
    ("Split", after_conv("Split", (1, 3, 6, 6), {"s": np.int64([3, 5])}, {"z": (1, 5, 6, 6)}, axis=1)),
    ("DepthToSpace", after_conv("DepthToSpace", (1, 2, 12, 12), blocksize=2)),
    ("ReduceMax", after_conv("ReduceMax", (1, 8), {"a": np.int64([2, 3])}, opset=18, keepdims=0)),
    ("Gather", after_conv("Gather", (1, 2, 6, 6), {"i": np.int64([5, 1])}, axis=1)),
    ("Pad reflect", after_conv("Pad", (1, 8, 8, 9), {"p": np.int64([0, 0, 1, 1, 0, 0, 1, 2])}, mode="reflect")),
    ("Expand", after_conv("Expand", (2, 8, 6, 6), {"s": np.int64([2, 1, 1, 1])})),
    ("ArgMax", after_conv("ArgMax", (1, 6, 6), axis=1, keepdims=0)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_quantized_graph_exported_runs_like_litert(mem, name, model) -> None:
    """The quantizer's int8 graph, exported to TFLite, gives on LiteRT BUILTIN_REF the bytes
    the chip gives (quantizer-chosen zero points and per-channel weights included)."""
    from libnpu.compiler.tflite_export import export_tflite
    from tests.support.tflite_builder import run_reference
    if name == "ArgMax":
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    q = quantize_model(import_onnx(model), random_count=8, io_dtype="int8")
    ld = lower(q)
    rng = np.random.default_rng(12)
    for _ in range(2):
        x = rng.integers(-128, 128, X4, dtype=np.int8)
        for k, (a, b) in enumerate(zip(run_loadable(mem, ld, [x]), run_reference(export_tflite(q), x), strict=True)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{name}: output {k}"


def test_tile(mem) -> None:
    check_against_onnxruntime(mem, single_node("Tile", {"x": X4}, {"y": (2, 8, 12, 6)}, {"r": np.int64([2, 1, 2, 1])}))
    check_against_onnxruntime(mem, after_conv("Tile", (1, 16, 6, 18), {"r": np.int64([1, 2, 1, 3])}))


def test_gemm_of_two_activations_with_c(mem) -> None:
    c = np.random.default_rng(11).standard_normal(5).astype(np.float32)
    model = single_node("Gemm", {"a": (4, 8), "b": (8, 5)}, {"y": (4, 5)}, {"c": c}, alpha=0.7, beta=0.5)
    check_against_onnxruntime(mem, model)


@pytest.mark.parametrize("group,dilations,wshape,out", [(8, [1, 1], (8, 1, 3, 3), (1, 8, 13, 13)),
                                                        (2, [2, 2], (8, 2, 3, 3), (1, 4, 15, 15))])
def test_conv_transpose_grouped_and_dilated(mem, group, dilations, wshape, out) -> None:
    w = (np.random.default_rng(13).standard_normal(wshape) * 0.3).astype(np.float32)
    model = single_node("ConvTranspose", {"x": X4}, {"y": out}, {"w": w}, strides=[2, 2], group=group,
                        dilations=dilations)
    check_against_onnxruntime(mem, model)


def test_slice_with_attributes_of_opset_9(mem) -> None:
    model = single_node("Slice", {"x": X4}, {"y": (1, 8, 3, 5)}, opset=9, starts=[1, -5], ends=[4, 100], axes=[2, 3])
    check_against_onnxruntime(mem, model)
