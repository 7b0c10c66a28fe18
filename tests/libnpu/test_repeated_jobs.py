"""A request's job run again on its queue in one C call (``UserQueue.run_repeated``,
``npu_uq_run_hinted``): an idle queue only, the expected time that hints the wait, a job
slept through on a timer, and inferences that take it with the same bytes as before."""
from __future__ import annotations

import time

import numpy as np
import pytest

import libnpu
from libnpu.capi import queue_native
from libnpu.user_queue import RepeatedJob
from npu_hw import queues

pytestmark = pytest.mark.recovery     # queues (benchmarks/flake_hunt.py -m recovery)


@pytest.fixture
def native():
    if queue_native.library() is None:
        pytest.fail(f"the C queue client did not build: {queue_native.unavailable()}")


def nop_job(device) -> RepeatedJob:
    commands = device.command_buffer()
    commands.add("NOP")
    return RepeatedJob(commands.address, commands.used)


def test_a_busy_queue_is_refused_and_nothing_goes_in(device, native):
    queue = device.create_queue()
    job = nop_job(device)
    tail = queue.tail
    queue.tail = tail + 1          # as if a job of another thread were in flight (not written: never runs)
    try:
        assert queue.run_repeated(job) is None
        assert queue.header.read64(queues.HDR_TAIL) == tail     # nothing was written
    finally:
        queue.tail = tail
    fence = queue.run_repeated(job)
    assert fence is not None and fence.status == 0 and fence.id == tail + 1


def test_the_expected_time_follows_the_jobs_down_at_once_and_up_by_an_eighth(device, native):
    queue = device.create_queue()
    job = nop_job(device)
    first = queue.run_repeated(job)
    assert first is not None and job.expected_ns[0] == -first.exec_ns     # seen once: not a hint yet
    second = queue.run_repeated(job)
    assert second is not None and job.expected_ns[0] == min(first.exec_ns, second.exec_ns)
    expected = job.expected_ns[0]
    for _ in range(20):
        fence = queue.run_repeated(job)
        assert fence is not None and fence.exec_ns > 0
        took = fence.exec_ns
        expected = took if took < expected else expected + min((took - expected) // 8, expected // 8 + 1000)
        assert job.expected_ns[0] == expected
    job.expected_ns[0] = 8 * 10**6           # as if the jobs had taken 8 ms: one NOP brings it down at once
    queue.run_repeated(job)
    assert job.expected_ns[0] < 8 * 10**6
    job.expected_ns[0] = 1                    # a slower job raises it by an eighth of itself + 1 us at most
    queue.run_repeated(job)
    assert 1 < job.expected_ns[0] <= 1 + 1000


def test_a_job_expected_to_be_long_is_slept_through_then_caught(device, native):
    """A hint of 4 ms on a NOP: the client sleeps on its timer (no signal asked of the
    core), then finds the job done; a hint far too long costs time, never a job."""
    queue = device.create_queue()
    job = nop_job(device)
    before = queue.wait_counts()
    slept_through = 0
    for _ in range(200):      # a loaded machine may preempt the client between submit and wait
        at_once = queue.wait_counts()["at_once"]
        job.expected_ns[0] = 4_000_000
        started = time.monotonic()
        fence = queue.run_repeated(job)
        took = time.monotonic() - started
        assert fence is not None and fence.status == 0
        if queue.wait_counts()["at_once"] > at_once:
            continue          # done before the wait began: there was nothing to sleep through
        assert took >= 0.0039          # asleep on its timer to 40 us before 4 ms
        slept_through += 1
        if slept_through == 3:
            break
    assert slept_through == 3
    after = queue.wait_counts()
    assert after["slept"] == before["slept"]          # never on the completion line
    assert queue.late_wakeups == 0


def test_inferences_run_on_the_requests_queue_with_the_same_bytes(session, resnet8_nlb):
    x = np.random.default_rng(5).integers(-128, 128, (4, 1, 32, 32, 3)).astype(np.int8)
    device = session.open(0)
    with libnpu.load(resnet8_nlb, device) as model:
        request = model.create_request()
        first = [request.infer(xi)[0].copy() for xi in x]
        queue = request._job.queue
        assert queue is not None and queue.native          # taken once, then run on directly
        again = [request.infer(xi)[0].copy() for xi in x]
        assert request._job.queue is queue and request._job.expected_ns[0] > 0
        device.use_queues = False                           # turned off: not even the request's own queue
        submitted = [request.infer(xi)[0].copy() for xi in x]
        assert request.timing.chip_ns == 0
        assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(first, again, submitted))
