"""The core's idle path in C (``QueueService.run``: npu_uq_run): it sleeps on its queues'
doorbells and wakes for any of them, serves every queue that rang and signals each waiter,
hands Python what it cannot run where it stopped, asks before a sleep it may not take, and
adapts its poll window by ``IdlePoll``'s rule."""
from __future__ import annotations

import errno
import os
import threading

import pytest

from firmware_sim import idle_poll, queue_service
from firmware_sim.kernels import native
from npu_hw import queues
from tests.firmware_sim.test_queue_service import FcJob  # a job with a C step (its warm-up below)
from tests.support.device import WAIT_S, wait_for
from tests.support.queue_rig import Rig

pytestmark = pytest.mark.recovery     # queues (benchmarks/flake_hunt.py -m recovery)

NO_SAFETY_NET_MS = 3_600_000          # the C sleep's timeout: a doorbell lost would hang, not be caught


@pytest.fixture
def rig(tmp_path):
    if native.library() is None:
        pytest.fail("the C kernels did not build (scripts/bootstrap installs the compiler)")
    made = Rig(tmp_path, native=True)
    yield made
    made.close()


def ring_doorbell(rig: Rig, slot: int) -> None:
    os.write(rig.lines[slot][2], b"\x01")


def signals(rig: Rig, slot: int) -> int:
    """Bytes on the queue's completion line (what its sleeping waiter would have woken on)."""
    try:
        return len(os.read(rig.lines[slot][0], 4096))
    except BlockingIOError:
        return 0


def test_asleep_in_c_it_wakes_for_each_queue_serves_them_all_and_signals_every_waiter(rig):
    service = rig.core.service
    headers = [rig.add_queue(slot) for slot in (0, 1)]
    for header in headers:
        header.write32(queues.HDR_WAITING, 1)          # a waiter sleeps on each queue's line
        rig.submit(header, 1)
    rig.core.drain_all()                               # the first runs go through Python (plans taken)
    assert [signals(rig, slot) for slot in (0, 1)] == [1, 1]
    outcome: list[int] = []
    loop = threading.Thread(target=lambda: outcome.append(
        service.run(rig.core.queues, rig.kernel_doorbell, True, NO_SAFETY_NET_MS)))
    loop.start()
    try:
        seq = 1
        for round_ in range(20):
            # Asleep (its flags cleared: clients ring), then one queue rings, or both at once.
            wait_for(lambda: not any(h.read32(queues.HDR_POLLING) for h in headers), "the core asleep", WAIT_S)
            seq += 1
            ringing = (0, 1) if round_ % 3 == 2 else (round_ % 3,)
            for slot in ringing:
                rig.submit(headers[slot], headers[slot].read64(queues.HDR_TAIL) + 1)
                ring_doorbell(rig, slot)
            for slot in ringing:
                header = headers[slot]
                wait_for(lambda: header.read64(queues.HDR_DONE) == header.read64(queues.HDR_TAIL),
                         f"queue {slot}'s job done", WAIT_S)
                assert signals(rig, slot) == 1
        assert loop.is_alive() and not outcome              # all of it without Python
    finally:
        os.eventfd_write(rig.kernel_doorbell, 1)           # the kernel doorbell: Python's turn
        loop.join(WAIT_S)
    assert outcome == [queue_service.RING] and not loop.is_alive()
    assert all(h.read32(queues.HDR_POLLING) for h in headers)   # awake again: no doorbell needed
    assert [rig.completion(h, int(h.read64(queues.HDR_TAIL)))[1] for h in headers] == [0, 0]


def test_what_the_c_loop_cannot_run_goes_to_python_where_it_stopped_and_a_sleep_it_may_not_take_is_asked(rig):
    service = rig.core.service
    header = rig.add_queue(0)
    rig.submit(header, 1)                              # a command buffer the C loop has no plan for yet
    rig.core.queues.refresh()                          # the table taken in, as drain_all does first
    why = service.run(rig.core.queues, rig.kernel_doorbell, True, NO_SAFETY_NET_MS)
    assert why == queue_service.PYTHON and header.read64(queues.HDR_DONE) == 0
    rig.core.serve_queues(why)                         # run once, by Python, not twice
    assert header.read64(queues.HDR_DONE) == 1 and rig.completion(header, 1)[:2] == (1, 0)
    rig.submit(header, 2)
    rig.submit(header, 3)
    why = service.run(rig.core.queues, rig.kernel_doorbell, False, NO_SAFETY_NET_MS)
    assert why == queue_service.ASKS                   # served both, then would sleep: recycling may not
    assert header.read64(queues.HDR_DONE) == 3 and header.read32(queues.HDR_POLLING) == 0
    rig.kernel_jobs([7])
    assert service.run(rig.core.queues, rig.kernel_doorbell, False, NO_SAFETY_NET_MS) == queue_service.RING


def test_a_c_step_failing_in_the_c_loop_is_completed_by_python_once_and_the_loop_goes_on(rig):
    header = rig.add_queue(0)
    job = FcJob(rig)
    for seq in range(1, 5):                            # the plan made, then its C call taken
        job.submit(rig, header, seq)
    rig.core.drain_all()
    job.set_shift(40)                                  # out of range: the kernel's own check fails it
    job.submit(rig, header, 5)
    why = rig.core.service.run(rig.core.queues, rig.kernel_doorbell, False, NO_SAFETY_NET_MS)
    assert why == queue_service.FAILED and header.read64(queues.HDR_DONE) == 4
    rig.core.serve_queues(why)
    job.set_shift(-3)
    job.submit(rig, header, 6)
    assert rig.core.service.run(rig.core.queues, rig.kernel_doorbell, False, NO_SAFETY_NET_MS) == queue_service.ASKS
    assert [rig.completion(header, seq)[1] for seq in (5, 6)] == [-errno.EINVAL, 0]
    base = queues.slot_offset(0)
    assert rig.table.read64(base + queues.Q_FAILED) == 1 and rig.table.read64(base + queues.Q_DONE) == 6


def test_the_c_idle_window_follows_idle_polls_rule(rig):
    idle = rig.core.service.c.idle                     # a struct field: its address for the C calls
    idle_ptr = native.ffi.addressof(idle)
    poll = idle_poll.IdlePoll(int(idle.max_ns))
    assert idle.window_ns == poll.window_ns
    lib = native.library()
    for idle_ns, polled in ((250_000, None), (250_000, None), (30_000, None), (5_000_000, None),
                            (5_000_000, None), (5_000_000, None), (5_000_000, None), (100_000, 0),
                            (299_000, None), (301_000, None)):
        polled_ns = poll.window_ns if polled is None else polled
        lib.npu_uq_idle_record(idle_ptr, idle_ns, polled_ns)
        poll.record(idle_ns, polled_ns)
        assert idle.window_ns == poll.window_ns
    for contended in (0, 1):                           # the load as last looked at: no new look
        idle.window_ns = poll.window_ns = 160_000
        idle.contended, poll.contended = contended, bool(contended)
        idle.checked_ns = poll._checked_ns = 1 << 62
        assert lib.npu_uq_idle_window(idle_ptr) == poll.window() == (idle_poll.CONTENDED_NS if contended else 160_000)
