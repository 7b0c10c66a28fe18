"""mediapipe's Convolution2DTransposeBias custom op (the selfie segmenters' last layer) is
TFLite's TRANSPOSE_CONV with a bias: it imports as that operator, its float reference matches
LiteRT's own kernel of the custom op, and quantized it runs on the chip byte for byte as
LiteRT's reference TRANSPOSE_CONV does on the exported int8 model."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import tflite
from ai_edge_litert.interpreter import Interpreter

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.lower import lower
from libnpu.compiler.placement import CPU, NPU, place_model
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, run_reference

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


def test_custom_op_on_the_chip_byte_exact(tmp_path) -> None:
    g = import_tflite(CASES["same-2x2-s2"])
    q = quantize_model(g, random_count=16)
    mem = ChipMemory(tmp_path, size=1 << 20)
    ld = lower(q)
    rng = np.random.default_rng(2)
    for _ in range(2):
        x = rng.uniform(-1, 1, g.tensors[g.inputs[0]].shape).astype(F)
        (ours,), (ref,) = run_loadable(mem, ld, [x]), run_reference(export_tflite(q), x)
        np.testing.assert_array_equal(ours, ref)


def test_placement_on_the_npu_and_bad_options_on_the_cpu() -> None:
    assert [p.device for p in place_model(CASES["same-2x2-s2"])] == [NPU]
    bad = _model((1, 6, 5, 4), (1, 2, 2, 4), (1, 12, 10, 1), SAME, (2, 2), options=struct.pack("<3i", 0, 2, 2))
    (placed,) = place_model(bad)
    assert placed.device == CPU and "padding 0" in placed.reason
