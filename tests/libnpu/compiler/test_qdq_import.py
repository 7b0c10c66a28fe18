"""QDQ ONNX models (QuantizeLinear/DequantizeLinear pairs, as onnxruntime's
``quantize_static`` writes them) compile: the import makes the float twin and the quantizer
keeps the grids the pairs chose (libnpu.compiler.qdq_import); the compiled model matches
ORT's CPU run of the QDQ model within 5% of each output's largest magnitude."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from libnpu.compiler.lower import compile_model
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.qdq_models import quantize_qdq

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

SHAPE = (1, 3, 8, 8)


def _float_model() -> bytes:
    """Conv -> Relu -> Conv + skip Add -> GlobalAveragePool -> Flatten -> Softmax."""
    rng = np.random.default_rng(5)
    weights = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
               "w2": rng.standard_normal((8, 8, 3, 3)) * 0.15, "b2": rng.standard_normal(8) * 0.1}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             h.make_node("Add", ["c2", "r1"], ["a"]),
             h.make_node("GlobalAveragePool", ["a"], ["p"]),
             h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Softmax", ["f"], ["y"], axis=-1)]
    graph = h.make_graph(nodes, "qdq_cnn", [h.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8))],
                         [nh.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory) -> bytes:
    return quantize_qdq(_float_model(), tmp_path_factory.mktemp("qdq"), SHAPE, 8).read_bytes()


def test_qdq_model_compiles_and_matches_ort(qdq_model, tmp_path):
    loadable = compile_model(qdq_model, kind="onnx")
    session = ort.InferenceSession(qdq_model, providers=["CPUExecutionProvider"])
    mem = ChipMemory(tmp_path, size=8 << 20)
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.uniform(-1, 1, SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run_loadable(mem, loadable, [x])[0]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_the_pairs_grids_are_kept(qdq_model):
    """The chip quantizes the input on the grid of the model's QuantizeLinear for it (not a
    recalibrated one), and the convolutions' weights with the one scale the model gave each."""
    from libnpu.compiler.frontend import to_int8_graph
    model = onnx.load_model_from_string(qdq_model)
    consts = {i.name: nh.to_array(i) for i in model.graph.initializer}
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    scale, zero = float(consts[q.input[1]]), int(consts[q.input[2]])
    graph = to_int8_graph(qdq_model, kind="onnx")
    quantize = next(op for op in graph.ops if op.type == "QUANTIZE" and op.inputs[0] == "x")
    grid = graph.tensors[quantize.outputs[0]].quant
    assert float(grid.scale[0]) == pytest.approx(scale, rel=1e-6) and int(grid.zero_point[0]) == zero
    weight_scales = sorted(float(consts[n.input[1]]) for n in model.graph.node if n.op_type == "DequantizeLinear"
                           and consts.get(n.input[0], np.zeros(0)).ndim == 4)
    chip_scales = sorted(float(graph.tensors[op.inputs[1]].quant.scale.item()) for op in graph.ops
                         if op.type == "CONV_2D")
    assert chip_scales == pytest.approx(weight_scales, rel=1e-6)


def test_a_global_average_keeps_the_grid_its_pair_gives_it(tmp_path):
    """quantize_static gives a GlobalAveragePool's output its own grid, far finer than its
    input's (a channel's mean is narrower than its values): the chip's mean lands on it.
    As AVERAGE_POOL_2D (one grid in and out) it took the Relu's grid, and the differences
    of channel means after it were 6-7% of the largest output off onnxruntime's."""
    rng = np.random.default_rng(5)
    contrasts = rng.standard_normal((16, 8))
    weights = {"w1": rng.standard_normal((16, 3, 3, 3)) * 0.5, "b1": rng.standard_normal(16) * 0.1,
               "w2": contrasts - contrasts.mean(axis=0), "b2": np.zeros(8)}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("GlobalAveragePool", ["r1"], ["p"]),
             h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Gemm", ["f", "w2", "b2"], ["y"])]
    shape = (1, 3, 16, 16)
    graph = h.make_graph(nodes, "qdq_pool", [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8))],
                         [nh.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    float_model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    float_model.ir_version = 8
    data = quantize_qdq(float_model.SerializeToString(), tmp_path, shape, 8).read_bytes()
    loadable = compile_model(data, kind="onnx")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    mem = ChipMemory(tmp_path, size=8 << 20)
    for _ in range(3):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run_loadable(mem, loadable, [x])[0]
        assert np.abs(got - want).max() <= 0.03 * np.abs(want).max()


def _conv1d_chain() -> bytes:
    """Conv1d -> Relu -> depthwise Conv1d -> Conv1d -> Relu -> ReduceMean over time -> Gemm:
    convolutions reading convolutions, as an audio CNN over [N, C, L] features is."""
    rng = np.random.default_rng(7)
    weights = {"w1": rng.standard_normal((8, 4, 1)) * 0.5, "b1": rng.standard_normal(8) * 0.1,
               "wd": rng.standard_normal((8, 1, 5)) * 0.4,
               "w2": rng.standard_normal((8, 8, 1)) * 0.4, "b2": rng.standard_normal(8) * 0.1,
               "w3": rng.standard_normal((2, 8)), "b3": np.zeros(2)}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "wd"], ["d"], group=8, pads=[2, 2]),
             h.make_node("Conv", ["d", "w2", "b2"], ["c2"]),
             h.make_node("Relu", ["c2"], ["r2"]),
             h.make_node("ReduceMean", ["r2"], ["m"], axes=[-1], keepdims=0),
             h.make_node("Gemm", ["m", "w3", "b3"], ["y"], transB=1)]
    graph = h.make_graph(nodes, "qdq_conv1d", [h.make_tensor_value_info("x", TensorProto.FLOAT, CONV1D_SHAPE)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2))],
                         [nh.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


CONV1D_SHAPE = (1, 4, 16)


def test_a_1d_convolution_keeps_its_pairs_grid(tmp_path):
    """A 1-D convolution runs as a 2-D one on an [N, 1, L, C] view of the file's [N, C, L]
    value: the view is the same numbers, so it takes the file's grid. It had calibration's
    (joined to the file's by the layout moves, or alone where the optimizer dropped the
    moves between two convolutions), where onnxruntime rounds each to the file's: calibrated
    on inputs twice as wide as the file's, the output was up to 3.2% of its largest value
    (a few of its grid's steps) off onnxruntime's run of the file; now within one step."""
    from libnpu.compiler.frontend import to_int8_graph
    data = quantize_qdq(_conv1d_chain(), tmp_path, CONV1D_SHAPE, 8).read_bytes()
    model = onnx.load_model_from_string(data)
    consts = {i.name: nh.to_array(i) for i in model.graph.initializer}
    file_scales = {n.input[0]: float(consts[n.input[1]]) for n in model.graph.node if n.op_type == "QuantizeLinear"}
    rng = np.random.default_rng(3)
    wide = [{"x": rng.uniform(-2, 2, CONV1D_SHAPE).astype(np.float32)} for _ in range(8)]
    graph = to_int8_graph(data, wide, kind="onnx")
    convs = [op for op in graph.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    assert len(convs) == 3
    for op, made in zip(convs, ("r1", "d", "r2")):      # quantize_static fuses each Relu
        assert float(graph.tensors[op.outputs[0]].quant.scale[0]) == pytest.approx(file_scales[made], rel=1e-6)
    loadable = compile_model(data, wide, kind="onnx")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    mem = ChipMemory(tmp_path, size=8 << 20)
    for _ in range(3):
        x = rng.uniform(-1, 1, CONV1D_SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run_loadable(mem, loadable, [x])[0]
        assert np.abs(got - want).max() <= file_scales["y_QuantizeLinear_Input"] * 1.01


def test_what_the_file_leaves_in_float_runs_in_float(tmp_path):
    """quantize_static leaves a power spectrum's Pow and its Log in float (it quantizes
    neither): onnxruntime runs them in float and rounds the log to the pair after it. They
    run in float on the CPU, the rest on the chip on the file's grids. On int8 grids
    calibration chose, the small powers fell to a few codes before the log and the output
    was up to 26% of its largest value (44 steps of its grid) off onnxruntime's run of the
    file; now within one step."""
    from libnpu.compiler.float_ref import FloatInterpreter
    from libnpu.compiler.frontend import QDQ_FLOAT_REASON, to_int8_graph
    from libnpu.compiler.lower import lower
    rng = np.random.default_rng(9)
    weights = {"w1": rng.standard_normal((8, 4, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
               "p": np.full((), 2.0), "w2": rng.standard_normal((2, 8)), "b2": np.zeros(2)}
    nodes = [h.make_node("Pow", ["x", "p"], ["pw"]),
             h.make_node("Log", ["pw"], ["lg"]),
             h.make_node("Conv", ["lg", "w1", "b1"], ["c1"], pads=[1, 1]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("ReduceMean", ["r1"], ["m"], axes=[-1], keepdims=0),
             h.make_node("Gemm", ["m", "w2", "b2"], ["y"], transB=1)]
    graph = h.make_graph(nodes, "qdq_log_front", [h.make_tensor_value_info("x", TensorProto.FLOAT, CONV1D_SHAPE)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2))],
                         [nh.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    float_model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    float_model.ir_version = 8
    data = quantize_qdq(float_model.SerializeToString(), tmp_path, CONV1D_SHAPE, 8).read_bytes()
    assert {n.op_type for n in onnx.load_model_from_string(data).graph.node
            if "pw" in n.input or "lg" in n.output} == {"Log"}        # no pair between them
    calibration = [{"x": rng.uniform(-1, 1, CONV1D_SHAPE).astype(np.float32)} for _ in range(8)]
    int8 = to_int8_graph(data, calibration, kind="onnx")
    host = [op for op in int8.ops if op.type == "HOST"]
    assert len(host) == 1 and host[0].attrs["host"].reason == QDQ_FLOAT_REASON
    assert int8.metadata["cpu_float"]["reason"] == QDQ_FLOAT_REASON
    loadable = lower(int8)      # the chip's part compiles; the host call runs the float front end
    kept = loadable.metadata["cpu_float"]       # what npu compile --report and the corpus count on the CPU
    assert [layer.split()[0] for layer in kept["layers"]] == ["MUL", "LOG"] and kept["sources"] == [4, 5]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    step = next(float(nh.to_array(i)) for i in onnx.load_model_from_string(data).graph.initializer
                if i.name == "y_scale")
    run = FloatInterpreter(int8)    # the chip's integer ops as the chip computes them, the host call's LiteRT run
    for _ in range(3):
        x = rng.uniform(-1, 1, CONV1D_SHAPE).astype(np.float32)
        want = session.run(None, {"x": x})[0]
        got = run.run({"x": x})[int8.outputs[0]]
        assert np.abs(got - want).max() <= 1.01 * step


@pytest.mark.parametrize("scale", [0.0, -0.1, float("nan"), float("inf")])
def test_a_scale_that_is_no_grid_is_refused(qdq_model, scale):
    """A pair's scale becomes a tensor's grid as it is: one that is not finite and positive
    is refused with one line naming the node."""
    from libnpu.compiler.qdq_import import QDQError
    model = onnx.load_model_from_string(qdq_model)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    for init in model.graph.initializer:
        if init.name == q.input[1]:
            init.CopyFrom(nh.from_array(np.float32(scale), init.name))
    with pytest.raises(QDQError, match=r"QuantizeLinear node .*is not a finite positive number"):
        compile_model(model.SerializeToString(), kind="onnx")
