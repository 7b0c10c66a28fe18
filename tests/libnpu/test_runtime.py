"""Real models through the whole stack: compile, load onto /dev/npuN, infer."""
import threading

import numpy as np
import pytest
import trio

import libnpu
from libnpu.runtime import Runtime
from tests.support.litert import ReferenceModel

pytest.importorskip("ai_edge_litert.interpreter")


@pytest.fixture(scope="module")
def reference(resnet8_path) -> ReferenceModel:
    return ReferenceModel(resnet8_path)


@pytest.fixture(scope="module")
def resnet8(npu, resnet8_path, tmp_path_factory):
    model = libnpu.load(resnet8_path, devroot=npu.devroot, cache_dir=tmp_path_factory.mktemp("cache"))
    yield model
    model.close()


def test_resnet8_byte_identical_to_litert_on_100_inputs(resnet8, reference):
    rng = np.random.default_rng(8)
    for i in range(100):
        x = rng.integers(-128, 128, reference.shape, dtype=np.int8)
        assert np.array_equal(resnet8.infer([x])[0], reference(x)), f"input {i}"


def test_describes_its_tensors(resnet8):
    (inp,), (out,) = resnet8.inputs, resnet8.outputs
    assert inp.shape == (1, 32, 32, 3) and inp.dtype == "int8" and inp.scale is not None
    assert out.shape == (1, 10) and out.dtype == "int8"
    assert resnet8.optimal_requests >= 2


def test_float_inputs_are_quantized_and_outputs_dequantized(resnet8, reference):
    (inp,) = resnet8.inputs
    x = np.random.default_rng(1).uniform(0, 1, inp.shape).astype(np.float32)
    q = np.clip(np.sign(x / inp.scale[0]) * np.floor(np.abs(x / inp.scale[0]) + 0.5) + inp.zero_point[0],
                -128, 127).astype(np.int8)
    (y,) = resnet8.infer([x], dequantized=True)
    (out,) = resnet8.outputs
    assert y.dtype == np.float32
    assert np.allclose(y, (reference(q).astype(np.float32) - out.zero_point[0]) * out.scale[0])


def test_requests_in_flight_with_callbacks(resnet8, reference):
    rng = np.random.default_rng(2)
    requests = [resnet8.create_request() for _ in range(resnet8.optimal_requests)]
    inputs = [rng.integers(-128, 128, reference.shape, dtype=np.int8) for _ in requests]
    done, lock = [], threading.Lock()
    finished = threading.Event()

    def on_done(request, error):
        with lock:
            done.append((request, error))
            if len(done) == len(requests):
                finished.set()

    for request, x in zip(requests, inputs):
        request.set_inputs([x])
        request.start(callback=on_done)
    assert finished.wait(60)
    for request, x in zip(requests, inputs):
        request.wait()
        assert np.array_equal(request.outputs()[0], reference(x))
        assert request.timing.device_time_ns > 0
        request.release()
    assert all(error is None for _, error in done)


async def test_infer_async_under_trio(resnet8, reference):
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-128, 128, reference.shape, dtype=np.int8) for _ in range(4)]
    results = {}

    async def one(i):
        results[i] = (await resnet8.infer_async([inputs[i]]))[0]

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(one, i)
    for i, x in enumerate(inputs):
        assert np.array_equal(results[i], reference(x))


def test_nvdla_style_runtime_with_bound_memory(npu, resnet8_path, reference):
    from libnpu.compiler.lower import compile_model
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = device.stats()["memory_allocated"]
        runtime = Runtime(device)
        runtime.load(compile_model(resnet8_path))
        assert (runtime.num_input_tensors(), runtime.num_output_tensors()) == (1, 1)
        desc_in, desc_out = runtime.input_tensor_desc(0), runtime.output_tensor_desc(0)
        runtime.set_input_tensor_desc(0, desc_in)
        x_mem = runtime.allocate_system_memory(desc_in.nbytes)
        y_mem = runtime.allocate_system_memory(desc_out.nbytes)
        runtime.bind_input_tensor(0, x_mem)
        runtime.bind_output_tensor(0, y_mem)
        x = np.random.default_rng(4).integers(-128, 128, reference.shape, dtype=np.int8)
        x_mem.array(np.int8, desc_in.shape)[...] = x          # zero copy: the model reads this memory
        runtime.submit(wait=True)
        assert np.array_equal(y_mem.array(np.int8, desc_out.shape), reference(x))
        runtime.unload()                    # the model's memory is really freed; the user's stays
        assert device.stats()["memory_allocated"] == baseline + x_mem.size + y_mem.size
