"""onnxruntime's own operators, as files saved after its graph optimizations or quantized in
the QOperator format hold them, compile to the chip (libnpu.compiler.onnx_ms_ops): each on
a tiny model runs with no CPU step and follows onnxruntime's run of the file (cosine >= 0.99
on inputs calibration never saw; ``recipe="fast"``: int8, accuracy is not the point). An
operator not lowered runs with onnxruntime on the host, its reason saying so."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as h

from libnpu.compiler.lower import compile_model
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.ms_ops_models import FLOAT_MODELS, MS, feeds, ms_graph, ms_model, quantized_qoperator

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

F = np.float32
_RNG = np.random.default_rng(7)
Reference = Callable[[list[np.ndarray]], list[np.ndarray]]


def _w(*shape: int, scale: float = 0.3, offset: float = 0.0) -> np.ndarray:
    return (_RNG.standard_normal(shape) * scale + offset).astype(F)


def _ort(model: onnx.ModelProto) -> Reference:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda xs: session.run(None, dict(zip(names, xs)))


SEQ = {"x": [1, 4, 16]}
PAIR = {"x": [1, 4, 16], "skip": [1, 4, 16]}
IMAGE = {"x": [1, 3, 8, 8]}
CONV = {"w": _w(6, 3, 3, 3), "b": _w(6, scale=.1)}
LN = {"g": _w(16, scale=.1, offset=1.0), "beta": _w(16, scale=.1)}
BIAS = _w(16)
NHWC_W = _w(6, 3, 3, 3)      # [M, kH, kW, C]


def _nhwc_reference() -> Reference:
    """NhwcConv's documented semantics (onnxruntime runs it on CUDA only): ONNX's Conv
    between transposes, its weight [M, kH, kW, C] as [M, C, kH, kW]."""
    conv = _ort(ms_model("Conv", {"x": [1, 3, 8, 8]}, {"y": [1, 6, 8, 8]},
                         {"w": NHWC_W.transpose(0, 3, 1, 2).copy(), "b": CONV["b"]}, domain="", pads=[1] * 4))
    return lambda xs: [conv([xs[0].transpose(0, 3, 1, 2)])[0].transpose(0, 2, 3, 1)]


# name -> (model, reference: None for onnxruntime's run of the model itself)
CASES: dict[str, tuple[Callable[[], onnx.ModelProto], Callable[[], Reference] | None]] = {
    "FusedConv-Relu": (lambda: ms_model("FusedConv", IMAGE, {"y": [1, 6, 8, 8]}, CONV, activation="Relu",
                                        pads=[1] * 4), None),
    "FusedConv-Clip-Z": (lambda: ms_model("FusedConv", {"x": [1, 3, 8, 8], "z": [1, 6, 8, 8]}, {"y": [1, 6, 8, 8]},
                                          CONV, order=["x", "w", "b", "z"], activation="Clip",
                                          activation_params=[-0.5, 1.0], pads=[1] * 4), None),
    "FusedConv-HardSigmoid": (lambda: ms_model("FusedConv", IMAGE, {"y": [1, 6, 6, 6]}, CONV,
                                               activation="HardSigmoid", activation_params=[0.3, 0.4]), None),
    "FusedConv-LeakyRelu-1d": (lambda: ms_model("FusedConv", {"x": [1, 3, 16]}, {"y": [1, 6, 16]},
                                                {"w": _w(6, 3, 3), "b": _w(6, scale=.1)}, activation="LeakyRelu",
                                                activation_params=[0.2], pads=[1, 1]), None),
    "FusedGemm-LeakyRelu": (lambda: ms_model("FusedGemm", {"x": [4, 16]}, {"y": [4, 8]}, {"w": _w(8, 16), "b": _w(8)},
                                             transB=1, alpha=0.5, activation="LeakyRelu", activation_alpha=0.1), None),
    "FusedMatMul-transA-alpha": (lambda: ms_model("FusedMatMul", {"x": [1, 16, 4]}, {"y": [1, 4, 8]},
                                                  {"w": _w(16, 8)}, transA=1, alpha=0.25), None),
    "FusedMatMul-transB": (lambda: ms_model("FusedMatMul", {"a": [2, 4, 16], "b": [2, 6, 16]}, {"y": [2, 4, 6]},
                                            {}, transB=1, alpha=0.5), None),
    "NhwcConv": (lambda: ms_model("NhwcConv", {"x": [1, 8, 8, 3]}, {"y": [1, 8, 8, 6]}, {"w": NHWC_W, "b": CONV["b"]},
                                  pads=[1] * 4), _nhwc_reference),
    "QuickGelu": (lambda: ms_model("QuickGelu", SEQ, {"y": SEQ["x"]}, {}, alpha=1.702), None),
    "Gelu": (lambda: ms_model("Gelu", SEQ, {"y": SEQ["x"]}, {}), None),
    "BiasGelu": (lambda: ms_model("BiasGelu", SEQ, {"y": SEQ["x"]}, {"bias": BIAS}), None),
    "FastGelu": (lambda: ms_model("FastGelu", SEQ, {"y": SEQ["x"]}, {"bias": BIAS}), None),
    "SkipLayerNormalization": (lambda: ms_model("SkipLayerNormalization", PAIR, {"y": [1, 4, 16], "sum": [1, 4, 16]},
                                                {**LN, "bias": BIAS}, node_outputs=["y", "", "", "sum"],
                                                epsilon=1e-5), None),
    "SkipSimplifiedLayerNormalization": (lambda: ms_model("SkipSimplifiedLayerNormalization", PAIR, {"y": [1, 4, 16]},
                                                          {"g": LN["g"]}, epsilon=1e-5), None),
    "SimplifiedLayerNormalization": (lambda: ms_model("SimplifiedLayerNormalization", SEQ, {"y": SEQ["x"]},
                                                      {"g": LN["g"]}, domain="", axis=-1, epsilon=1e-5), None),
    "LayerNormalization-opset13": (lambda: ms_model("LayerNormalization", SEQ, {"y": SEQ["x"]}, LN, domain="",
                                                    opset=13, axis=-1, epsilon=1e-5), None),
    "BiasAdd": (lambda: ms_model("BiasAdd", PAIR, {"y": [1, 4, 16]}, {"bias": BIAS}, order=["x", "bias", "skip"]),
                lambda: lambda xs: [xs[0] + BIAS + xs[1]]),     # onnxruntime runs it on CUDA only
}


INT8_W = {"w": _RNG.integers(-127, 128, (16, 8)).astype(np.int8), "ws": np.array(0.02, F),
          "wz": np.array(0, np.int8), "bias": _w(8)}


def _qlinear_softmax() -> onnx.ModelProto:
    """QuantizeLinear -> QLinearSoftmax -> DequantizeLinear (uint8 codes), as QOperator writes it."""
    q = {"xs": np.array(0.02, F), "xz": np.array(128, np.uint8), "ys": np.array(1 / 256, F),
         "yz": np.array(0, np.uint8)}
    return ms_graph([h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                     h.make_node("QLinearSoftmax", ["xq", "xs", "xz", "ys", "yz"], ["yq"], domain=MS, axis=-1,
                                 opset=13),
                     h.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])], SEQ, {"y": SEQ["x"]}, q)


def _matmul_integer_to_float() -> onnx.ModelProto:
    """DynamicQuantizeLinear -> MatMulIntegerToFloat by int8 weights, as onnxruntime fuses
    ``quantize_dynamic``'s MatMulInteger -> Cast -> Mul."""
    return ms_graph([h.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                     h.make_node("MatMulIntegerToFloat", ["xq", "w", "xs", "ws", "xz", "wz", "bias"], ["y"],
                                 domain=MS)], SEQ, {"y": [1, 4, 8]}, INT8_W)


CASES.update({
    "Attention": (lambda: ms_model("Attention", SEQ, {"y": SEQ["x"]}, {"wqkv": _w(16, 48), "bqkv": _w(48, scale=.1)},
                                   num_heads=2), None),
    "MultiHeadAttention": (lambda: ms_model("MultiHeadAttention", {"q": [1, 4, 16], "k": [1, 6, 16], "v": [1, 6, 8]},
                                            {"y": [1, 4, 8]}, {}, num_heads=2), None),
    "QLinearSoftmax": (_qlinear_softmax, None),
    "DynamicQuantizeMatMul": (lambda: ms_model("DynamicQuantizeMatMul", SEQ, {"y": [1, 4, 8]}, INT8_W), None),
    "MatMulIntegerToFloat": (_matmul_integer_to_float, None),
})


@pytest.fixture(scope="module")
def mem(tmp_path_factory) -> ChipMemory:
    return ChipMemory(tmp_path_factory.mktemp("chip"), size=8 << 20)


def _check_on_chip(mem: ChipMemory, model: onnx.ModelProto, reference: Reference) -> None:
    loadable = compile_model(model.SerializeToString(), feeds(model, 16, seed=1), recipe="fast")
    assert [step.op for step in loadable.host_steps] == []
    for xs in feeds(model, 2, seed=99):
        for got, want in zip(run_loadable(mem, loadable, xs), reference(xs), strict=True):
            g, w = got.astype(np.float64).ravel(), np.asarray(want, np.float64).ravel()
            assert got.shape == want.shape
            assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) >= 0.99


@pytest.mark.parametrize("name", list(CASES))
def test_lowered_op_runs_on_the_chip(mem, name):
    build, reference = CASES[name]
    model = build()
    _check_on_chip(mem, model, reference() if reference else _ort(model))


def test_qoperator_ops_run_on_the_chip(mem, tmp_path: Path):
    # QLinearConv, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
    # QLinearAveragePool, QLinearGlobalAveragePool, QGemm, and a uint8 Flatten between them
    model = quantized_qoperator(FLOAT_MODELS["qops"](), tmp_path)
    ops = {n.op_type for n in model.graph.node}
    assert {"QLinearConv", "QLinearConcat", "QLinearAveragePool", "QGemm", "Flatten"} <= ops
    _check_on_chip(mem, model, _ort(model))


def test_an_op_not_lowered_runs_with_onnxruntime_on_the_host():
    # MultiHeadAttention with a key padding mask between two FusedMatMuls: the attention on
    # the host (its model with com.microsoft's opset), the FusedMatMuls on the chip
    w = {"wq": _w(8, 8), "wo": _w(8, 8), "mask": np.array([[1, 1, 1, 0]], np.int32)}
    model = ms_graph([h.make_node("FusedMatMul", ["x", "wq"], ["q"], domain=MS, alpha=0.5),
                      h.make_node("MultiHeadAttention", ["q", "x", "x", "", "mask"], ["a"], domain=MS, num_heads=2),
                      h.make_node("FusedMatMul", ["a", "wo"], ["y"], domain=MS, transB=1)],
                     {"x": [1, 4, 8]}, {"y": [1, 4, 8]}, w)
    loadable = compile_model(model.SerializeToString(), feeds(model, 8, seed=1), recipe="fast", min_npu_partition=0)
    (step,) = loadable.host_steps
    assert step.op == "MultiHeadAttention"
    assert "onnxruntime's MultiHeadAttention (com.microsoft) with these attributes or input ranks" in step.reason
    host = onnx.load_model_from_string(step.model)
    assert {(o.domain, o.version) for o in host.opset_import} >= {(MS, 1)}


def _q8_moves_model() -> onnx.ModelProto:
    """A QDQ model as tf2onnx writes a quantized TF graph: int8 Reshape and Transpose
    between a QuantizeLinear and its DequantizeLinear (a per-channel mean reshaped for a
    broadcast, a layout change), no onnxruntime operator anywhere."""
    s, z = np.array(0.02, F), np.array(0, np.int8)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("GlobalAveragePool", ["xd"], ["m"]),
             h.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"]),
             h.make_node("Reshape", ["mq", "shape"], ["mr"]),
             h.make_node("DequantizeLinear", ["mr", "s", "z"], ["md"]),
             h.make_node("Sub", ["xd", "md"], ["c"]),
             h.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             h.make_node("Transpose", ["cq"], ["ct"], perm=[0, 2, 3, 1]),
             h.make_node("DequantizeLinear", ["ct", "s", "z"], ["y"])]
    return ms_graph(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 8, 8, 3]},
                    {"s": s, "z": z, "shape": np.array([1, 3, 1, 1], np.int64)}, opset=13)


def test_int8_moves_between_quantize_and_dequantize_run_on_the_chip(mem):
    """tf2onnx's int8 Reshape / Transpose between QuantizeLinear and DequantizeLinear: each
    QuantizeLinear was left on the CPU ("no NPU operator of this type") with its moves, a
    host step per move; now moved on the grid it keeps, as onnxruntime's uint8 moves are."""
    model = _q8_moves_model()
    _check_on_chip(mem, model, _ort(model))
