"""ONNX models as users ship them: small float models run through onnxruntime's own graph
optimizer (``SessionOptions.optimized_model_filepath``), which writes ``com.microsoft`` ops
(FusedConv, FusedGemm, FusedMatMul, QuickGelu, Gelu, FastGelu, SkipLayerNormalization...),
or quantized by ``quantize_static`` in the QOperator format (QLinear* ops); and tiny models
of one such op each, for the tests of :mod:`libnpu.compiler.onnx_ms_ops`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

__all__ = ["FLOAT_MODELS", "optimized", "quantized_qoperator", "ms_model", "ms_graph", "feeds"]

MS = "com.microsoft"


class _Weights:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.made: list[onnx.TensorProto] = []

    def __call__(self, name: str, *shape: int, scale: float = 0.3, offset: float = 0.0) -> str:
        data = self.rng.standard_normal(shape) * scale + offset
        self.made.append(nh.from_array(data.astype(np.float32), name))
        return name

    def const(self, name: str, value, dtype=np.float32) -> str:
        self.made.append(nh.from_array(np.asarray(value, dtype), name))
        return name


def _model(nodes, weights: _Weights, inputs: dict[str, list[int]], outputs: dict[str, list[int]], name: str,
           opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> onnx.ModelProto:
    graph = h.make_graph(nodes, name, [h.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()], weights.made)
    model = h.make_model(graph, opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def cnn() -> onnx.ModelProto:
    """Conv+Relu, depthwise Conv+Clip(0, 6), 1x1 Conv+SiLU, Conv+LeakyRelu, a residual Add,
    GlobalAveragePool, Gemm+Relu, Gemm: FusedConv, QuickGelu and FusedGemm once optimized."""
    w = _Weights(1)
    n = [h.make_node("Conv", ["x", w("w1", 8, 3, 3, 3), w("b1", 8, scale=.1)], ["c1"], pads=[1, 1, 1, 1]),
         h.make_node("Relu", ["c1"], ["r1"]),
         h.make_node("Conv", ["r1", w("w2", 8, 1, 3, 3), w("b2", 8, scale=.1)], ["c2"], pads=[1, 1, 1, 1], group=8),
         h.make_node("Clip", ["c2", w.const("zero", 0.0), w.const("six", 6.0)], ["r2"]),
         h.make_node("Conv", ["r2", w("w3", 16, 8, 1, 1), w("b3", 16, scale=.1)], ["c3"]),
         h.make_node("Sigmoid", ["c3"], ["s3"]), h.make_node("Mul", ["c3", "s3"], ["m3"]),
         h.make_node("Conv", ["m3", w("w4", 16, 16, 3, 3, scale=.1), w("b4", 16, scale=.1)], ["c4"], pads=[1, 1, 1, 1]),
         h.make_node("LeakyRelu", ["c4"], ["l4"], alpha=0.1),
         h.make_node("Add", ["l4", "m3"], ["a"]), h.make_node("GlobalAveragePool", ["a"], ["p"]),
         h.make_node("Flatten", ["p"], ["f"]),
         h.make_node("Gemm", ["f", w("wg", 12, 16), w("bg", 12, scale=.1)], ["g"], transB=1),
         h.make_node("Relu", ["g"], ["gr"]),
         h.make_node("Gemm", ["gr", w("wh", 5, 12), w("bh", 5, scale=.1)], ["y"], transB=1)]
    return _model(n, w, {"x": [1, 3, 16, 16]}, {"y": [1, 5]}, "cnn")


def audio() -> onnx.ModelProto:
    """1-D Conv+Relu, 1-D Conv, x * sigmoid(1.702 x), a MatMul head: FusedConv, QuickGelu."""
    w = _Weights(2)
    n = [h.make_node("Conv", ["x", w("w1", 8, 1, 3), w("b1", 8, scale=.1)], ["c1"], pads=[1, 1], strides=[2]),
         h.make_node("Relu", ["c1"], ["r1"]),
         h.make_node("Conv", ["r1", w("w2", 8, 8, 3, scale=.2), w("b2", 8, scale=.1)], ["c2"], pads=[1, 1]),
         h.make_node("Mul", ["c2", w.const("k", 1.702)], ["ck"]), h.make_node("Sigmoid", ["ck"], ["sk"]),
         h.make_node("Mul", ["c2", "sk"], ["q"]), h.make_node("Transpose", ["q"], ["t"], perm=[0, 2, 1]),
         h.make_node("MatMul", ["t", w("wm", 8, 4)], ["mm"]), h.make_node("Add", ["mm", w("bm", 4, scale=.1)], ["y"])]
    return _model(n, w, {"x": [1, 1, 64]}, {"y": [1, 32, 4]}, "audio")


def encoder(tanh: bool = False) -> onnx.ModelProto:
    """A pre-norm transformer block (LayerNormalization, two-head attention, GELU MLP, residual
    adds): FusedMatMul, Gelu (erf) or FastGelu (``tanh``), SkipLayerNormalization once optimized."""
    d, s, heads = 16, 8, 2
    w = _Weights(3 + tanh)

    def norm(x: str, out: str, p: str) -> onnx.NodeProto:
        return h.make_node("LayerNormalization", [x, w(p + "g", d, scale=.1, offset=1.0), w(p + "b", d, scale=.1)],
                           [out], axis=-1, epsilon=1e-5)
    n = [norm("x", "n1", "l1")]
    split, joined = w.const("split", [1, s, heads, d // heads], np.int64), w.const("joined", [1, s, d], np.int64)
    for q in "qkv":
        n += [h.make_node("MatMul", ["n1", w("w" + q, d, d)], [q + "m"]),
              h.make_node("Add", [q + "m", w("b" + q, d, scale=.1)], [q + "a"]),
              h.make_node("Reshape", [q + "a", split], [q + "r"]),
              h.make_node("Transpose", [q + "r"], [q + "t"], perm=[0, 2, 3, 1] if q == "k" else [0, 2, 1, 3])]
    n += [h.make_node("MatMul", ["qt", "kt"], ["sc"]),
          h.make_node("Div", ["sc", w.const("root", np.sqrt(d / heads))], ["sd"]),
          h.make_node("Softmax", ["sd"], ["pr"], axis=-1), h.make_node("MatMul", ["pr", "vt"], ["ctx"]),
          h.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]), h.make_node("Reshape", ["ct", joined], ["cr"]),
          h.make_node("MatMul", ["cr", w("wo", d, d)], ["om"]),
          h.make_node("Add", ["om", w("bo", d, scale=.1)], ["oa"]),
          h.make_node("Add", ["x", "oa"], ["res1"]), norm("res1", "n2", "l2"),
          h.make_node("MatMul", ["n2", w("wf1", d, 4 * d)], ["f1"]),
          h.make_node("Add", ["f1", w("bf1", 4 * d, scale=.1)], ["f1b"])]
    if tanh:
        n += [h.make_node("Pow", ["f1b", w.const("three", 3.0)], ["p3"]),
              h.make_node("Mul", ["p3", w.const("c044", 0.044715)], ["p3c"]),
              h.make_node("Add", ["f1b", "p3c"], ["in"]),
              h.make_node("Mul", ["in", w.const("s2pi", np.sqrt(2 / np.pi))], ["ins"]),
              h.make_node("Tanh", ["ins"], ["th"]), h.make_node("Add", ["th", w.const("one", 1.0)], ["th1"]),
              h.make_node("Mul", ["f1b", w.const("half", 0.5)], ["xh"]), h.make_node("Mul", ["xh", "th1"], ["ge"])]
    else:
        n += [h.make_node("Div", ["f1b", w.const("sqrt2", np.sqrt(2))], ["d2"]), h.make_node("Erf", ["d2"], ["e"]),
              h.make_node("Add", ["e", w.const("one", 1.0)], ["e1"]), h.make_node("Mul", ["f1b", "e1"], ["xe"]),
              h.make_node("Mul", ["xe", w.const("half", 0.5)], ["ge"])]
    n += [h.make_node("MatMul", ["ge", w("wf2", 4 * d, d, scale=.2)], ["f2"]),
          h.make_node("Add", ["f2", w("bf2", d, scale=.1)], ["f2b"]), h.make_node("Add", ["res1", "f2b"], ["res2"]),
          norm("res2", "y", "l3")]
    return _model(n, w, {"x": [1, s, d]}, {"y": [1, s, d]}, "encoder_tanh" if tanh else "encoder")


def mlp() -> onnx.ModelProto:
    """MatMul of a transposed input scaled by 0.5, bias, Relu, MatMul, Sigmoid: FusedMatMul
    with transA and alpha once optimized."""
    w = _Weights(5)
    n = [h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
         h.make_node("MatMul", ["xt", w("w1", 6, 10)], ["m1"]), h.make_node("Mul", ["m1", w.const("a", 0.5)], ["m1a"]),
         h.make_node("Add", ["m1a", w("b1", 10, scale=.1)], ["ab"]),
         h.make_node("Relu", ["ab"], ["r"]), h.make_node("MatMul", ["r", w("w2", 10, 3)], ["m2"]),
         h.make_node("Sigmoid", ["m2"], ["y"])]
    return _model(n, w, {"x": [1, 6, 12]}, {"y": [1, 12, 3]}, "mlp")


def qops() -> onnx.ModelProto:
    """Conv, Add, Mul, Sigmoid, LeakyRelu, Concat, AveragePool, GlobalAveragePool, Gemm: each
    a QLinear* op (or QGemm) once quantized in the QOperator format."""
    w = _Weights(6)
    n = [h.make_node("Conv", ["x", w("w1", 8, 3, 3, 3), w("b1", 8, scale=.1)], ["c1"], pads=[1, 1, 1, 1]),
         h.make_node("Conv", ["x", w("w2", 8, 3, 1, 1), w("b2", 8, scale=.1)], ["c2"]),
         h.make_node("Add", ["c1", "c2"], ["a"]), h.make_node("Sigmoid", ["a"], ["s"]),
         h.make_node("Mul", ["a", "s"], ["m"]), h.make_node("LeakyRelu", ["c1"], ["l"], alpha=0.2),
         h.make_node("Concat", ["m", "l"], ["cat"], axis=1),
         h.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("GlobalAveragePool", ["ap"], ["gp"]), h.make_node("Flatten", ["gp"], ["f"]),
         h.make_node("Gemm", ["f", w("wg", 6, 16), w("bg", 6, scale=.1)], ["y"], transB=1)]
    return _model(n, w, {"x": [1, 3, 12, 12]}, {"y": [1, 6]}, "qops", (("", 13),))


FLOAT_MODELS = {"cnn": cnn, "audio": audio, "encoder": encoder, "encoder-tanh": lambda: encoder(True), "mlp": mlp,
                "qops": qops}


def feeds(model: onnx.ModelProto, count: int, seed: int) -> list[list[np.ndarray]]:
    """``count`` feeds of uniform values in [-1, 1] for ``model``'s (static, float) inputs."""
    rng = np.random.default_rng(seed)
    shapes = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    return [[rng.uniform(-1, 1, s).astype(np.float32) for s in shapes] for _ in range(count)]


def optimized(model: onnx.ModelProto, folder: Path, level: str) -> onnx.ModelProto:
    """``model`` as onnxruntime saves it after its graph optimizations at ``level``
    (``"extended"`` or ``"all"``, the CPU execution provider's)."""
    import onnxruntime  # type: ignore[import-untyped]   # a test dependency
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = {"extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    options.log_severity_level = 3      # the NCHWc warning: what "all" writes is this machine's
    path = folder / f"{model.graph.name}-{level}.onnx"
    options.optimized_model_filepath = str(path)
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(path))


def quantized_qoperator(model: onnx.ModelProto, folder: Path, count: int = 8, seed: int = 1) -> onnx.ModelProto:
    """``model`` quantized by ``quantize_static`` in the QOperator format (uint8 activations,
    int8 weights, onnxruntime's defaults), calibrated on ``count`` feeds in [-1, 1]."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
    source, out = folder / f"{model.graph.name}-float.onnx", folder / f"{model.graph.name}-qop.onnx"
    onnx.save(model, str(source))
    names = [i.name for i in model.graph.input]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([dict(zip(names, f)) for f in feeds(model, count, seed)])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)
    quantize_static(str(source), str(out), Reader(), quant_format=QuantFormat.QOperator)
    return onnx.load(str(out))


def ms_model(op: str, inputs: dict[str, list[int]], outputs: dict[str, list[int]], weights: dict[str, np.ndarray],
             domain: str = MS, opset: int = 17, order: list[str] | None = None,
             node_outputs: list[str] | None = None, **attrs) -> onnx.ModelProto:
    """One ``op`` node (domain ``domain``) reading ``order`` (default: ``inputs`` then
    ``weights``; "" an absent optional input), writing ``node_outputs`` (default:
    ``outputs``, the model's outputs)."""
    w = _Weights(0)
    for name, data in weights.items():
        w.const(name, data, data.dtype)
    node = h.make_node(op, order if order is not None else list(inputs) + list(weights),
                       node_outputs if node_outputs is not None else list(outputs), domain=domain, **attrs)
    return _model([node], w, inputs, outputs, op, (("", opset), (MS, 1)))


def ms_graph(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: dict[str, list[int]],
             weights: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    """``nodes`` (any domains) as a model with float ``inputs`` and ``outputs``, ``weights``
    its initializers (in their dtypes)."""
    w = _Weights(0)
    for name, data in weights.items():
        w.const(name, data, data.dtype)
    return _model(nodes, w, inputs, outputs, nodes[0].op_type, (("", opset), (MS, 1)))
