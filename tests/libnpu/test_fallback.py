"""CPU fallback end to end: models with an operator the chip lacks run on the real device,
the chip's partitions as jobs and the rest on the host, for infer, requests and async."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import tflite
import trio

import libnpu
from libnpu.compiler.lower import compile_model
from libnpu.compiler.placement import FallbackRefusedError
from libnpu.host import HostOpError
from libnpu.loadable import Loadable
from tests.support import host_models
from tests.support.litert import litert_run

REVERSE_V2 = tflite.BuiltinOperator.REVERSE_V2


@pytest.fixture(scope="module")
def reversed_model(npu):
    data = host_models.int8_fc_sandwich(REVERSE_V2)
    model = libnpu.load(compile_model(data), devroot=npu.devroot)
    yield data, model
    model.close()


def _inputs(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (1, 16), dtype=np.int8) for _ in range(count)]


def test_the_loadable_carries_the_host_step():
    loadable = Loadable.from_bytes(compile_model(host_models.int8_fc_sandwich(REVERSE_V2)).to_bytes())
    (step,) = loadable.host_steps
    assert (step.op, step.kind, step.source, step.after_task) == ("REVERSE_V2", "tflite", 1, 1)
    assert [t.op for t in loadable.tasks] == ["FULLY_CONNECTED", "FULLY_CONNECTED"]
    assert [(list(tasks), [s.op for s in steps]) for tasks, steps in loadable.partitions()] == \
        [([0], ["REVERSE_V2"]), ([1], [])]


def test_int8_model_with_a_cpu_op_is_byte_identical_to_builtin_ref(reversed_model):
    data, model = reversed_model
    for x in _inputs(30):
        assert np.array_equal(model.infer([x])[0], litert_run(data, [x])[0])


def test_requests_started_and_waited_and_with_callbacks(reversed_model):
    data, model = reversed_model
    xs = _inputs(6, seed=1)
    requests = [model.create_request() for _ in xs]
    for request, x in zip(requests, xs):
        request.set_inputs([x])
        request.start()
    for request, x in zip(requests, xs):
        request.wait(30)
        assert np.array_equal(request.outputs()[0], litert_run(data, [x])[0])
    done = []
    requests[0].set_inputs([xs[0]])
    requests[0].start(lambda request, error: done.append(error))
    requests[0].wait(30)
    assert done == [None]
    for request in requests:
        request.release()


async def test_async_inference(reversed_model):
    data, model = reversed_model
    xs = _inputs(4, seed=2)
    results: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        results[i] = (await model.infer_async([xs[i]]))[0]
    async with trio.open_nursery() as nursery:
        for i in range(len(xs)):
            nursery.start_soon(one, i)
    for i, x in enumerate(xs):
        assert np.array_equal(results[i], litert_run(data, [x])[0])


def test_allow_list_keeps_results_identical(npu):
    data = host_models.int8_fc_sandwich(REVERSE_V2)
    loadable = compile_model(data, ops=["FULLY_CONNECTED"], fc_per_channel=False)
    assert [s.op for s in loadable.host_steps] == ["REVERSE_V2"]
    only_first = compile_model(data, ops=["REVERSE_V2"])     # nothing the chip runs is allowed
    # consecutive CPU operators make one host call (one sub-model for LiteRT)
    assert not only_first.tasks and [s.op for s in only_first.host_steps] == \
        ["FULLY_CONNECTED+REVERSE_V2+FULLY_CONNECTED"]
    with libnpu.load(only_first, devroot=npu.devroot) as model:
        for x in _inputs(5, seed=3):
            assert np.array_equal(model.infer([x])[0], litert_run(data, [x])[0])


def test_custom_op_with_a_registered_host_op(npu):
    data = host_models.int8_fc_sandwich("Flip")
    loadable = compile_model(data)
    assert [(s.op, s.reason) for s in loadable.host_steps] == \
        [("CUSTOM:Flip", "custom op 'Flip': the chip has no custom operators")]
    with pytest.raises(HostOpError, match=r"register_host_op\('Flip', fn\)"):
        libnpu.load(loadable, devroot=npu.devroot)
    # The same flip as REVERSE_V2 on axis 1; both sides of it share one scale and zero
    # point, so dequantize -> flip -> quantize is exact and LiteRT's REVERSE_V2 model is the reference.
    libnpu.register_host_op("Flip", lambda x: x[:, ::-1])
    try:
        with libnpu.load(loadable, devroot=npu.devroot) as model:
            for x in _inputs(5, seed=4):
                expected = litert_run(host_models.int8_fc_sandwich(REVERSE_V2), [x])[0]
                assert np.array_equal(model.infer([x])[0], expected)
    finally:
        libnpu.unregister_host_op("Flip")


def test_strict_refuses_and_lists_the_missing_operators():
    with pytest.raises(FallbackRefusedError, match="missing: REVERSE_V2"):
        compile_model(host_models.int8_fc_sandwich(REVERSE_V2), strict=True)


@pytest.fixture(scope="module")
def cumsum_model():
    model = host_models.with_cumsum()
    rng = np.random.default_rng(5)
    calibration = [{"x": rng.uniform(-1, 1, (1, 3, 6, 6)).astype(np.float32)} for _ in range(16)]
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model.SerializeToString(), calibration, lambda feed: session.run(None, feed)[0]


def _check_float(npu, loadable, calibration, reference) -> None:
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for feed in calibration[:4]:
            (y,) = compiled.infer([feed["x"]], dequantized=True)
            expected = reference(feed)
            assert np.abs(y - expected).max() <= 0.05 * np.abs(expected).max()


def test_float_onnx_model_with_an_op_only_onnxruntime_knows(npu, cumsum_model):
    data, calibration, reference = cumsum_model
    loadable = compile_model(data, calibration)
    assert [s.op for s in loadable.host_steps] == ["CumSum"]
    _check_float(npu, loadable, calibration, reference)


def test_float_onnx_model_with_a_registered_numpy_op(npu, cumsum_model):
    data, calibration, reference = cumsum_model
    calls = []

    def cumsum(x, axis, exclusive=0, reverse=0):
        calls.append(int(axis))
        return np.cumsum(x, axis=int(axis))
    libnpu.register_host_op("CumSum", cumsum)
    try:
        loadable = compile_model(data, calibration)
        _check_float(npu, loadable, calibration, reference)
    finally:
        libnpu.unregister_host_op("CumSum")
    assert calls and set(calls) == {1}


def test_onnx_op_the_allow_list_leaves_out_joins_its_neighbours_host_call(npu, cumsum_model):
    data, calibration, reference = cumsum_model
    loadable = compile_model(data, calibration, ops=["Conv", "CumSum"])
    assert [s.op for s in loadable.host_steps] == ["CumSum+Relu"]     # adjacent CPU nodes: one host call
    _check_float(npu, loadable, calibration, reference)


def test_float_tflite_model_runs_its_cpu_op_on_litert(npu):
    from tests.support.tflite_builder import OpSpec, TensorSpec, build_model
    rng = np.random.default_rng(6)
    tensors = [TensorSpec((1, 8), np.float32, name="x"),
               TensorSpec((4, 8), np.float32, data=rng.uniform(-1, 1, (4, 8)).astype(np.float32), name="w"),
               TensorSpec((1, 4), np.float32, name="h"),
               TensorSpec((1,), np.int32, data=np.array([1], np.int32), name="axis"),
               TensorSpec((1, 4), np.float32, name="y")]
    data = build_model(tensors, [OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [0, 1, -1], [2]),
                                 OpSpec(REVERSE_V2, [2, 3], [4])], [0], [4])
    calibration = [[rng.uniform(-1, 1, (1, 8)).astype(np.float32)] for _ in range(16)]
    loadable = compile_model(data, calibration)
    assert [s.op for s in loadable.host_steps] == ["REVERSE_V2"]
    assert "FULLY_CONNECTED" in [t.op for t in loadable.tasks]
    with libnpu.load(loadable, devroot=npu.devroot) as compiled:
        for (x,) in calibration[:4]:
            (y,) = compiled.infer([x], dequantized=True)
            expected = litert_run(data, [x], reference=False)[0]
            assert np.abs(y - expected).max() <= 0.05 * np.abs(expected).max()


def test_inputs_that_do_not_fit_raise_input_error(reversed_model):
    from libnpu.runtime import InputError
    _, model = reversed_model
    for bad, says in (([np.zeros((1, 15), np.int8)], r"shape \(1, 15\), expected \(1, 16\)"),
                      ([np.zeros((1, 16), bool)], None),
                      ([np.full((1, 16), 300, np.int16)], "do not fit int8"),
                      ([np.zeros((1, 16), np.int8)] * 2, "model takes 1 inputs, got 2"),
                      ({"nope": np.zeros((1, 16), np.int8)}, r"missing inputs \['x'\]")):
        with pytest.raises(InputError, match=says):
            model.infer(bad)
    assert model.infer([np.zeros((1, 16), np.int16)])[0].shape == (1, 4)   # values that fit are taken


@pytest.mark.parametrize("ops", [["CONV_2D"], ["DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]])
def test_resnet8_split_by_an_allow_list_stays_byte_identical(npu, resnet8_path, ops, tmp_path):
    rng = np.random.default_rng(7)
    with libnpu.load(resnet8_path, devroot=npu.devroot, cache_dir=tmp_path, ops=ops) as model:
        loadable = model.loadable
        assert loadable.host_steps and all(s.reason == "not in the allow-list" for s in loadable.host_steps)
        assert {t.op for t in loadable.tasks} <= set(ops)
        for _ in range(5):
            x = rng.integers(-128, 128, model.inputs[0].shape, dtype=np.int8)
            assert np.array_equal(model.infer([x])[0], litert_run(resnet8_path, [x])[0])


def test_nvdla_style_runtime_submits_the_partitions_in_order(device):
    from libnpu.runtime import Runtime
    data = host_models.int8_fc_sandwich(REVERSE_V2)
    runtime = Runtime(device)
    runtime.load(compile_model(data))
    try:
        x = _inputs(1, seed=9)[0]
        memory = runtime.allocate_system_memory(64)
        runtime.bind_input_tensor(0, memory)
        memory.view[:16] = x.view(np.uint8).reshape(-1)
        with pytest.raises(ValueError, match="wait=True"):
            runtime.submit(wait=False)
        runtime.submit(wait=True)
        out = runtime.output_tensor_desc(0)
        y = runtime.memory[out.region].view[out.offset:out.offset + 4].view(np.int8).reshape(1, 4)
        assert np.array_equal(y, litert_run(data, [x])[0])
        device.free_mem(memory)
    finally:
        runtime.unload()


def test_closing_the_model_while_a_partitioned_request_runs(npu):
    data = host_models.int8_fc_sandwich(REVERSE_V2)
    model = libnpu.load(compile_model(data), devroot=npu.devroot)
    request = model.create_request()
    request.set_inputs(_inputs(1)[0:1])
    request.start()
    model.close()                      # waits for the host steps writing into the request's memory
    from libnpu.runtime import ClosedError
    with pytest.raises(ClosedError):
        request.wait()


def test_profiling_and_priority_reach_every_partition(npu):
    """PERF_COUNT and MODEL_PRIORITY apply to each chip partition; the host's layer shows as CPU."""
    data = host_models.int8_fc_sandwich(REVERSE_V2)
    (x,) = _inputs(1, seed=5)
    expected = litert_run(data, [x])[0]
    with libnpu.load(compile_model(data), devroot=npu.devroot,
                     config={"PERF_COUNT": True, "MODEL_PRIORITY": "HIGH"}) as model:
        assert np.array_equal(model.infer([x])[0], expected)
        profile = model.get_profiling_info()
        assert [(layer.op, layer.device) for layer in profile.layers] == \
            [("FULLY_CONNECTED", "NPU"), ("REVERSE_V2", "CPU"), ("FULLY_CONNECTED", "NPU")]
        assert profile.cycles == sum(layer.cycles for layer in profile.layers) > 0
        assert profile.layers[1].cycles == 0 and profile.layers[1].chip_ns > 0
        request = model.create_request()
        request.start()
        request.wait()
        assert [layer.device for layer in request.profile.layers] == ["NPU", "CPU", "NPU"]
        model.set_property({"PERF_COUNT": False, "MODEL_PRIORITY": "LOW"})
        assert np.array_equal(request.infer([x])[0], expected)
        assert trio.run(model.infer_async, [x])[0].tobytes() == expected.tobytes()


def test_a_host_step_between_int16_layers_keeps_int16_boundaries(npu, cumsum_model):
    """Promoted with its neighbours, a host step reads and writes int16 (the CPU dequantizes
    it) rather than forcing an int8 step between int16 layers: closer to float."""
    data, calibration, reference = cumsum_model
    around = compile_model(data, calibration, int16="c1,r,y")
    through = compile_model(data, calibration, int16="c1,cs,r,y")
    assert "cs" in through.metadata["int16_layers"] and "cs" not in around.metadata["int16_layers"]
    for loadable, dtype in ((around, "int8"), (through, "int16")):
        (step,) = loadable.host_steps
        assert {loadable.tensors[i].dtype for i in (*step.inputs, *step.outputs)} == {dtype}
    errors = []
    for loadable in (around, through):
        with libnpu.load(loadable, devroot=npu.devroot) as compiled:
            errors.append(np.mean([np.abs(compiled.infer([feed["x"]], dequantized=True)[0] - reference(feed)).mean()
                                   for feed in calibration[:4]]))
    assert errors[1] < errors[0], errors
