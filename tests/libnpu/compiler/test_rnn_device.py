"""Recurrent layers on a real device, through ``libnpu.load``: an ONNX LSTM compiled with
the default options and placed on the NPU; TFLite int8 LSTMs whose states a request carries
between calls as LiteRT carries its variable tensors, on the chip and on the CPU; an ONNX
LSTM the chip cannot run, on the CPU. One device for all (starting one costs seconds)."""
from __future__ import annotations

import numpy as np
import pytest

import libnpu
from libnpu.compiler.placement import CPU, NPU, plan_placement
from tests.support.rnn_models import LstmSpec, cosine, feeds_for, lstm_model, rnn_model
from tests.support.tflite_builder import ReferenceRunner

ort = pytest.importorskip("onnxruntime")


def sequence(rng: np.random.Generator, spec: LstmSpec) -> np.ndarray:
    lead = (spec.steps, spec.batch) if spec.time_major else (spec.batch, spec.steps)
    return rng.integers(-128, 128, (*lead, spec.n_input)).astype(np.int8)


def test_lstm_through_the_device(npu, tmp_path) -> None:
    """The user's path: ``libnpu.load`` places every operator on the NPU, compiles with the
    default options on calibration sequences, and the device's outputs match onnxruntime."""
    model = rnn_model("LSTM")
    data = model.SerializeToString()
    assert [p.device for p in plan_placement(data).placements] == [NPU]
    rng = np.random.default_rng(5)
    compiled = libnpu.load(data, devroot=npu.devroot, calibration=[feeds_for(model, rng) for _ in range(32)],
                           cache_dir=tmp_path / "cache")
    try:
        assert not compiled.loadable.host_steps
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        feeds = feeds_for(model, rng)
        for got, ref in zip(compiled.infer(feeds, dequantized=True), sess.run(None, {"X": feeds[0]}), strict=True):
            assert got.shape == ref.shape and cosine(got, ref) >= 0.99
    finally:
        compiled.close()


def test_what_the_chip_cannot_run_goes_to_the_cpu(npu, tmp_path) -> None:
    """An LSTM with ``clip`` (not in the unrolled cell) is placed on the CPU with the reason,
    and the model still runs, by onnxruntime on the host."""
    model = rnn_model("LSTM", outputs=("Y", "Y_h"), clip=0.5)
    data = model.SerializeToString()
    (placement,) = plan_placement(data).placements
    assert placement.device == CPU and "clip" in placement.reason
    compiled = libnpu.load(data, devroot=npu.devroot, cache_dir=tmp_path / "cache")
    try:
        feeds = feeds_for(model, np.random.default_rng(2))
        expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"X": feeds[0]})
        for got, ref in zip(compiled.infer(feeds, dequantized=True), expected, strict=True):
            np.testing.assert_allclose(got, ref, atol=1e-5)
    finally:
        compiled.close()


def test_states_carry_between_calls_as_litert_keeps_its_variables(npu, tmp_path) -> None:
    """Five calls in a row on the device: each starts from the state the last one left (the
    output and cell states are variable tensors in LiteRT, states of the loadable here);
    after ``reset_state`` both start again from their reset values."""
    spec = LstmSpec(3, 2, 4, 6, time_major=False, seed=9)
    model = lstm_model(spec)
    assert [p.device for p in plan_placement(model).placements] == [NPU]
    rng = np.random.default_rng(3)
    calls = [sequence(rng, spec) for _ in range(5)]
    reference = ReferenceRunner(model)
    compiled = libnpu.load(model, devroot=npu.devroot, cache_dir=tmp_path / "cache")
    try:
        request = compiled.create_request()    # a request keeps its states (OpenVINO's model)
        for k, x in enumerate(calls):
            (got,) = request.infer([x])
            assert got.tobytes() == reference(x)[0].tobytes(), f"call {k}"
        request.reset_state()
        fresh = ReferenceRunner(model)
        assert request.infer([calls[0]])[0].tobytes() == fresh(calls[0])[0].tobytes()
    finally:
        compiled.close()


def test_an_lstm_on_the_cpu_keeps_its_state_too(npu, tmp_path) -> None:
    """Kept off the chip (an allow-list without it), the cell runs in LiteRT on the host: its
    cut keeps the variable tensors inside and the intermediates its Prepare reads (a cut
    dropped both: "input 'output_state' used before it is produced")."""
    spec = LstmSpec(3, 1, 2, 4, seed=4)
    model = lstm_model(spec)
    rng = np.random.default_rng(4)
    reference = ReferenceRunner(model)
    compiled = libnpu.load(model, devroot=npu.devroot, cache_dir=tmp_path / "cache", ops=["ADD"])
    try:
        assert compiled.loadable.host_steps
        request = compiled.create_request()
        for k in range(3):
            x = sequence(rng, spec)
            assert request.infer([x])[0].tobytes() == reference(x)[0].tobytes(), f"call {k}"
    finally:
        compiled.close()


