"""mediapipe's Convolution2DTransposeBias custom op (the selfie segmenters' last layer) is
TFLite's TRANSPOSE_CONV with a bias: it imports as that operator, its float reference matches
LiteRT's own kernel of the custom op, and quantized (int8, or int16 activations as the default
recipe gives the segmenters) it runs on the chip byte for byte as LiteRT's reference
TRANSPOSE_CONV does on the exported model."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import tflite
from ai_edge_litert.interpreter import Interpreter

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import MixedPrecisionError, promote
from libnpu.compiler.optimize import optimize
from libnpu.compiler.placement import CPU, NPU, place_model
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, named_options, run_reference

F = np.float32
SAME, VALID = 1, 2     # TfLitePadding


def _model(x_shape, w_shape, out_shape, padding: int, stride: tuple[int, int], options: bytes | None = None) -> bytes:
    """x -> Convolution2DTransposeBias(w, bias) as mediapipe's converter writes it."""
    rng = np.random.default_rng(sum(out_shape))
    w = (rng.standard_normal(w_shape) * 0.4).astype(F)
    bias = rng.uniform(-0.5, 0.5, w_shape[0]).astype(F)
    tensors = [TensorSpec(x_shape, F), TensorSpec(w_shape, F, data=w), TensorSpec((w_shape[0],), F, data=bias),
               TensorSpec(out_shape, F)]
    raw = struct.pack("<3i", padding, stride[1], stride[0]) if options is None else options
    op = OpSpec(tflite.BuiltinOperator.CUSTOM, [0, 1, 2], [3], custom_code="Convolution2DTransposeBias",
                custom_options=raw)
    return build_model(tensors, [op], [0], [3])


CASES = {   # the selfie segmenters' (2x2, stride 2, SAME), and a cropping odd case
    "same-2x2-s2": _model((1, 6, 5, 4), (1, 2, 2, 4), (1, 12, 10, 1), SAME, (2, 2)),
    "valid-3x3-s2x1": _model((1, 4, 5, 3), (2, 3, 3, 3), (1, 9, 7, 2), VALID, (2, 1)),
    "same-3x3-s2": _model((1, 4, 4, 3), (2, 3, 3, 3), (1, 8, 8, 2), SAME, (2, 2)),
}


def _litert_custom(model: bytes, x: np.ndarray) -> np.ndarray:
    """LiteRT's default resolver, which carries mediapipe's kernel of the custom op."""
    it = Interpreter(model_content=model, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_custom_op_is_transpose_conv_with_bias(name) -> None:
    model = CASES[name]
    g = import_tflite(model)
    assert [op.type for op in g.ops] == ["TRANSPOSE_CONV"]
    x = np.random.default_rng(1).uniform(-1, 1, g.tensors[g.inputs[0]].shape).astype(F)
    ours = run_float(g, [x])[g.outputs[0]]
    np.testing.assert_allclose(ours, _litert_custom(model, x), rtol=1e-5, atol=1e-5)


def _builtin_relu() -> bytes:
    """TFLite's own TRANSPOSE_CONV (output shape first, then w, x, bias) with a fused RELU."""
    w = (np.random.default_rng(7).standard_normal((3, 3, 3, 4)) * 0.4).astype(F)
    b = np.array([0.3, -0.2, 0.1], F)
    tensors = [TensorSpec((4,), np.int32, data=np.array([1, 9, 11, 3], np.int32)), TensorSpec(w.shape, F, data=w),
               TensorSpec((1, 4, 5, 4), F), TensorSpec((3,), F, data=b), TensorSpec((1, 9, 11, 3), F)]
    op = OpSpec(tflite.BuiltinOperator.TRANSPOSE_CONV, [0, 1, 2, 3], [4], *named_options(
        "TransposeConvOptions", Padding=1, StrideH=2, StrideW=2, FusedActivationFunction=1))
    return build_model(tensors, [op], [2], [4])


@pytest.mark.parametrize("int16", [False, True], ids=["int8", "int16"])
def test_on_the_chip_byte_exact(tmp_path, int16) -> None:
    mem = ChipMemory(tmp_path, size=1 << 20)
    rng = np.random.default_rng(2)
    for model in (CASES["same-2x2-s2"], CASES["same-3x3-s2"], _builtin_relu()):
        g = import_tflite(model)
        q = quantize_model(g, random_count=16)
        if int16:
            q = promote(q, [op.outputs[0] for op in q.ops if op.type == "TRANSPOSE_CONV"], optimize(g))
            (tc,) = [op for op in q.ops if op.type == "TRANSPOSE_CONV"]
            assert q.tensors[tc.inputs[0]].dtype == q.tensors[tc.outputs[0]].dtype == "int16"
        ld = lower(q)
        for _ in range(2):
            x = rng.uniform(-1, 1, g.tensors[g.inputs[0]].shape).astype(F)
            (ours,), (ref,) = run_loadable(mem, ld, [x]), run_reference(export_tflite(q), x)
            np.testing.assert_array_equal(ours, ref)


def test_no_int16_weights() -> None:
    g = import_tflite(CASES["same-2x2-s2"])
    with pytest.raises(MixedPrecisionError, match="not a promoted op with weights"):
        promote(quantize_model(g, random_count=4), [g.outputs[0]], optimize(g), [g.outputs[0]])


def test_placement_on_the_npu_and_bad_options_on_the_cpu() -> None:
    assert [p.device for p in place_model(CASES["same-2x2-s2"])] == [NPU]
    bad = _model((1, 6, 5, 4), (1, 2, 2, 4), (1, 12, 10, 1), SAME, (2, 2), options=struct.pack("<3i", 0, 2, 2))
    (placed,) = place_model(bad)
    assert placed.device == CPU and "padding 0" in placed.reason
