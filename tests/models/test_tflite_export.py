import numpy as np
import pytest

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.ir import Graph, Op, Tensor
from libnpu.compiler.tflite_export import TFLiteExportError, export_tflite
from libnpu.compiler.tflite_import import import_tflite, load_tflite


def test_resnet8_round_trip_is_bit_exact(resnet8_path, litert):
    g = load_tflite(resnet8_path)
    data = export_tflite(g)
    again = import_tflite(data)
    assert again.op_counts() == g.op_counts()
    for name, t in g.tensors.items():
        u = again.tensors[name]
        assert (u.shape, u.dtype, u.quant) == (t.shape, t.dtype, t.quant), name
        if t.is_constant:
            np.testing.assert_array_equal(u.data, t.data)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
        np.testing.assert_array_equal(litert(data, [x])[0], litert(resnet8_path, [x])[0])


def test_blazeface_float_round_trip(blazeface_path, litert):
    data = export_tflite(load_tflite(blazeface_path))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    for a, b in zip(litert(data, [x], reference=False), litert(blazeface_path, [x], reference=False)):
        np.testing.assert_array_equal(a, b)


def _conv_graph(pads) -> Graph:
    rng = np.random.default_rng(2)
    g = Graph("pads")
    g.add_tensor(Tensor("x", (1, 7, 7, 2), "float32"))
    g.add_const("w", rng.standard_normal((3, 3, 3, 2)).astype(np.float32))
    g.add_tensor(Tensor("y", (1, 4, 4, 3), "float32"))
    g.add_op(Op("CONV_2D", ["x", "w", ""], ["y"], dict(stride=(2, 2), dilation=(1, 1), pads=pads, groups=1,
                                                       activation="NONE")))
    g.inputs, g.outputs = ["x"], ["y"]
    return g


def test_explicit_padding_becomes_pad_op(litert):
    x = np.random.default_rng(3).standard_normal((1, 7, 7, 2)).astype(np.float32)
    for pads, extra_pad in (((1, 1, 1, 1), False), ((2, 1, 0, 3), True)):
        g = _conv_graph(pads)
        if pads == (2, 1, 0, 3):
            g.tensors["y"] = Tensor("y", (1, 4, 4, 3), "float32")
        data = export_tflite(g)
        assert ("PAD" in import_tflite(data).op_counts()) == extra_pad
        np.testing.assert_allclose(litert(data, [x], reference=False)[0], run_float(g, [x])["y"],
                                   rtol=1e-5, atol=1e-5)


def test_unexportable_op():
    g = Graph("s")
    g.add_tensor(Tensor("x", (1, 4), "float32"))
    g.add_tensor(Tensor("y", (1, 2), "float32"))
    g.add_op(Op("STRIDED_SLICE", ["x"], ["y"], dict(begin=(0, 0), end=(1, 2), strides=(1, 1), new_shape=(1, 2))))
    g.inputs, g.outputs = ["x"], ["y"]
    with pytest.raises(TFLiteExportError, match="cannot export STRIDED_SLICE"):
        export_tflite(g)
