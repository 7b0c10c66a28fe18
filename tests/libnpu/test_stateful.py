"""Stateful models on the device: variables kept in each request's device memory between
inferences, compared call by call with LiteRT carrying the same state (issue 16, item 4)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import libnpu
from libnpu.compiler.frontend import to_int8_graph
from libnpu.compiler.ir import IRError
from libnpu.compiler.lower import compile_model, lower
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from libnpu.loadable import Loadable
from libnpu.runtime import ClosedError, Runtime
from tests.support.device import held
from tests.support.stateful_models import (
    EMA_INITIAL,
    SHAPE,
    TOTAL_INITIAL,
    delay_model,
    float_ema_model,
    recurrent_onnx,
    streaming_model,
    swap_model,
)
from tests.support.tflite_builder import ReferenceRunner

CALLS = 10


@pytest.fixture(scope="module")
def stream() -> Loadable:
    return compile_model(streaming_model())


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, SHAPE, dtype=np.int8) for _ in range(CALLS)]


def test_ten_calls_byte_identical_to_litert_carrying_the_same_state(npu, stream):
    reference = ReferenceRunner(streaming_model())     # one interpreter: LiteRT keeps the variables
    with libnpu.load(stream, devroot=npu.devroot) as model:
        request = model.create_request()
        for i, x in enumerate(_inputs(16)):
            got, want = request.infer([x]), reference(x)
            assert len(got) == len(want) == 2
            for g, w in zip(got, want):
                assert np.array_equal(g, w), f"call {i}"
        # the output after ten calls depends on every earlier call: a fresh request differs
        fresh = model.create_request()
        assert not np.array_equal(fresh.infer([x])[1], want[1])


@pytest.mark.parametrize("kind", ["delay", "delay_read_back", "swap"])
def test_small_streams_byte_identical_to_litert(npu, kind):
    """A variable read straight to an output (copied out before the write-back), read
    again after the assignment, and two variables swapping values (each write-back's
    source is the other's old value)."""
    model_bytes = {"delay": delay_model, "delay_read_back": lambda: delay_model(read_back_scale=0.1),
                   "swap": swap_model}[kind]()
    reference = ReferenceRunner(model_bytes)
    with libnpu.load(compile_model(model_bytes), devroot=npu.devroot) as model:
        request = model.create_request()
        for i, x in enumerate(_inputs(9)):
            for got, want in zip(request.infer([x]), reference(x), strict=True):
                assert np.array_equal(got, want), f"call {i}"


def test_an_old_value_returned_as_an_output_is_the_value_before_the_call(npu):
    graph = import_tflite(delay_model(), "delay").stateless()
    graph.make_stateful({graph.inputs[1]: "x"})
    graph.outputs.append(graph.states[0].input)          # y (the importer's copy) and the state itself
    previous = np.arange(8, dtype=np.int8).reshape(SHAPE)
    with libnpu.load(compile_model(graph), devroot=npu.devroot) as model:
        request = model.create_request()
        request.query_state()[0].set_state(previous)
        for i, x in enumerate(_inputs(10)):
            y, old = request.infer([x])
            assert np.array_equal(y, previous) and np.array_equal(old, previous), f"call {i}"
            previous = x


def test_query_state_names_and_values_follow_the_calls(npu, stream):
    with libnpu.load(stream, devroot=npu.devroot) as model:
        assert [d.name for d in model.states] == ["ema_previous", "total_previous"]
        request = model.create_request()
        ema, total = request.query_state()
        assert (ema.name, total.name) == ("ema", "total")
        assert np.array_equal(ema.state, EMA_INITIAL) and np.array_equal(total.state, TOTAL_INITIAL)
        x = _inputs(3)[0]
        _, new_total = request.infer([x])
        assert np.array_equal(total.state, new_total)      # the assigned value, read back
        assert ema.state.dtype == np.int8 and ema.state.shape == SHAPE
        assert np.allclose(total.dequantized(), new_total.astype(np.float32) * 0.2)


def test_two_requests_keep_separate_state(npu, stream):
    a_inputs, b_inputs = _inputs(1), _inputs(2)
    ref_a, ref_b = ReferenceRunner(streaming_model()), ReferenceRunner(streaming_model())
    with libnpu.load(stream, devroot=npu.devroot) as model:
        a, b = model.create_request(), model.create_request()
        for i, (xa, xb) in enumerate(zip(a_inputs, b_inputs)):     # interleaved calls
            for request, reference, x in ((a, ref_a, xa), (b, ref_b, xb)):
                for got, want in zip(request.infer([x]), reference(x)):
                    assert np.array_equal(got, want), f"call {i}"
        assert not np.array_equal(a.query_state()[1].state, b.query_state()[1].state)


def test_async_requests_carry_state_too(npu, stream):
    reference = ReferenceRunner(streaming_model())
    with libnpu.load(stream, devroot=npu.devroot) as model:
        request = model.create_request()
        for x in _inputs(4)[:4]:
            request.set_inputs([x])
            request.start()
            request.wait(timeout=30)
            for got, want in zip(request.outputs(), reference(x)):
                assert np.array_equal(got, want)


def test_reset_state_starts_the_stream_again(npu, stream):
    inputs = _inputs(5)
    with libnpu.load(stream, devroot=npu.devroot) as model:
        request = model.create_request()
        first = [request.infer([x]) for x in inputs[:4]]
        request.reset_state()
        ema, total = request.query_state()
        assert np.array_equal(ema.state, EMA_INITIAL) and np.array_equal(total.state, TOTAL_INITIAL)
        again = [request.infer([x]) for x in inputs[:4]]
        for f, g in zip(first, again):
            assert all(np.array_equal(p, q) for p, q in zip(f, g))
        total.reset()                                        # one variable alone
        assert np.array_equal(total.state, TOTAL_INITIAL) and not np.array_equal(ema.state, EMA_INITIAL)


def test_set_state_is_what_the_next_call_reads(npu, stream):
    inputs = _inputs(6)
    with libnpu.load(stream, devroot=npu.devroot) as model:
        a, b = model.create_request(), model.create_request()
        for x in inputs[:3]:
            a.infer([x])
        for source, target in zip(a.query_state(), b.query_state()):
            target.set_state(source.state)                  # b takes over a's stream
        for x in inputs[3:]:
            for got, want in zip(b.infer([x]), a.infer([x])):
                assert np.array_equal(got, want)
        _, total = b.query_state()
        total.set_state(np.full(SHAPE, 0.2 * 5, np.float32))  # a float value is quantized
        assert np.array_equal(total.state, np.full(SHAPE, 5, np.int8))
        with pytest.raises(ValueError, match="shape"):
            total.set_state(np.zeros((2, 8), np.int8))
        with pytest.raises(ValueError, match="dtype"):
            total.set_state(np.zeros(SHAPE, np.int32))


def test_close_frees_the_state_buffers(npu, stream):
    x = _inputs(7)[0]
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = held(device)
        model = libnpu.load(stream, device)
        requests = [model.create_request() for _ in range(3)]
        for request in requests:
            request.infer([x])
        model.infer([x])
        assert held(device)[0] > baseline[0]
        model.close()
        assert held(device) == baseline
        with pytest.raises(ClosedError):
            requests[0].query_state()
        with pytest.raises(ClosedError):
            requests[0].reset_state()


def test_nvdla_runtime_keeps_state_across_submits(npu, stream):
    """The IRuntime-style path writes the initial values once, not at every submit, and
    again on ``reset_state``."""
    reference = ReferenceRunner(streaming_model())
    with libnpu.initialize(npu.devroot) as session:
        runtime = Runtime(session.open(0))
        runtime.load(stream)
        try:
            inp, out = runtime.allocate_system_memory(64), runtime.allocate_system_memory(64)
            runtime.bind_input_tensor(0, inp)
            runtime.bind_output_tensor(1, out)
            inputs = _inputs(8)[:5]
            for x in inputs:
                inp.view[:8] = x.view(np.uint8).reshape(-1)
                runtime.submit(wait=True)
                assert np.array_equal(out.view[:8].view(np.int8).reshape(SHAPE), reference(x)[1])
            runtime.reset_state()
            inp.view[:8] = inputs[0].view(np.uint8).reshape(-1)
            runtime.submit(wait=True)
            assert np.array_equal(out.view[:8].view(np.int8).reshape(SHAPE),
                                  ReferenceRunner(streaming_model())(inputs[0])[1])
        finally:
            runtime.unload()
            for memory in (inp, out):
                runtime.device.free_mem(memory)


def test_float_tflite_variable_is_quantized_with_its_state(npu):
    """A float model's variable: calibrated as one stream, its state int8 on the chip,
    byte-identical to the int8 model in LiteRT and close to the float one."""
    rng = np.random.default_rng(12)
    stream = [{"x": rng.uniform(-1, 1, SHAPE).astype(np.float32)} for _ in range(32)]
    graph = to_int8_graph(float_ema_model(), stream)
    (state,) = graph.states
    assert graph.tensors[state.input].dtype == "int8" and graph.tensors[state.output].dtype == "int8"
    int8_ref, float_ref = ReferenceRunner(export_tflite(graph)), ReferenceRunner(float_ema_model())
    scale = float(graph.tensors[state.input].quant.scale[0])
    with libnpu.load(lower(graph), devroot=npu.devroot) as model:
        request = model.create_request()
        for i, feed in enumerate(stream[:CALLS]):
            (got,) = request.infer([feed["x"]])
            assert np.array_equal(got, int8_ref(feed["x"])[0]), f"call {i}"
            assert np.abs(got - float_ref(feed["x"])[0]).max() <= 2 * scale, f"call {i}"


# ONNX: a state pair the user marks --------------------------------------------------------

STATES = {"h_in": "h_out"}


@pytest.fixture(scope="module")
def elman():
    """The recurrent model, its calibration stream and its int8 graph (hidden state marked)."""
    model = recurrent_onnx().SerializeToString()
    rng = np.random.default_rng(11)
    stream = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(32)]
    return model, stream, to_int8_graph(model, stream, states=STATES, recipe="fast")   # int8: the state is the point


def test_onnx_state_pair_byte_identical_to_litert_carrying_the_state(npu, elman):
    _, stream, graph = elman
    (state,) = graph.states
    stateful = ReferenceRunner(export_tflite(graph))               # a resource variable in LiteRT
    step = ReferenceRunner(export_tflite(graph.stateless()))       # x, h_in -> y, h_out: we carry h
    h = state.initial
    with libnpu.load(lower(graph), devroot=npu.devroot) as model:
        assert [d.name for d in model.inputs] == ["x"] and [d.name for d in model.outputs] == ["y"]
        request = model.create_request()
        for i, feed in enumerate(stream[:CALLS]):
            y, h = step(feed["x"], h)
            (got,) = request.infer([feed["x"]])
            assert np.array_equal(got, y) and np.array_equal(stateful(feed["x"])[0], y), f"call {i}"
            assert np.array_equal(request.query_state()[0].state, h), f"call {i}"


def test_onnx_state_pair_follows_onnxruntime_carrying_the_state(npu, elman, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model_bytes, stream, graph = elman
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    h = np.zeros((1, 8), np.float32)
    y_scale = float(graph.tensors[graph.outputs[0] + "_int8"].quant.scale[0])
    with libnpu.load(model_bytes, devroot=npu.devroot, cache_dir=tmp_path, calibration=stream,
                     states=STATES, recipe="fast") as model:
        assert [d.name for d in model.states] == ["h_in"]
        request = model.create_request()
        errors = []
        for feed in stream[:CALLS]:
            y, h = session.run(["y", "h_out"], {"x": feed["x"], "h_in": h})
            (got,) = request.infer([feed["x"]])
            errors.append(float(np.abs(got - y).max()))
        assert max(errors) < 6 * y_scale, errors           # int8 error only, not growing with the calls
        request.reset_state()
        assert np.array_equal(request.query_state()[0].state, np.zeros((1, 8), np.int8))


def test_marking_a_pair_that_is_not_one_is_refused(elman):
    model, stream, _ = elman
    with pytest.raises(IRError, match="not a graph input"):
        to_int8_graph(model, stream, states={"x_missing": "h_out"})
    with pytest.raises(IRError, match="not a graph output"):
        to_int8_graph(model, stream, states={"h_in": "nope"})


# ---- misuse (docs/security.md, "Round 3 attacks") ----

class _SlowInput:
    """An input that converts to an array only once ``go`` is set: holds a call inside ``infer``."""

    def __init__(self, value: np.ndarray) -> None:
        self.value, self.inside, self.go = value, threading.Event(), threading.Event()

    def __array__(self, dtype=None, copy=None):
        self.inside.set()
        assert self.go.wait(60)
        return self.value


def test_one_request_runs_one_inference_at_a_time_and_its_state_stays_exact(npu, stream):
    """A second thread's inference or state access while the request is inside ``infer``
    is refused: it would run a job on the same memory at once (its inputs, and the state
    both jobs read and write) and lose an update."""
    x = _inputs(11)[0]
    reference = ReferenceRunner(streaming_model())
    with libnpu.load(stream, devroot=npu.devroot) as model:
        request = model.create_request()
        slow = _SlowInput(x)
        first = threading.Thread(target=lambda: request.infer([slow]))
        first.start()
        try:
            assert slow.inside.wait(60)
            for meddle in (lambda: request.infer([x]), lambda: request.query_state()[1].state,
                           lambda: request.query_state()[1].set_state(np.zeros(SHAPE, np.int8)),
                           request.reset_state, request.start):
                with pytest.raises(RuntimeError, match="still running"):
                    meddle()
        finally:
            slow.go.set()
            first.join(60)
        assert not first.is_alive()
        total = request.query_state()[1].state
        assert np.array_equal(total, reference(x)[1])        # exactly one call's update
        request.infer([x])                                    # and the request serves again


def test_a_bound_tensor_must_lie_inside_a_live_memory_of_the_device(npu, stream):
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        runtime = Runtime(device)
        runtime.load(stream)
        memory, freed = runtime.allocate_system_memory(4096), runtime.allocate_system_memory(4096)
        device.free_mem(freed)
        try:
            with pytest.raises(ValueError, match="offset -4096"):
                runtime.bind_input_tensor(0, memory, -4096)   # would point the job below the memory
            with pytest.raises(ValueError, match="freed"):
                runtime.bind_input_tensor(0, freed)
            with libnpu.initialize(npu.devroot) as other:
                foreign = other.open(0).alloc_mem(4096)
                with pytest.raises(ValueError, match="another device"):
                    runtime.bind_output_tensor(0, foreign)
            runtime.bind_input_tensor(0, memory)
            runtime.submit(wait=True)                         # the good binding runs
        finally:
            runtime.unload()
            device.free_mem(memory)


def test_int16_state_is_carried_on_the_device(npu, elman):
    """A state whose new value mixed precision makes int16 is int16 too (int16_states: it was
    refused, "new value ... is int16, the state is int8", so every escalation step past int8
    was), its TANH's own int16 grid requantized onto the state's: ten calls on the device,
    the state in its STATE region, byte-identical to the stateless twin fed the int16 state
    by hand."""
    model, stream, _ = elman
    graph = import_onnx(model)
    graph.make_stateful(STATES)
    promote = [op.outputs[0] for op in optimize(graph).ops if promotable(op)]
    q = quantize_mixed(graph, stream, int16=promote)
    (state,) = q.states
    assert q.tensors[state.input].dtype == q.tensors[state.output].dtype == "int16"
    h = state.initial
    with libnpu.load(lower(q), devroot=npu.devroot) as stateful, \
            libnpu.load(lower(q.stateless()), devroot=npu.devroot) as step:
        request = stateful.create_request()
        for i, feed in enumerate(stream[:CALLS]):
            (got,) = request.infer([feed["x"]])
            y, h = step.infer([feed["x"], h])
            assert np.array_equal(got, y) and np.array_equal(request.query_state()[0].state, h), f"call {i}"
        assert np.abs(h).max() > 0      # the state moved
