"""A fixed output grid (LOGISTIC's, TANH's) is requantized where it joins wider tensors
(compiler.grid_joins): float results against onnxruntime, the chip's kernels byte for byte
against LiteRT's reference kernels."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from libnpu.compiler.float_ref import run_float
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from tests.support import int8_walk
from tests.support import model_builders as builders

ort = pytest.importorskip("onnxruntime")


def _onnxruntime(model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _on_chip(q, x: np.ndarray, litert) -> np.ndarray:
    """The quantized graph's output on the chip's kernels, checked equal to LiteRT's."""
    (ours,) = int8_walk.run_int8(q, [x])
    (ref,) = litert(export_tflite(q), [x])
    np.testing.assert_array_equal(ours, ref)
    return ours


def test_concat_of_a_sigmoid_keeps_the_other_inputs_range(litert):
    # Issue 26's repro: the concatenation took LOGISTIC's [0, 1) grid and clipped x * 100.
    model = builders.concat_of_sigmoid("Mul")
    q = quantize_model(import_onnx(model), random_count=8)
    (logistic,) = [op for op in q.ops if op.type == "LOGISTIC"]
    assert q.tensors[logistic.outputs[0]].quant.scale[0] == np.float32(1 / 256)   # its own grid stays
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    want = _onnxruntime(model, x)
    got = _on_chip(q, x, litert)
    assert np.abs(got - want).max() <= 0.01 * (want.max() - want.min()), (got, want)


@pytest.mark.parametrize("other,requantized", [("Sigmoid", 0), ("Tanh", 2)])
def test_fixed_grids_that_agree_stay_and_those_that_differ_meet_on_a_join_grid(other, requantized, litert):
    # Two sigmoids share their grid as it is; a sigmoid and a tanh (two fixed grids) were
    # refused ("conflicting fixed quantization") and now meet on a grid of their own.
    model = builders.concat_of_sigmoid(other)
    q = quantize_model(import_onnx(model), random_count=8)
    assert sum(op.type == "QUANTIZE" and q.tensors[op.inputs[0]].dtype == "int8" for op in q.ops) == requantized
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]      # the random calibration's range
    want = _onnxruntime(model, x)
    assert np.abs(_on_chip(q, x, litert) - want).max() <= 1.5 / 256 * (2 if other == "Tanh" else 1)


def test_yolo_style_head_keeps_its_boxes(litert):
    model = builders.yolo_head()
    rng = np.random.default_rng(26)
    calibration = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(8)]
    q = quantize_model(import_onnx(model), calibration)
    for _ in range(2):      # inputs calibration never saw
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        want, got = _onnxruntime(model, x), _on_chip(q, x, litert)
        cosine = (want * got).sum() / np.sqrt((want * want).sum() * (got * got).sum())
        assert cosine >= 0.99, cosine
        # The scores, on the join's grid, within 1% of the output's range.
        assert np.abs(got[:, 4:] - want[:, 4:]).max() <= 0.01 * (want.max() - want.min())


@pytest.mark.parametrize("op", ["Sigmoid", "Elu"])
def test_float_references_of_large_inputs_are_quiet_and_exact(op):
    # Sigmoid's exp(-x) overflowed below x = -88 (a RuntimeWarning printed during compiles),
    # ELU's expm1(x) above 88 (computed for the positive inputs it then dropped).
    model = builders.unary(op)
    x = np.array([[-1000, -100, -88.8, -20, 0, 20, 100, 1000]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_float(import_onnx(model), [x])["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=1e-6, atol=1e-7)
