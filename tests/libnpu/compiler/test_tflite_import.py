import numpy as np
import pytest

from libnpu.compiler.ir import IRError
from libnpu.compiler.tflite_import import TFLiteImportError, UnsupportedOpError, import_tflite, load_tflite
from tests.support.model_builders import single_op_tflite


def test_resnet8_structure(resnet8_path):
    g = load_tflite(resnet8_path)
    assert g.op_counts() == {"CONV_2D": 9, "ADD": 3, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                             "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    (inp,), (out,) = g.inputs, g.outputs
    assert g.tensors[inp].shape == (1, 32, 32, 3) and g.tensors[inp].dtype == "int8"
    assert g.tensors[out].shape == (1, 10) and g.tensors[out].dtype == "int8"
    # Softmax output follows the TFLite int8 spec: scale 1/256, zero point -128.
    assert g.tensors[out].quant.scale[0] == pytest.approx(1 / 256)
    assert g.tensors[out].quant.zero_point[0] == -128
    convs = [op for op in g.ops if op.type == "CONV_2D"]
    shapes = [g.tensors[op.outputs[0]].shape for op in convs]
    assert shapes[0] == (1, 32, 32, 16) and shapes[-1] == (1, 8, 8, 64)
    for op in convs:
        w = g.tensors[op.inputs[1]]
        b = g.tensors[op.inputs[2]]
        assert w.dtype == "int8" and w.quant.per_channel and w.quant.axis == 0
        assert w.quant.scale.size == w.shape[0]
        assert np.all(w.quant.zero_point == 0)
        assert b.dtype == "int32" and b.shape == (w.shape[0],)
        assert op.attrs["groups"] == 1
    # 3x3 stride-1 SAME conv -> 1 pixel each side; 3x3 stride-2 SAME on even size -> (0,1)
    assert convs[0].attrs["pads"] == (1, 1, 1, 1)
    s2 = [op for op in convs if op.attrs["stride"] == (2, 2) and g.tensors[op.inputs[1]].shape[1] == 3]
    assert s2 and all(op.attrs["pads"] == (0, 1, 0, 1) for op in s2)
    # 12.5 M MACs, as MLPerf-Tiny documents
    assert 12.4e6 < g.macs() < 12.6e6
    fc = next(op for op in g.ops if op.type == "FULLY_CONNECTED")
    assert g.op_macs(fc) == 640


def test_blazeface_structure(blazeface_path):
    g = load_tflite(blazeface_path)
    assert g.op_counts() == {"DEQUANTIZE": 74, "CONV_2D": 21, "RELU": 17, "DEPTHWISE_CONV_2D": 16,
                             "ADD": 16, "PAD": 11, "MAX_POOL_2D": 3, "RESHAPE": 4, "CONCATENATION": 2}
    assert [g.tensors[n].shape for n in g.inputs] == [(1, 128, 128, 3)]
    assert {n: g.tensors[n].shape for n in g.outputs} == {
        "regressors": (1, 896, 16), "classificators": (1, 896, 1)}
    # fp16 weights sit behind DEQUANTIZE ops
    deq = [op for op in g.ops if op.type == "DEQUANTIZE"]
    assert all(g.tensors[op.inputs[0]].dtype == "float16" and g.tensors[op.inputs[0]].is_constant for op in deq)
    pads = [op.attrs["paddings"] for op in g.ops if op.type == "PAD"]
    assert all(p[:3] == ((0, 0), (0, 0), (0, 0)) and p[3][0] == 0 for p in pads)
    dw = [op for op in g.ops if op.type == "DEPTHWISE_CONV_2D"]
    assert all(op.attrs["depth_multiplier"] == 1 for op in dw)
    g.validate()


def _tiny_model(builtin_code: int, deprecated_code: int) -> bytes:
    """A one-op model (input -> op -> output) with the two op-code fields set as given."""
    return single_op_tflite(builtin_code, [("in", (1, 4), None), ("out", (1, 4), None)], [0], [1],
                            deprecated_code=deprecated_code)


def test_opcode_uses_max_of_old_and_new_fields():
    # Old writers leave builtin_code 0 (ADD) and put the op in the deprecated field.
    g = import_tflite(_tiny_model(0, 19))  # 19 = RELU
    assert [op.type for op in g.ops] == ["RELU"]
    g = import_tflite(_tiny_model(22, 22))  # RESHAPE, written by a new converter
    assert [op.type for op in g.ops] == ["RESHAPE"]
    # Codes above 126 keep 127 (PLACEHOLDER_FOR_GREATER_OP_CODES) in the deprecated field.
    g = import_tflite(_tiny_model(150, 127))  # 150 = GELU
    assert [op.type for op in g.ops] == ["GELU"]
    with pytest.raises(UnsupportedOpError, match="unsupported op SIGN node 0"):
        import_tflite(_tiny_model(158, 127))


def test_unsupported_op_names_op_and_node():
    with pytest.raises(UnsupportedOpError, match=r"unsupported op SIN node 0 \(output 'out'\)"):
        import_tflite(_tiny_model(66, 66))  # 66 = SIN


def test_not_a_tflite_file():
    with pytest.raises(TFLiteImportError, match="not a TFLite"):
        import_tflite(b"\0" * 64)
    assert issubclass(TFLiteImportError, IRError)


def test_truncated_or_corrupted_file_gives_clear_error(resnet8_path):
    data = resnet8_path.read_bytes()
    for n in (10, 100, 5000, len(data) // 2, len(data) - 1):
        with pytest.raises(TFLiteImportError, match="corrupted or truncated|not a TFLite"):
            import_tflite(data[:n])
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(30):
        buf = bytearray(data)
        for j in rng.integers(0, len(buf), 20):
            buf[j] ^= 0xFF
        try:
            import_tflite(bytes(buf))
            outcomes.add("ok")  # flips that land in weight bytes give a valid model
        except IRError as exc:
            outcomes.add(type(exc).__name__)
    assert outcomes - {"ok"}, "random damage was never detected"
