"""A user queue's submit and wait in C (libnpu/capi/queue_client.c) against its Python
reference path (``NPU_QUEUE_NATIVE=0``), on a real mount: the same fences, errors and
wake-ups, no lost wake-up at the edge of sleep, and a close while another thread waits."""
from __future__ import annotations

import errno
import threading
import time

import pytest

import libnpu
from libnpu import user_queue
from libnpu.capi import queue_native
from libnpu.portability import JobError
from npu_hw import queues
from tests.support.device import WAIT_S, wait_for

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)


@pytest.fixture(params=["c", "python"])
def path(request, monkeypatch) -> str:
    if request.param == "python":
        monkeypatch.setenv("NPU_QUEUE_NATIVE", "0")
    elif queue_native.library() is None:
        pytest.fail(f"the C queue client did not build: {queue_native.unavailable()}")
    return request.param


def nop(device):
    commands = device.command_buffer()
    commands.add("NOP")
    return commands


def test_the_queue_takes_the_path_asked_for(device, path):
    queue = device.create_queue()
    assert queue.native == (path == "c")
    fence = device.queue_submit(queue, nop(device)).wait(10)
    assert fence.status == 0 and fence.signalled
    assert sum(queue.wait_counts().values()) == 1


def test_no_wake_up_is_lost_at_the_edge_of_sleep_and_the_waits_say_they_slept(device, path, monkeypatch):
    """Waits without any spin, across the core's idle poll and its sleep: every job is
    signalled (the 1 s safety net never finds one done), and the counts say the client slept."""
    monkeypatch.setattr(user_queue, "SPIN_S", 0.0)
    monkeypatch.setattr(user_queue, "_SPIN", user_queue.SpinWindow())
    queue = device.create_queue()
    commands = nop(device)
    for i in range(300):
        time.sleep((i % 30) * 20e-6)                     # not a wait: 0-600 us between jobs is what is tested
        device.queue_submit(queue, commands).wait(10)
    assert queue.late_wakeups == 0
    counts = queue.wait_counts()
    assert sum(counts.values()) == 300 and counts["spun"] == 0 and counts["slept"] > 0, counts


def test_a_full_queue_makes_submit_wait_and_fences_report_every_job(device, path):
    queue = device.create_queue(entries=2)
    src, dst = device.alloc_mem(4096), device.alloc_mem(4096)
    src.array("uint8", (4096,))[:] = 7
    copy = device.command_buffer()
    copy.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
    fences = [device.queue_submit(queue, copy if i % 2 else nop(device)) for i in range(25)]
    assert [f.wait(10).status for f in fences] == [0] * 25
    assert (dst.array("uint8", (4096,)) == 7).all()
    assert queue.tail == 25 and queue.in_flight() == 0


def test_a_failed_job_raises_from_its_fence_only(device, path):
    queue = device.create_queue()
    bad = device.command_buffer()
    bad.add("DMA_COPY", src=0x7FFF_0000_0000, dst=0x7FFF_0000_1000, length=64)
    with pytest.raises(JobError) as failed:
        device.queue_submit(queue, bad).wait(10)
    assert failed.value.errno == errno.EFAULT
    assert device.queue_submit(queue, nop(device)).wait(10).status == 0


def test_a_wait_times_out_then_completes(device, path):
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
    slow = device.command_buffer(capacity=64 * 300)
    for _ in range(300):
        slow.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    fence = device.queue_submit(queue, slow)
    with pytest.raises(TimeoutError):
        fence.wait(0.001)
    assert fence.wait(60).status == 0 and fence.device_time_ns > 0 and fence.exec_ns > 0


def test_a_reset_stops_the_queue_with_ecanceled_on_both_paths(fresh_npu, path):
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        device.queue_submit(queue, nop(device)).wait(10)
        device.reset()
        with pytest.raises(libnpu.NpuError) as stopped:
            device.queue_submit(queue, nop(device)).wait(10)
        assert stopped.value.errno == errno.ECANCELED and "reset" in str(stopped.value)


def test_a_stopped_queue_fails_a_waiter_with_the_queues_error(device, path):
    """A tail the core finds garbled stops the queue (EINVAL): a thread waiting on a job
    that will never run learns it, it does not sleep forever."""
    queue = device.create_queue()
    device.queue_submit(queue, nop(device)).wait(10)
    queue.header.write64(queues.HDR_TAIL, 10_000)        # more than `entries` ahead: the core stops the queue
    queue.ring()
    with pytest.raises(libnpu.NpuError) as stopped:
        user_queue.QueueFence(queue, 3).wait(10)
    assert stopped.value.errno == errno.EINVAL


def test_a_stopped_queue_fails_every_waiter_not_only_the_one_on_the_line(device, path, monkeypatch):
    """Three threads asleep on one queue for jobs that will never run: the one watching the
    completion line and the ones it wakes all learn that the queue stopped, at once (the core
    signals the line when it stops a queue), not at the safety net (turned off here: a
    wake-up that were lost would leave a waiter asleep)."""
    monkeypatch.setattr(user_queue, "SPIN_S", 0.0)
    monkeypatch.setattr(user_queue, "SLEEP_SLICE_MS", 3_600_000)
    monkeypatch.setattr(user_queue, "_SPIN", user_queue.SpinWindow())
    queue = device.create_queue()
    device.queue_submit(queue, nop(device)).wait(10)
    outcome: list[object] = []
    slept = queue.wait_counts()["slept"]
    waiters = [threading.Thread(target=lambda seq=seq: outcome.append(_wait(user_queue.QueueFence(queue, seq))),
                                daemon=True) for seq in (3, 4, 5)]
    for waiter in waiters:
        waiter.start()
    wait_for(lambda: queue.wait_counts()["slept"] == slept + 3, "the three waiters asleep")
    queue.header.write64(queues.HDR_TAIL, 10_000)        # more than `entries` ahead: the core stops the queue
    queue.ring()
    for waiter in waiters:
        waiter.join(WAIT_S)
    assert not any(waiter.is_alive() for waiter in waiters), "a waiter was never woken"
    assert outcome == [errno.EINVAL] * 3
    assert queue.header.read32(queues.HDR_WAITING) == 0 and queue.late_wakeups == 0


def test_close_while_another_thread_waits_lets_go_once_the_wait_ends(device, path):
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
    slow = device.command_buffer(capacity=64 * 100)
    for _ in range(100):
        slow.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    fence = device.queue_submit(queue, slow)
    outcome: list[object] = []
    waiter = threading.Thread(target=lambda: outcome.append(_wait(fence)))
    waits = sum(queue.wait_counts().values())
    waiter.start()
    wait_for(lambda: sum(queue.wait_counts().values()) > waits, "the waiter asleep on the job (or done with it)")
    queue.close()
    waiter.join(60)
    assert not waiter.is_alive()
    # The waiter either finished its job or was told the queue is closed; no crash either way.
    assert outcome and (outcome[0] == 0 or outcome[0] == errno.EBADF), outcome
    with pytest.raises(libnpu.NpuError) as closed:
        device.queue_submit(queue, nop(device))
    assert closed.value.errno == errno.EBADF


def _wait(fence) -> int:
    try:
        fence.wait(60)
    except libnpu.NpuError as exc:
        return exc.errno
    except ValueError:                  # the Python path reads a memory that close() released
        return errno.EBADF
    return 0


def test_run_is_submit_and_wait_in_one_call(device, path):
    queue = device.create_queue(entries=2)
    commands = nop(device)
    fences = [device.queue_run(queue, commands) for _ in range(7)]
    assert [f.id for f in fences] == list(range(1, 8)) and all(f.status == 0 and f.signalled for f in fences)
    assert sum(queue.wait_counts().values()) == 7
    bad = device.command_buffer()
    bad.add("DMA_COPY", src=0x7FFF_0000_0000, dst=0x7FFF_0000_1000, length=64)
    with pytest.raises(JobError) as failed:
        device.queue_run(queue, bad)
    assert failed.value.errno == errno.EFAULT
    queue.tail = queue.tail                              # a hand-set tail keeps the count
    assert device.queue_run(queue, commands).id == 9


def test_threads_sharing_a_queue_each_get_their_own_jobs_done(device, path, monkeypatch):
    """Submitters take turns (the C side's lock), waiters share the waiting flag: four threads
    running and waiting on one queue, sleeping without a spin, lose no job and no wake-up."""
    monkeypatch.setattr(user_queue, "SPIN_S", 0.0)
    monkeypatch.setattr(user_queue, "_SPIN", user_queue.SpinWindow())
    queue = device.create_queue(entries=4)
    commands = nop(device)
    seqs: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def work(mine: list[int]) -> None:
        try:
            for i in range(150):
                fence = device.queue_run(queue, commands) if i % 2 else device.queue_submit(queue, commands).wait(30)
                mine.append(fence.id)
        except BaseException as exc:    # noqa: BLE001 (reported by the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(mine,)) for mine in seqs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert sorted(s for mine in seqs for s in mine) == list(range(1, 601))
    assert queue.done() == 600 and queue.header.read32(queues.HDR_WAITING) == 0


def test_nop_scaling_reports_each_sides_cpu_and_mode():
    """The benchmark's figures are there and say what the run did: clients made to sleep
    are reported sleeping, every job counted on both sides."""
    from benchmarks import nop_scaling
    from benchmarks.scratch_device import ScratchDevice
    with ScratchDevice() as dev:
        run = nop_scaling.measure(dev, 1, 0.3, "sleep")
    assert run["path"] == "queue (C, futex)" and run["wait_mode"] == "sleep" and run["jobs_per_s"] > 0
    assert run["client"]["mode"] == "sleeping" and run["client"]["waits"]["spun"] == 0
    assert run["client"]["cpu_us_per_job"] > 0 and run["cores"]["cpu_us_per_job"] > 0
    assert run["cores"]["mode"] in ("sleeping", "polling")
    assert "sleeping" in nop_scaling.describe(run)


def test_nop_scaling_variants_are_sets_of_known_pieces():
    from benchmarks import nop_scaling
    assert nop_scaling.parse_variants("unraised,one-core+spin,") == ["unraised", "one-core+spin"]
    assert nop_scaling._device_key("one-core+unraised") == (1, (("NPU_CORE_NICE", "0"),))
    assert nop_scaling._device_key(None) == (2, ())
    assert nop_scaling._device_key("unshared+raised") == (2, (("NPU_CORE_NICE", "-2"), ("NPU_SHARED_QUEUES", "0")))
    with pytest.raises(ValueError, match="no piece fast"):
        nop_scaling.parse_variants("one-core+fast")


def test_several_waiters_on_one_queue_each_wake_promptly(device, path, monkeypatch):
    """Four threads of one process wait on one queue, each for its own jobs, all asleep on
    the one completion line (no spin). A byte the chip writes for one job must not be taken
    by a waiter of another job while the first goes to sleep: the safety net is off here, so
    a wake-up lost would leave its waiter asleep until its wait times out; ``late_wakeups``
    stays 0."""
    monkeypatch.setattr(user_queue, "SPIN_S", 0.0)
    monkeypatch.setattr(user_queue, "SLEEP_SLICE_MS", 3_600_000)
    monkeypatch.setattr(user_queue, "_SPIN", user_queue.SpinWindow())
    queue = device.create_queue(entries=8)
    src, dst = device.alloc_mem(1 << 20), device.alloc_mem(1 << 20)
    jobs = []
    for length in (0, 4096, 256 << 10, 1 << 20):     # jobs of different lengths: completions spread out
        commands = device.command_buffer()
        commands.add("DMA_COPY", src=src.address, dst=dst.address, length=length) if length else commands.add("NOP")
        jobs.append(commands)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for i in range(60):
                device.queue_submit(queue, jobs[(index + i) % 4]).wait(WAIT_S)
        except BaseException as exc:    # noqa: BLE001 (reported by the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors and not any(t.is_alive() for t in threads)
    assert queue.done() == 240 and queue.header.read32(queues.HDR_WAITING) == 0
    assert queue.late_wakeups == 0, f"{queue.late_wakeups} waits ended by the safety net"
    assert queue.wait_counts()["slept"] > 0


def test_a_forked_child_makes_its_own_queue_and_leaves_the_parents_alone(device, path):
    """After fork the parent's queue reads as closed in the child (EBADF, saying why): its
    waiters' state is the parent's. The child's own queue and the runtime's shared queue
    work; the parent's queue serves on, with no wake-up lost."""
    import os
    import warnings
    queue = device.create_queue()
    commands = nop(device)
    device.queue_submit(queue, commands).wait(10)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # fork with threads: the child only does this
        child = os.fork()
    if child == 0:
        report = "ok"
        try:
            try:
                device.queue_submit(queue, commands)
                report = "the inherited queue took a job"
            except libnpu.NpuError as exc:
                if exc.errno != errno.EBADF or "forked child" not in str(exc):
                    report = f"inherited queue: {exc!r}"
            if report == "ok":
                with device.create_queue() as own:
                    if device.queue_run(own, commands).status != 0:
                        report = "the child's queue failed"
                shared = device.shared_queue()
                if shared is queue or (shared is not None and shared.closed):
                    report = "shared_queue handed the child an inherited queue"
        except BaseException as exc:    # noqa: BLE001 (reported to the parent)
            report = repr(exc)
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    try:
        for _ in range(50):
            device.queue_submit(queue, commands).wait(10)
    finally:
        _, status = os.waitpid(child, 0)
        report = os.read(read_end, 4096).decode()
        os.close(read_end)
    assert status == 0 and report == "ok", report
    assert not queue.closed and queue.late_wakeups == 0
    assert device.queue_submit(queue, commands).wait(10).status == 0


def test_run_says_when_the_job_never_went_in(device, path):
    """``run`` raises NotQueued (an NpuError) when the job could not go in, so the runtime
    can send it through SUBMIT instead; a job that went in and then failed is a plain error."""
    queue = device.create_queue()
    commands = nop(device)
    assert queue.run(commands.address, commands.used).status == 0
    slow = device.command_buffer(capacity=64 * 40)
    src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
    for _ in range(40):
        slow.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    outcome: list[BaseException] = []

    def run_slow() -> None:
        try:
            queue.run(slow.address, slow.used, timeout=60)
        except BaseException as exc:    # noqa: BLE001 (looked at below)
            outcome.append(exc)

    runner = threading.Thread(target=run_slow)
    runner.start()
    wait_for(lambda: queue.tail >= 2, "the slow job in the queue")
    queue.header.write64(queues.HDR_TAIL, 10_000)        # the core stops the queue (EINVAL)
    queue.ring()
    runner.join(60)
    assert not runner.is_alive()
    assert not outcome or (isinstance(outcome[0], libnpu.NpuError)
                           and not isinstance(outcome[0], user_queue.NotQueued)), outcome
    wait_for(queue.error, "the core to stop the queue")
    with pytest.raises(user_queue.NotQueued) as stopped:
        queue.run(commands.address, commands.used)
    assert stopped.value.errno == errno.EINVAL
    closed = device.create_queue()
    closed.close()
    with pytest.raises(user_queue.NotQueued) as refused:
        closed.run(commands.address, commands.used)
    assert refused.value.errno == errno.EBADF and "closed" in str(refused.value)
