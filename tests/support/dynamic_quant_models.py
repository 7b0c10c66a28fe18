"""Dynamically quantized ONNX models as users make them: a small float CRNN quantized by
onnxruntime's own ``quantize_dynamic`` (int8 weights; activations quantized on each run)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from .model_builders import _Builder

CRNN_INPUT = (1, 1, 8, 16)
CRNN_OUTPUT = (8, 10)


def crnn_inputs(count: int, seed: int) -> list[np.ndarray]:
    """``count`` inputs of :func:`crnn`, uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, CRNN_INPUT).astype(np.float32) for _ in range(count)]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two arrays flattened, in float64."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def crnn(seed: int = 0, hidden: int = 8) -> onnx.ModelProto:
    """Conv + BN + Relu -> MaxPool -> columns as a sequence -> MatMul -> bidirectional LSTM
    -> MatMul (classes): a text-line recognizer in small. Input [1, 1, 8, 16], output [8, 10]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 8, 1, 3, 3), b.weight("b1", 8, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("BatchNormalization", ["c1", *b.bn("bn1", 8)], "n1")
    n("Relu", ["n1"], "r1")
    n("MaxPool", ["r1"], "p1", kernel_shape=[2, 2], strides=[2, 2])              # [1, 8, 4, 8]
    n("Transpose", ["p1"], "t", perm=[3, 0, 1, 2])                                # [8, 1, 8, 4]
    n("Reshape", ["t", b.const("seq_shape", np.array([8, 1, 32], np.int64))], "seq")
    n("MatMul", ["seq", b.weight("pw", 32, 16)], "proj")
    lstm = ["proj", b.weight("lw", 2, 4 * hidden, 16), b.weight("lr", 2, 4 * hidden, hidden),
            b.weight("lb", 2, 8 * hidden, scale=.1)]
    b.nodes.append(h.make_node("LSTM", lstm, ["ys"], hidden_size=hidden, direction="bidirectional"))  # [8, 2, 1, h]
    n("Transpose", ["ys"], "yt", perm=[0, 2, 1, 3])
    n("Reshape", ["yt", b.const("out_shape", np.array([8, 2 * hidden], np.int64))], "yf")
    n("MatMul", ["yf", b.weight("hw", 2 * hidden, 10)], "hm")
    n("Add", ["hm", b.weight("hb", 10, scale=.3)], "y")
    return b.model("crnn", {"x": list(CRNN_INPUT)}, {"y": list(CRNN_OUTPUT)}, opset=17)


def quantize_dynamic_model(model: onnx.ModelProto, folder: Path, weight_type: str = "QInt8",
                           per_channel: bool = False) -> bytes:
    """``model`` as ``onnxruntime.quantization.quantize_dynamic`` writes it (``weight_type``
    "QInt8" or "QUInt8")."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic
    source, out = folder / "float.onnx", folder / f"dynamic_{weight_type}_{int(per_channel)}.onnx"
    source.write_bytes(model.SerializeToString())
    logging.getLogger().setLevel(logging.ERROR)     # its advice to pre-process the model first
    quantize_dynamic(str(source), str(out), weight_type=getattr(QuantType, weight_type), per_channel=per_channel)
    return out.read_bytes()


def integer_product_of_activations(seed: int = 6) -> onnx.ModelProto:
    """``a @ a^T`` as ``quantize_dynamic`` writes a MatMul whose operands are both
    activations (attention's scores): DynamicQuantizeLinear on each, MatMulInteger, Cast,
    Mul by the product of the two run-time scales; no weight to dequantize. Input [4, 8]."""
    b = _Builder(seed)
    n = b.node
    n("MatMul", ["x", b.weight("w0", 8, 8)], "a")
    n("Transpose", ["a"], "at", perm=[1, 0])
    for v in ("a", "at"):
        b.nodes.append(h.make_node("DynamicQuantizeLinear", [v], [f"{v}_q", f"{v}_s", f"{v}_z"]))
    b.nodes.append(h.make_node("MatMulInteger", ["a_q", "at_q", "a_z", "at_z"], ["acc"]))
    n("Cast", ["acc"], "acc_f", to=TensorProto.FLOAT)
    n("Mul", ["a_s", "at_s"], "scale")
    n("Mul", ["acc_f", "scale"], "y")
    return b.model("integer_product_of_activations", {"x": [4, 8]}, {"y": [4, 4]}, opset=17)


def embedding_and_moved_codes(seed: int = 8) -> onnx.ModelProto:
    """An embedding (Gather from a table by int64 ids) -> MatMul -> a value read by a MatMul
    and by a Transpose, whose result a MatMul and a Relu read: ``quantize_dynamic`` gathers
    from the int8 table, transposes the codes (its 8-bit data movement) and dequantizes them
    for the Relu. Input ids [4]; outputs [4, 6], [8, 5], [8, 4]."""
    b = _Builder(seed)
    n = b.node
    n("Gather", [b.weight("emb", 20, 8, scale=1.0), "ids"], "e")
    n("MatMul", ["e", b.weight("w1", 8, 8)], "a")
    n("MatMul", ["a", b.weight("w2", 8, 6)], "y1")
    n("Transpose", ["a"], "at", perm=[1, 0])
    n("MatMul", ["at", b.weight("w3", 4, 5)], "y2")
    n("Relu", ["at"], "y3")
    g = h.make_graph(b.nodes, "embedding_and_moved_codes", [h.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                     [h.make_tensor_value_info(k, TensorProto.FLOAT, v)
                      for k, v in (("y1", [4, 6]), ("y2", [8, 5]), ("y3", [8, 4]))], b.inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def embedding_read_and_moved(seed: int = 9) -> onnx.ModelProto:
    """An embedding (Gather from a table by int64 ids) read as it is (a Relu) and through a
    Transpose (into a MatMul and a Relu): ``quantize_dynamic`` dequantizes the int8 table's
    codes for the first and transposes the codes (its 8-bit data movement) for the others,
    as a BiLSTM diacritizer's embedding feeds its Shape and its LSTM.
    Input ids [4]; outputs [4, 8], [8, 5], [8, 4]."""
    b = _Builder(seed)
    n = b.node
    n("Gather", [b.weight("emb", 20, 8, scale=1.0), "ids"], "e")
    n("Relu", ["e"], "y1")
    n("Transpose", ["e"], "et", perm=[1, 0])
    n("MatMul", ["et", b.weight("w", 4, 5)], "y2")
    n("Relu", ["et"], "y3")
    g = h.make_graph(b.nodes, "embedding_read_and_moved", [h.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                     [h.make_tensor_value_info(k, TensorProto.FLOAT, v)
                      for k, v in (("y1", [4, 8]), ("y2", [8, 5]), ("y3", [8, 4]))], b.inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model
