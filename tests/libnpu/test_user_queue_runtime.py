"""libnpu on user-mode submission queues: Device.create_queue and its fences, and the
runtime's infer through the device's queue, with the same bytes as through SUBMIT, and
through SUBMIT when the device offers no queue or after a reset stopped it."""
from __future__ import annotations

import errno

import numpy as np
import pytest

import libnpu
from libnpu.user_queue import QueueFence
from tests.support.device import start_npu, stop_npu

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)


def _inputs(model, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, size=d.shape, dtype=np.int8) if d.dtype == "int8"
            else rng.random(d.shape, dtype=np.float32) for d in model.inputs]


def test_infer_goes_through_the_queue_with_the_bytes_of_the_submit_path(session, resnet8_nlb):
    device = session.open(0)
    model = libnpu.load(resnet8_nlb, device)
    try:
        request = model.create_request()
        feeds = [_inputs(model, seed) for seed in range(3)]
        before = device.stats()
        queued = [[o.copy() for o in request.infer(x)] for x in feeds]
        assert device.queues, "the runtime made a user queue"
        # The queue's completion reports the core's own time on the job, within the call's.
        assert 0 < request.timing.chip_ns <= request.timing.latency_s * 1e9
        assert device.stats()["jobs_completed"] - before["jobs_completed"] == 3
        device.use_queues = False
        submitted = [[o.copy() for o in request.infer(x)] for x in feeds]
        assert all(np.array_equal(a, b) for qa, sa in zip(queued, submitted) for a, b in zip(qa, sa))
        assert request.timing.latency_s > 0
        assert request.timing.chip_ns == 0           # a SUBMIT's fence does not carry it
    finally:
        model.close()


def test_a_queue_fence_waits_reports_and_times_out(device):
    queue = device.create_queue(entries=4)
    src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
    slow = device.command_buffer(capacity=64 * 40)
    for _ in range(40):         # a job of ~0.1-1 s: never near the device's 10 s job timeout, even loaded
        slow.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    fence = device.queue_submit(queue, slow)
    with pytest.raises(TimeoutError):
        fence.wait(0.001)
    fence.wait(60)
    assert fence.signalled and fence.status == 0 and fence.device_time_ns > 0 and fence.exec_ns > 0
    nop = device.command_buffer()
    nop.add("NOP")
    fences = [device.queue_submit(queue, nop) for _ in range(10)]     # more than entries: submit waits
    assert all(f.wait(10).status == 0 for f in fences)


@pytest.fixture
def no_queues(tmp_path):
    mounted = start_npu(tmp_path, extra=("--max-queues-per-context", "0"))
    yield mounted
    stop_npu(mounted)


def test_without_queues_infer_goes_through_submit(no_queues, resnet8_nlb):
    with libnpu.initialize(no_queues.devroot) as session:
        device = session.open(0)
        assert device.param("MAX_QUEUES_PER_CONTEXT") == 0
        with pytest.raises(libnpu.NpuError):
            device.create_queue()
        model = libnpu.load(resnet8_nlb, device)
        try:
            model.create_request().infer(_inputs(model, 0))
            assert not device.queues
        finally:
            model.close()


def test_infer_after_a_reset_takes_a_new_queue(fresh_npu, resnet8_nlb):
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        model = libnpu.load(resnet8_nlb, device)
        try:
            request = model.create_request()
            x = _inputs(model, 1)
            first = [o.copy() for o in request.infer(x)]
            old = device.queues[0]
            device.reset()
            again = request.infer(x)
            assert old.closed and device.queues and device.queues[0] is not old
            assert all(np.array_equal(a, b) for a, b in zip(first, again))
        finally:
            model.close()


def _queue_jobs(device) -> int:
    """Jobs completed on the device's user queues (the runtime's shared ones)."""
    return sum(queue.done() for queue in device.queues)


def test_perf_count_inferences_go_through_the_queue_with_the_profile_of_the_submit_path(session, resnet8_nlb):
    device = session.open(0)
    model = libnpu.load(resnet8_nlb, device, config={"PERF_COUNT": True})
    try:
        request = model.create_request()
        x = _inputs(model, 4)
        queued = [o.copy() for o in request.infer(x)]
        assert _queue_jobs(device) == 1, "the profiled job took the queue"
        through_queue = request.profile
        assert through_queue is not None and through_queue.layers
        device.use_queues = False
        submitted = [o.copy() for o in request.infer(x)]
        through_submit = request.profile
        assert _queue_jobs(device) == 1
        assert all(np.array_equal(a, b) for a, b in zip(queued, submitted))
        assert [(layer.name, layer.op, layer.device, layer.cycles) for layer in through_queue.layers] == \
               [(layer.name, layer.op, layer.device, layer.cycles) for layer in through_submit.layers]
    finally:
        model.close()


def test_start_wait_callbacks_and_infer_async_use_the_queue(session, resnet8_nlb):
    import threading

    import trio

    device = session.open(0)
    model = libnpu.load(resnet8_nlb, device)
    try:
        requests = [model.create_request() for _ in range(3)]
        feeds = [_inputs(model, 10 + i) for i in range(3)]
        expected = [[o.copy() for o in model.create_request().infer(x)] for x in feeds]
        jobs = _queue_jobs(device)
        for request, x in zip(requests, feeds):          # three in flight at once, polled then waited
            request.set_inputs(x)
            request.start()
            assert isinstance(request.fence, QueueFence)
        for request, want in zip(requests, expected):
            request.wait(30)
            assert request.fence.signalled and request.timing.latency_s > 0
            assert all(np.array_equal(a, b) for a, b in zip(request.outputs(), want))
        assert _queue_jobs(device) == jobs + 3
        called = threading.Event()
        errors: list = []
        requests[0].set_inputs(feeds[1])
        requests[0].start(lambda request, error: (errors.append(error), called.set()))
        assert called.wait(30) and errors == [None]
        assert all(np.array_equal(a, b) for a, b in zip(requests[0].outputs(), expected[1]))

        async def both() -> list:
            results: list = [None, None]

            async def one(i: int) -> None:
                results[i] = await model.infer_async(feeds[i])
            async with trio.open_nursery() as nursery:
                for i in range(2):
                    nursery.start_soon(one, i)
            return results

        results = trio.run(both)
        assert all(np.array_equal(a, b) for got, want in zip(results, expected) for a, b in zip(got, want))
        assert _queue_jobs(device) == jobs + 6
        # No queue to be had: start falls back to SUBMIT, same bytes.
        device.use_queues = False
        requests[1].set_inputs(feeds[2])
        requests[1].start()
        assert not isinstance(requests[1].fence, QueueFence)
        requests[1].wait(30)
        assert all(np.array_equal(a, b) for a, b in zip(requests[1].outputs(), expected[2]))
    finally:
        model.close()


def test_device_wait_takes_queue_fences_among_driver_fences(device):
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
    slow = device.command_buffer(capacity=64 * 40)
    for _ in range(40):         # a job of ~0.1-1 s: never near the device's 10 s job timeout, even loaded
        slow.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    nop = device.command_buffer()
    nop.add("NOP")
    queued = device.queue_submit(queue, slow)
    submitted = device.submit(nop)
    with pytest.raises(TimeoutError):
        device.wait([queued, submitted], timeout=0.001)
    assert device.wait([queued, submitted], timeout=0.001, raise_on_timeout=False) in (0, 1)
    assert device.wait([queued, submitted], timeout=60, wait_any=True) >= 1
    assert queued.signalled or submitted.signalled       # whichever came first (they may share a core)
    assert device.wait([queued, submitted], timeout=60) == 2
    assert submitted.status == 0 and queued.status == 0 and queued.device_time_ns > 0


def test_async_requests_caught_by_a_reset_fail_clearly_and_the_next_ones_take_a_new_queue(fresh_npu, resnet8_nlb):
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        model = libnpu.load(resnet8_nlb, device)
        try:
            requests = [model.create_request() for _ in range(3)]
            x = _inputs(model, 7)
            want = [o.copy() for o in requests[0].infer(x)]
            old = device.queues[0]
            for request in requests:
                request.set_inputs(x)
                request.start()
            device.reset()
            for request in requests:
                try:
                    request.wait(30)
                except libnpu.JobError as exc:           # on the chip when the reset came: aborted
                    assert exc.errno in (errno.EIO, errno.ECANCELED)
                except libnpu.NpuError as exc:           # still in its queue: never runs
                    assert exc.errno == errno.ECANCELED and "reset" in str(exc)
                else:                                    # done before the reset reached the chip
                    assert request.fence.status == 0
                    assert all(np.array_equal(a, b) for a, b in zip(request.outputs(), want))
                    continue
                assert request.fence.signalled and request.fence.status
            for request in requests:
                request.start()
                request.wait(30)
                assert isinstance(request.fence, QueueFence) and request.fence.queue is not old
                assert all(np.array_equal(a, b) for a, b in zip(request.outputs(), want))
        finally:
            model.close()


def test_a_cancelled_infer_async_leaves_the_model_usable(session, resnet8_nlb):
    import trio

    device = session.open(0)
    model = libnpu.load(resnet8_nlb, device)
    try:
        x = _inputs(model, 3)
        want = [o.copy() for o in model.infer(x)]

        async def cancelled() -> bool:
            with trio.move_on_after(0) as scope:
                await model.infer_async(x)
            return scope.cancelled_caught

        for through_queue in (True, False):
            device.use_queues = through_queue
            assert trio.run(cancelled)
            got = trio.run(model.infer_async, x)           # the borrowed request came back idle
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    finally:
        model.close()


def test_a_model_with_a_cpu_step_runs_its_chip_partitions_on_the_queue(session):
    import tflite
    import trio

    from libnpu.compiler.lower import compile_model
    from tests.support import host_models
    from tests.support.litert import litert_run

    data = host_models.int8_fc_sandwich(tflite.BuiltinOperator.REVERSE_V2)
    x = np.random.default_rng(2).integers(-128, 128, (1, 16), dtype=np.int8)
    expected = litert_run(data, [x])[0]
    device = session.open(0)
    with libnpu.load(compile_model(data), device, config={"PERF_COUNT": True}) as model:
        assert np.array_equal(model.infer([x])[0], expected)
        assert _queue_jobs(device) == 2                  # both chip partitions, each a queue job
        assert [layer.device for layer in model.get_profiling_info().layers] == ["NPU", "CPU", "NPU"]
        request = model.create_request()
        request.set_inputs([x])
        request.start()
        request.wait(30)
        assert np.array_equal(request.outputs()[0], expected)
        assert trio.run(model.infer_async, [x])[0].tobytes() == expected.tobytes()
        assert _queue_jobs(device) == 6
