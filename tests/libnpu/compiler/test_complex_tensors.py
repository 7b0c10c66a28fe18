"""An FFT in the graph (RFFT2D -> complex64 -> COMPLEX_ABS / REAL / IMAG, as TF's stft exports
it): the complex tensors stay inside one LiteRT host call, never quantized nor placed
(libnpu.compiler.complex_tensors); the frame count TF's converter leaves to run time is
sized by a LiteRT run and folded (tflite_run_shapes, tflite_shape_arith); a front end
holding such a call moves to the CPU whole, joined into one float call (tflite_merge).
ONNX's DFT and STFT (complex values as a trailing axis of 2) fall back to onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import libnpu
from libnpu.compiler import cpu_float
from libnpu.compiler.complex_tensors import ComplexTensorError
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.lower import compile_model
from libnpu.compiler.placement import CPU, import_with_fallback, plan_placement
from tests.support.fft_models import onnx_spectrum_classifier, rfft_classifier, tones
from tests.support.litert import litert_run

SAMPLES = 8 * 32


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def _host_calls(model: bytes) -> list[str]:
    plan = plan_placement(model)
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    assert not [t for t in graph.tensors.values() if "complex" in t.dtype]
    return [op.attrs["host"].op for op in graph.ops if op.type == "HOST"]


def test_an_rfft_spectrum_runs_on_litert_and_its_magnitude_on_the_chip(npu):
    # "tensor 9 ('fft'): unsupported type 8" before: the model did not compile at all
    model = rfft_classifier()
    loadable = compile_model(model, [[x] for x in tones(12, SAMPLES, seed=1)], recipe="fast")
    assert [step.op for step in loadable.host_steps] == ["RFFT2D+SQUEEZE+COMPLEX_ABS"]
    assert {t.dtype for t in loadable.tensors} <= {"float32", "int8", "int16", "int32"}
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in tones(3, SAMPLES, seed=99):
            (got,) = compiled.infer([x], dequantized=True)
            (want,) = litert_run(model, [x])
            assert _cosine(got, want) >= 0.99


def test_real_and_imag_of_one_spectrum_share_its_host_call():
    assert _host_calls(rfft_classifier(parts="real_imag")) == ["RFFT2D+SQUEEZE+REAL+IMAG"]


def test_a_chip_op_between_a_spectrum_and_its_reader_joins_their_host_call():
    model = rfft_classifier(crossing=True)
    assert _host_calls(model) == ["RFFT2D+SQUEEZE+COMPLEX_ABS+MUL+CAST+MUL+COMPLEX_ABS"]
    reasons = {p.index: p.reason for p in plan_placement(model).placements if p.device == CPU}
    assert reasons[5] == ("on a path between the writer and a reader of complex64 tensor 7 ('spectrum'), "
                          "which one host call keeps inside")      # the MUL on the magnitude
    assert reasons[2] == "complex64 tensor 6 ('fft'): the chip has no complex type"


def test_a_complex_model_output_is_refused_by_name():
    with pytest.raises(ComplexTensorError, match=r"^complex64 tensor 7 \('spectrum'\) is a model output: the "
                                                 r"device's buffers have no complex type \(a host call keeps a "
                                                 r"complex tensor inside; give the model real inputs and outputs"):
        compile_model(rfft_classifier(complex_output=True), recipe="fast")


def test_a_frame_count_computed_at_run_time_is_sized_and_folded():
    # the file stores 1 frame (the converter's placeholder): the spectrum was one frame, and
    # SHAPE -> REDUCE_PROD -> FLOOR_DIV went to the CPU, the framing RESHAPE with them
    model = rfft_classifier(dynamic_frames=True)
    assert _host_calls(model) == ["RFFT2D+SQUEEZE+COMPLEX_ABS"]
    plan = plan_placement(model)
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    assert graph.tensors["magnitude"].shape == (1, 8, 17)
    x = tones(1, SAMPLES, seed=3)[0]
    (got,) = FloatInterpreter(graph).run({graph.inputs[0]: x}).values()
    np.testing.assert_allclose(got, litert_run(model, [x])[0], rtol=1e-4, atol=1e-5)


def test_a_front_end_holding_the_fft_call_moves_to_the_cpu_in_one_float_call():
    # the log of the magnitude magnifies its grid's error: the front end goes to the CPU in
    # float; its LiteRT call made it "not movable" before, and the front end stayed int8
    model = rfft_classifier(log=True)
    plan = plan_placement(model)
    graph, _ = import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)
    chain = cpu_float.upstream(graph, "log_power")
    assert cpu_float.front_end_cost(graph, chain).endswith("and LiteRT's RFFT2D+SQUEEZE+COMPLEX_ABS")
    moved = cpu_float.float_on_cpu(graph, chain, "test")
    (call,) = [op.attrs["host"] for op in moved.ops if op.type == "HOST"]
    assert call.op == "RESHAPE+MUL+RFFT2D+SQUEEZE+COMPLEX_ABS+ADD+LOG"
    x = tones(1, SAMPLES, seed=4)[0]
    (got,) = FloatInterpreter(moved).run({moved.inputs[0]: x}).values()
    np.testing.assert_allclose(got, litert_run(model, [x])[0], rtol=1e-4, atol=1e-5)


def test_onnx_fft_ops_run_on_onnxruntime(npu):
    # ONNX has no complex type (a trailing axis of 2 floats): nothing to keep inside a call
    for op in ("DFT", "STFT"):
        assert [(p.op, p.reason) for p in plan_placement(onnx_spectrum_classifier(op)).placements if p.device == CPU] \
            == [(op, "no NPU operator of this type")]
    model = onnx_spectrum_classifier("STFT")
    loadable = compile_model(model, [[x] for x in tones(16, SAMPLES, seed=5)])
    assert [step.op for step in loadable.host_steps] == ["STFT"]
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for x in tones(2, SAMPLES, seed=98):
            (got,) = compiled.infer([x], dequantized=True)
            assert _cosine(got, session.run(None, {"audio": x})[0]) >= 0.99
