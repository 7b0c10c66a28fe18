"""The names OpenVINO and asyncio users reach for: start_async, set_callback,
get_profiling_info, AsyncInferQueue, infer_async under asyncio, strict input shapes."""
import asyncio
import threading
from datetime import timedelta

import numpy as np
import pytest

import libnpu
from libnpu.errors import InputError
from tests.support.litert import ReferenceModel

pytest.importorskip("ai_edge_litert.interpreter")


@pytest.fixture(scope="module")
def reference(resnet8_path) -> ReferenceModel:
    return ReferenceModel(resnet8_path)


@pytest.fixture(scope="module")
def resnet8(npu, resnet8_nlb):
    model = libnpu.load(resnet8_nlb, devroot=npu.devroot)
    yield model
    model.close()


def _inputs(reference: ReferenceModel, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, reference.shape, dtype=np.int8) for _ in range(n)]


def test_start_async_calls_back_with_userdata(resnet8, reference):
    request = resnet8.create_request()
    got, done = [], threading.Event()
    request.set_callback(lambda data: (got.append(data), done.set()), "mine")
    for i, x in enumerate(_inputs(reference, 3, 1)):
        done.clear()
        request.start_async([x], userdata=None if i == 0 else i)
        request.wait()
        assert done.wait(60)
        assert np.array_equal(request.outputs()[0], reference(x))
    assert got == ["mine", 1, 2]
    request.set_callback(None)
    request.start_async()            # the inputs set last time; no callback
    request.wait()
    request.release()


def test_get_profiling_info_lists_the_layers(npu, resnet8_nlb, reference):
    (x,) = _inputs(reference, 1, 2)
    with libnpu.load(resnet8_nlb, devroot=npu.devroot) as plain:
        request = plain.create_request()
        request.infer([x])
        assert request.get_profiling_info() == []          # PERF_COUNT off: nothing recorded
    with libnpu.load(resnet8_nlb, devroot=npu.devroot, config={"PERF_COUNT": True}) as model:
        request = model.create_request()
        request.start_async([x])
        request.wait()
        info = request.get_profiling_info()
    assert [i.node_name for i in info] == [task.name for task in model.loadable.tasks]
    assert all(i.exec_type == "NPU" and i.status == "EXECUTED" and i.cpu_time == timedelta(0) for i in info)
    assert sum((i.real_time for i in info), timedelta(0)) > timedelta(0)
    assert {i.node_type for i in info} >= {"CONV_2D", "FULLY_CONNECTED"}


def test_async_infer_queue_keeps_its_requests_busy(resnet8, reference):
    inputs = _inputs(reference, 12, 3)
    results: dict[int, np.ndarray] = {}
    lock = threading.Lock()
    with libnpu.AsyncInferQueue(resnet8, jobs=3) as queue:
        assert len(queue) == 3 and queue.is_ready()

        def on_done(request, userdata):
            with lock:
                results[userdata] = request.outputs()[0]
        queue.set_callback(on_done)
        for i, x in enumerate(inputs):
            queue.start_async([x], userdata=i)
        queue.wait_all()
        assert queue.is_ready() and 0 <= queue.get_idle_request_id() < 3
        # bad inputs: a one-line error, and the request is idle again
        with pytest.raises(InputError, match="expected"):
            queue.start_async([np.zeros((2, 2), np.int8)])
        queue.wait_all()
    assert sorted(results) == list(range(12))
    for i, x in enumerate(inputs):
        assert np.array_equal(results[i], reference(x))


def test_infer_async_under_asyncio(resnet8, reference):
    inputs = _inputs(reference, 4, 4)

    async def main():
        return await asyncio.gather(*(resnet8.infer_async([x]) for x in inputs))
    for outputs, x in zip(asyncio.run(main()), inputs):
        assert np.array_equal(outputs[0], reference(x))


def test_an_input_without_its_batch_axis_is_refused(resnet8, reference):
    (x,) = _inputs(reference, 1, 5)
    with pytest.raises(InputError, match=r"shape \(32, 32, 3\), expected \(1, 32, 32, 3\) \(add the batch axis"):
        resnet8.infer([x[0]])
    assert np.array_equal(resnet8.infer([x])[0], reference(x))
    assert np.array_equal(resnet8.infer(x)[0], reference(x))      # one array for a one-input model
