import numpy as np
import onnx
import pytest

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.onnx_import import ONNXImportError, import_onnx
from tests.support import model_builders as builders

ort = pytest.importorskip("onnxruntime")


def _ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})


@pytest.mark.parametrize("make,shape", [(builders.small_cnn, (1, 3, 16, 16)), (builders.layout_mix, (1, 4, 8, 8)),
                                        (builders.exporter_style, (1, 3, 8, 8))])
@pytest.mark.parametrize("nhwc_io", [False, True])
def test_float_ir_matches_onnxruntime(make, shape, nhwc_io):
    model = make()
    g = import_onnx(model, nhwc_io=nhwc_io)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    feed = x.transpose(0, 2, 3, 1) if nhwc_io else x
    ours = run_float(g, [feed])
    for name, ref in zip(g.outputs, _ort(model, x)):
        got = ours[name]
        if nhwc_io and ref.ndim == 4 and got.shape != ref.shape:
            got = got.transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_small_cnn_structure():
    g = import_onnx(builders.small_cnn())
    assert g.op_counts() == {"TRANSPOSE": 1, "CONV_2D": 3, "MUL": 1, "ADD": 2, "RELU": 3,
                             "DEPTHWISE_CONV_2D": 1, "RELU6": 1, "MAX_POOL_2D": 1, "AVERAGE_POOL_2D": 1,
                             "RESHAPE": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    dw = next(op for op in g.ops if op.type == "DEPTHWISE_CONV_2D")
    assert g.tensors[dw.inputs[1]].shape == (1, 3, 3, 16)  # [1, KH, KW, C * multiplier]
    conv = next(op for op in g.ops if op.type == "CONV_2D")
    assert g.tensors[conv.inputs[1]].shape == (16, 3, 3, 3)  # OHWI
    assert g.tensors[conv.outputs[0]].shape == (1, 16, 16, 16)  # NHWC inside
    assert g.tensors[g.inputs[0]].shape == (1, 3, 16, 16)  # ONNX layout at the edge
    strided = [op for op in g.ops if op.type == "CONV_2D" and op.attrs["stride"] == (2, 2)]
    assert strided[0].attrs["pads"] == (1, 1, 1, 1)  # ONNX explicit pads kept as given


def test_layout_sensitive_ops():
    g = import_onnx(builders.layout_mix(), nhwc_io=True)
    # Flatten of an 8x8 feature map must see NCHW order: one TRANSPOSE back before RESHAPE.
    reshape = next(op for op in g.ops if op.type == "RESHAPE")
    producer = g.producers()[reshape.inputs[0]]
    assert producer.type == "TRANSPOSE" and producer.attrs["perm"] == (0, 3, 1, 2)
    cat = next(op for op in g.ops if op.type == "CONCATENATION")
    assert cat.attrs["axis"] == 3  # ONNX channel axis 1 -> NHWC axis 3
    mean = next(op for op in g.ops if op.type == "MEAN")
    assert mean.attrs["axes"] == (1, 2)


def test_unsupported_op_is_named():
    with pytest.raises(ONNXImportError, match=r"unsupported op Sin node 1 \('Sin_y'\)"):
        import_onnx(builders.unsupported("Sin"))


def test_garbage_bytes_rejected():
    with pytest.raises(ONNXImportError, match="not a readable ONNX model"):
        import_onnx(b"\x08\x07garbage-not-onnx" * 3)


def test_shape_arithmetic_is_folded():
    g = import_onnx(builders.exporter_style())
    assert g.op_counts() == {"TRANSPOSE": 2, "MUL": 1, "CONV_2D": 1, "RELU": 1, "RESHAPE": 1,
                             "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    reshape = next(op for op in g.ops if op.type == "RESHAPE")
    assert reshape.attrs["new_shape"] == (1, 256)


@pytest.mark.parametrize("mode,coord,nearest", [
    ("linear", "asymmetric", ""), ("linear", "align_corners", ""), ("linear", "half_pixel", ""),
    ("linear", "pytorch_half_pixel", ""), ("nearest", "asymmetric", "floor"),
    ("nearest", "align_corners", "round_prefer_ceil"), ("nearest", "tf_half_pixel_for_nn", "floor")])
def test_resize_matches_onnxruntime(mode, coord, nearest):
    model = builders.resize(mode, coord, nearest or "round_prefer_floor")
    g = import_onnx(model)
    assert any(op.type.startswith("RESIZE_") for op in g.ops)
    x = np.random.default_rng(5).standard_normal((1, 2, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(run_float(g, [x])[g.outputs[0]], _ort(model, x)[0], rtol=1e-5, atol=1e-5)


def test_resize_without_tflite_equivalent_is_refused():
    # Nearest resizing in any mode runs as gathers; cubic has no equivalent.
    with pytest.raises(ONNXImportError, match="Resize mode=cubic coordinate_transformation_mode=half_pixel"):
        import_onnx(builders.resize("cubic", "half_pixel"))
