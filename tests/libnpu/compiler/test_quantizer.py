import numpy as np
import pytest

from libnpu.compiler.float_ref import FloatInterpreter, run_float
from libnpu.compiler.ir import Graph
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import (
    Calibrator,
    QuantizationError,
    build_calibration_model,
    calibrate,
    quantize,
    quantize_model,
)
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import load_tflite
from tests.support import blazeface
from tests.support import model_builders as builders


def _data(shape, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def check_tflite_int8_spec(g: Graph) -> None:
    """Assert the constraints of the TFLite int8 quantization spec on every op."""
    T = g.tensors
    for op in g.ops:
        if op.type == "QUANTIZE":
            assert T[op.inputs[0]].dtype == "float32" and T[op.outputs[0]].dtype == "int8"
            continue
        if op.type == "DEQUANTIZE":
            assert T[op.inputs[0]].dtype == "int8" and T[op.outputs[0]].dtype == "float32"
            continue
        acts = [op.inputs[0]] + op.outputs if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") \
            else [i for i in op.inputs if i] + op.outputs
        for n in acts:
            t = T[n]
            assert t.dtype == "int8" and t.quant is not None and not t.quant.per_channel, (op.describe(), n)
            assert -128 <= t.quant.zero_point[0] <= 127
        if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            w = T[op.inputs[1]]
            axis = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}[op.type]
            assert w.dtype == "int8" and np.all(w.quant.zero_point == 0)
            assert np.all(np.abs(w.data.astype(int)) <= 127)
            if op.type != "FULLY_CONNECTED":
                assert w.quant.per_channel and w.quant.axis == axis and w.quant.scale.size == w.shape[axis]
            if op.inputs[2]:  # bias is optional
                b = T[op.inputs[2]]
                assert b.dtype == "int32" and np.all(b.quant.zero_point == 0)
                np.testing.assert_allclose(b.quant.scale, T[op.inputs[0]].quant.scale[0] * w.quant.scale,
                                           rtol=1e-6)
        if op.type in ("SOFTMAX", "LOGISTIC"):
            q = T[op.outputs[0]].quant
            assert q.scale[0] == np.float32(1 / 256) and q.zero_point[0] == -128
        if op.type == "TANH":
            q = T[op.outputs[0]].quant
            assert q.scale[0] == np.float32(1 / 128) and q.zero_point[0] == 0
        if op.type in ("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "PAD", "TRANSPOSE", "CONCATENATION"):
            qs = [T[i].quant for i in op.inputs if i] + [T[op.outputs[0]].quant]
            assert all(q == qs[0] for q in qs), op.describe()


def test_optimize_folds_batchnorm_and_fuses_activations():
    g = import_onnx(builders.small_cnn())
    o = optimize(g)
    counts = o.op_counts()
    assert "MUL" not in counts and "RELU" not in counts and "RELU6" not in counts
    assert counts["ADD"] == 1  # only the residual add is left
    acts = {op.type: op.attrs.get("activation") for op in o.ops if op.type != "CONV_2D"}
    assert acts["DEPTHWISE_CONV_2D"] == "RELU6" and acts["ADD"] == "RELU"
    x = _data((1, 3, 16, 16), 1, 0)[0]
    np.testing.assert_allclose(run_float(o, [x])["prob"], run_float(g, [x])["prob"], rtol=1e-5, atol=1e-6)


def test_optimize_folds_fp16_dequantize(blazeface_path):
    g = load_tflite(blazeface_path)
    o = optimize(g)
    assert "DEQUANTIZE" not in o.op_counts() and "RELU" not in o.op_counts()
    assert all(t.dtype == "float32" for t in o.constants())
    x = np.random.default_rng(0).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    a, b = run_float(g, [x]), run_float(o, [x])
    for n in g.outputs:
        np.testing.assert_allclose(b[n], a[n], rtol=1e-4, atol=1e-3)


def test_calibration_model_exposes_every_activation():
    g = optimize(import_onnx(builders.small_cnn()))
    cal = build_calibration_model(g)
    produced = {o for op in g.ops for o in op.outputs}
    assert set(cal.outputs) == produced | set(g.inputs)
    assert cal.outputs[:len(g.outputs)] == g.outputs
    outs = FloatInterpreter(cal).run([_data((1, 3, 16, 16), 1, 0)[0]])
    assert set(outs) == set(cal.outputs)


def test_percentile_ignores_outliers():
    g = optimize(import_onnx(builders.small_cnn()))
    data = _data((1, 3, 16, 16), 4, 1)
    data[0][0, 0, 0, 0] = 60.0  # a single extreme input pixel
    mm = calibrate(g, [[d] for d in data], method="minmax")
    pc = calibrate(g, [[d] for d in data], method="percentile", percentile=99.9)
    x = g.inputs[0]
    assert mm[x][1] == pytest.approx(60.0)
    assert pc[x][1] < 6.0
    with pytest.raises(QuantizationError, match="unknown calibration method"):
        Calibrator(g, "bogus")


def test_quantized_graph_follows_spec():
    for make, shape in ((builders.small_cnn, (1, 3, 16, 16)), (builders.layout_mix, (1, 4, 8, 8))):
        g = import_onnx(make())
        q = quantize_model(g, [[d] for d in _data(shape, 8, 2)])
        check_tflite_int8_spec(q)
        assert [q.tensors[n].dtype for n in q.inputs + q.outputs] == ["float32"] * (1 + len(q.outputs))
        qi = quantize_model(g, [[d] for d in _data(shape, 8, 2)], io_dtype="int8")
        assert all(qi.tensors[n].dtype == "int8" for n in qi.inputs + qi.outputs)
        assert "QUANTIZE" not in qi.op_counts()


def test_fc_per_channel_option():
    g = import_onnx(builders.small_cnn())
    q = quantize_model(g, [[d] for d in _data((1, 3, 16, 16), 4, 2)], fc_per_channel=True)
    fc = next(op for op in q.ops if op.type == "FULLY_CONNECTED")
    w = q.tensors[fc.inputs[1]]
    assert w.quant.per_channel and w.quant.axis == 0 and w.quant.scale.size == 10


def test_accuracy_against_float_and_onnxruntime(litert):
    """Run our int8 graph with LiteRT's reference int8 kernels (the chip's golden model)."""
    model = builders.small_cnn()
    g = import_onnx(model)
    cal = _data((1, 3, 16, 16), 32, 3)
    test = _data((1, 3, 16, 16), 48, 4)
    q = quantize_model(g, [[c] for c in cal])
    tfl = export_tflite(q)
    fi = FloatInterpreter(g)
    ours_err, ours_top1 = [], 0
    for x in test:
        f = fi.run([x])["prob"]
        o = litert(tfl, [x])[0]
        ours_err.append(np.abs(f - o).max())
        ours_top1 += int(f.argmax() == o.argmax())
    assert np.mean(ours_err) < 0.03 and ours_top1 >= 44

    ort = pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(cal)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {"x": x}

    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        fp, qp = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        with open(fp, "wb") as f:
            f.write(model.SerializeToString())
        quantize_static(fp, qp, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
        sess = ort.InferenceSession(qp, providers=["CPUExecutionProvider"])
        ort_err = [np.abs(fi.run([x])["prob"] - sess.run(None, {"x": x})[0]).max() for x in test]
    # Same calibration data and method: our error is in the same league as onnxruntime's.
    assert np.mean(ours_err) <= 1.5 * np.mean(ort_err) + 0.005, (np.mean(ours_err), np.mean(ort_err))


def test_layout_mix_int8_close_to_float(litert):
    g = import_onnx(builders.layout_mix())
    q = quantize_model(g, [[d] for d in _data((1, 4, 8, 8), 16, 5)])
    tfl = export_tflite(q)
    for x in _data((1, 4, 8, 8), 4, 6):
        f = run_float(g, [x])
        for name, got in zip(q.outputs, litert(tfl, [x])):
            # Concat of the input with a conv output shares one scale, so a few % is expected.
            assert np.abs(got - f[name]).max() < 0.05, name
            assert np.corrcoef(got.ravel(), f[name].ravel())[0, 1] > 0.98, name


def test_random_calibration_and_blazeface(blazeface_path, astronaut, litert):
    g = load_tflite(blazeface_path)
    img = astronaut.astype(np.float32) / 127.5 - 1.0

    def crop(y, x, size):
        step = size // 128
        return img[y:y + size:step, x:x + size:step][None].copy()
    cal = [crop(y, x, s) for y, x, s in [(0, 0, 512), (0, 64, 384), (128, 128, 256), (0, 0, 256),
                                         (256, 256, 256), (0, 256, 256), (64, 0, 384), (128, 0, 384)]]
    q = quantize_model(g, [[c] for c in cal])
    check_tflite_int8_spec(q)
    assert q.metadata["calibration"] == {"method": "minmax", "runs": 8, "random": False, "bias_correction": False}
    face = crop(0, 64, 384)
    ref = run_float(g, [face])
    got = dict(zip(q.outputs, litert(export_tflite(q), [face])))
    for name in g.outputs:
        assert np.corrcoef(ref[name].ravel(), got[name].ravel())[0, 1] > 0.97, name
    # The float model finds the astronaut's face; the int8 model finds the same box.
    f_score, f_box = blazeface.best_face(ref["regressors"], ref["classificators"])
    q_score, q_box = blazeface.best_face(got["regressors"], got["classificators"])
    assert f_score > 0.9 and 0.15 < f_box[2] - f_box[0] < 0.6
    assert q_score > 0.8 and blazeface.iou(f_box, q_box) > 0.85
    # Random data works too (no dataset given), just less accurately.
    qr = quantize_model(g, random_count=2)
    assert qr.metadata["calibration"]["random"] is True
    check_tflite_int8_spec(qr)


def test_quantize_rejects_quantized_graph(resnet8_path):
    g = load_tflite(resnet8_path)
    with pytest.raises(QuantizationError, match="expects a float graph"):
        quantize(g, {})
    with pytest.raises(QuantizationError, match="io_dtype"):
        quantize(g, {}, io_dtype="uint8")


def test_relu_after_concatenation_stays_separate():
    from libnpu.compiler.ir import Op, Tensor
    g = Graph("cat")
    for n, shape in (("a", (1, 2, 2, 3)), ("b", (1, 2, 2, 1)), ("c", (1, 2, 2, 4)), ("r", (1, 2, 2, 4))):
        g.add_tensor(Tensor(n, shape, "float32"))
    g.add_op(Op("CONCATENATION", ["a", "b"], ["c"], dict(axis=3, activation="NONE")))
    g.add_op(Op("RELU", ["c"], ["r"]))
    g.inputs, g.outputs = ["a", "b"], ["r"]
    o = optimize(g)
    assert [op.type for op in o.ops] == ["CONCATENATION", "RELU"]  # LiteRT's int8 concat has no activation


def _pad_conv_model(pads_hw, kernel: int, stride: int):
    """ONNX: Conv 1x1 -> Pad (zeros, H/W) -> Conv (no padding of its own) -> Relu."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    w0 = numpy_helper.from_array(rng.normal(0, 0.3, (3, 3, 1, 1)).astype(np.float32), "w0")
    w = numpy_helper.from_array(rng.normal(0, 0.3, (6, 3, kernel, kernel)).astype(np.float32), "w")
    (top, bottom), (left, right) = pads_hw
    pads = numpy_helper.from_array(np.array([0, 0, top, left, 0, 0, bottom, right], np.int64), "pads")
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv_in"),
             helper.make_node("Pad", ["a", "pads"], ["p"], name="pad0"),
             helper.make_node("Conv", ["p", "w"], ["c"], name="conv0", strides=[stride, stride]),
             helper.make_node("Relu", ["c"], ["y"], name="act0")]
    h = 12
    oh = (h + top + bottom - kernel) // stride + 1
    ow = (h + left + right - kernel) // stride + 1
    graph = helper.make_graph(nodes, "padconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, oh, ow])], [w0, w, pads])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("pads_hw, kernel, stride, folds", [
    (((1, 1), (1, 1)), 3, 1, True),       # SAME 3x3
    (((0, 1), (0, 1)), 3, 2, True),       # Keras' ZeroPadding2D before a stride-2 conv
    (((3, 3), (3, 3)), 3, 1, False),      # wider than the filter: the PAD stays
])
def test_optimize_folds_zero_pad_into_the_conv(pads_hw, kernel, stride, folds):
    g = import_onnx(_pad_conv_model(pads_hw, kernel, stride))
    o = optimize(g)
    assert ("PAD" not in o.op_counts()) == folds
    x = _data((1, 3, 12, 12), 1, 0)[0]
    out = g.outputs[0]
    np.testing.assert_allclose(run_float(o, [x])[out], run_float(g, [x])[out], rtol=1e-5, atol=1e-6)
