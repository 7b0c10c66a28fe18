import numpy as np
import pytest

from libnpu.compiler.frontend import NotInt8Error, check_int8, is_int8, load_model, to_int8_graph
from libnpu.compiler.ir import IRError
from tests.support import model_builders as builders


def test_int8_tflite_is_taken_as_is(resnet8_path):
    g = to_int8_graph(resnet8_path)
    assert g.op_counts()["CONV_2D"] == 9 and "QUANTIZE" not in g.op_counts()
    assert to_int8_graph(resnet8_path.read_bytes()).op_counts() == g.op_counts()


def test_float_tflite_and_onnx_are_quantized(blazeface_path):
    float_g = load_model(blazeface_path)
    with pytest.raises(NotInt8Error, match=r"CONV_2D node 'conv2d': tensor 'input' is float32"):
        check_int8(float_g)
    q = to_int8_graph(blazeface_path, random_count=1, recipe="fast")
    assert is_int8(q) and "DEQUANTIZE" in q.op_counts()  # only at the float outputs
    onnx_bytes = builders.small_cnn().SerializeToString()
    rng = np.random.default_rng(0)
    data = [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(4)]
    q = to_int8_graph(onnx_bytes, data, io_dtype="int8")
    assert is_int8(q) and q.tensors[q.inputs[0]].dtype == "int8"


def test_unknown_kind():
    with pytest.raises(IRError, match="unknown model kind"):
        load_model(b"\0" * 16, kind="caffe")


def test_op_without_chip_kernel_is_reported():
    from libnpu.compiler.ir import Graph, Op, QuantParams, Tensor
    g = Graph("sin")
    for n in "ac":
        g.add_tensor(Tensor(n, (1, 4), "int8", QuantParams(0.1, 0)))
    g.add_op(Op("SIN", ["a"], ["c"]))
    g.inputs, g.outputs = ["a"], ["c"]
    with pytest.raises(NotInt8Error, match="no int8 kernel for SIN"):
        check_int8(g)
