"""Dynamically quantized ONNX models (onnxruntime's ``quantize_dynamic``) import as the float
models they stand for (libnpu.compiler.dynamic_quant): float operators on the dequantized
weights, compiled as any float model, all of it on the chip; the compiled model meets the
bar against onnxruntime's run of the quantized file on inputs calibration never saw."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from libnpu.compiler.dynamic_quant import DYNAMIC_OPS, dequantize_dynamic
from libnpu.compiler.lower import compile_model
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.dynamic_quant_models import (
    cosine,
    crnn,
    crnn_inputs,
    embedding_and_moved_codes,
    embedding_read_and_moved,
    integer_product_of_activations,
    quantize_dynamic_model,
)

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")


def _run(model: bytes | onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("weight_type, per_channel", [("QInt8", False), ("QUInt8", True)])
def test_the_float_model_is_onnxruntimes_up_to_its_activation_rounding(tmp_path, weight_type, per_channel):
    quantized = quantize_dynamic_model(crnn(), tmp_path, weight_type, per_channel)
    model = onnx.load_from_string(quantized)
    assert {n.op_type for n in model.graph.node} >= {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"}
    floats = dequantize_dynamic(model).model
    assert not {n.op_type for n in floats.graph.node} & (DYNAMIC_OPS | {"DequantizeLinear", "Cast"})
    for x in crnn_inputs(2, seed=3):
        assert cosine(_run(floats, x), _run(quantized, x)) >= 0.999


def test_the_weights_are_the_files_codes_times_their_scales(tmp_path):
    # per channel, uint8 codes with zero points: w = (q - zero_point) * scale, channel by channel
    model = onnx.load_from_string(quantize_dynamic_model(crnn(), tmp_path, "QUInt8", per_channel=True))
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    floats = dequantize_dynamic(model).model
    head = next(n for n in floats.graph.node if n.op_type == "MatMul" and n.output[0] == "hm")
    got = next(numpy_helper.to_array(i) for i in floats.graph.initializer if i.name == head.input[1])
    codes, zero, scale = consts["hw_quantized"], consts["hw_zero_point"], consts["hw_scale"]
    assert zero.shape == scale.shape == (codes.shape[1],)
    np.testing.assert_array_equal(got, (codes.astype(np.float32) - zero.astype(np.float32)) * scale)


def test_an_embedding_and_codes_moved_as_codes(tmp_path):
    # Gather from the int8 table into a MatMulInteger, a Transpose of the codes into another
    # and into a DequantizeLinear: all float, as onnxruntime's integer arithmetic up to rounding
    quantized = quantize_dynamic_model(embedding_and_moved_codes(), tmp_path)
    model = onnx.load_from_string(quantized)
    assert {"Gather", "Transpose", "DequantizeLinear"} <= {n.op_type for n in model.graph.node}
    floats = dequantize_dynamic(model).model
    assert not {n.op_type for n in floats.graph.node} & (DYNAMIC_OPS | {"DequantizeLinear", "Cast", "Mul"})
    ids = {"ids": np.array([1, 5, 7, 19], np.int64)}
    sessions = [ort.InferenceSession(m, providers=["CPUExecutionProvider"])
                for m in (quantized, floats.SerializeToString())]
    for want, got in zip(*(s.run(None, ids) for s in sessions)):
        assert np.abs(got - want).max() <= 0.01 * np.abs(want).max()


def test_an_embedding_dequantized_directly_and_after_a_move(tmp_path):
    # The table's codes dequantized for one reader and transposed as codes for the others
    # (tashkeel's BiLSTM): only the direct reader got the float value, the moved codes
    # reached the MatMulInteger typed float and onnxruntime refused the host graph.
    quantized = quantize_dynamic_model(embedding_read_and_moved(), tmp_path)
    floats = dequantize_dynamic(onnx.load_from_string(quantized)).model
    assert not {n.op_type for n in floats.graph.node} & (DYNAMIC_OPS | {"DequantizeLinear", "Cast", "Mul"})
    rng = np.random.default_rng(4)
    ids = [rng.integers(0, 20, 4).astype(np.int64) for _ in range(11)]
    loadable = compile_model(quantized, [[i] for i in ids[:8]], recipe="fast")
    assert loadable.host_steps == []
    session = ort.InferenceSession(quantized, providers=["CPUExecutionProvider"])
    mem = ChipMemory(tmp_path, size=8 << 20)
    for i in ids[8:]:
        for got, want in zip(run_loadable(mem, loadable, [i.astype(np.int32)]), session.run(None, {"ids": i}),
                             strict=True):
            assert cosine(got, want) >= 0.98


def test_a_product_of_two_activations_stays_as_it_is():
    # no weight to dequantize: the CPU runs it as onnxruntime would (libnpu.compiler.onnx_host)
    model = integer_product_of_activations()
    assert [n.op_type for n in dequantize_dynamic(model).model.graph.node] == [n.op_type for n in model.graph.node]


def test_a_dynamically_quantized_model_compiles_whole_onto_the_chip(tmp_path):
    # It ran as host calls joined to the chip at int8 grids on int32 sums and per-run scales.
    quantized = quantize_dynamic_model(crnn(), tmp_path, "QInt8", per_channel=False)
    loadable = compile_model(quantized, [[x] for x in crnn_inputs(8, seed=1)], recipe="fast")
    assert loadable.host_steps == []
    mem = ChipMemory(tmp_path, size=8 << 20)
    for x in crnn_inputs(3, seed=2):
        assert cosine(run_loadable(mem, loadable, [x])[0], _run(quantized, x)) >= 0.98
