"""libnpu on user-mode submission queues: Device.create_queue and its fences, and the
runtime's infer through the device's queue, with the same bytes as through SUBMIT, and
through SUBMIT when the device offers no queue or after a reset stopped it."""
from __future__ import annotations

import numpy as np
import pytest

import libnpu
from tests.support.device import start_npu, stop_npu


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
    slow = device.command_buffer(capacity=64 * 400)
    for _ in range(400):
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
