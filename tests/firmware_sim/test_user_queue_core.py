"""A core's user queues, driven on a bus directory of their own (no driver): the real
core code reads entries through the IOMMU, posts completions, arbitrates between its
kernel ring and its queues, takes table changes in, and the chip's watchdog fails a
user-queue job in its own queue only."""
from __future__ import annotations

import errno
import os
import time

import numpy as np
import pytest

from firmware_sim import chip as chip_top
from firmware_sim import core as core_unit
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, memory, queues, regs, ring, tasks
from tests.support.chip_memory import ASID
from tests.support.queue_rig import BANK, ENTRIES, QUEUE_ENTRIES, Rig

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)


@pytest.fixture
def rig(queue_rig: Rig) -> Rig:
    """Every test here runs on both service loops: the C one must do what the Python one does."""
    return queue_rig


def test_entries_run_in_order_and_complete_in_their_queue(rig):
    header = rig.add_queue(0)
    for seq in range(1, 6):
        rig.submit(header, seq)
    rig.core.drain_all()
    assert header.read64(queues.HDR_DONE) == 5
    assert [rig.completion(header, seq)[:3] for seq in range(1, 6)] == [(seq, 0, 0) for seq in range(1, 6)]
    base = queues.slot_offset(0)
    assert rig.table.read64(base + queues.Q_DONE) == 5 and rig.table.read64(base + queues.Q_FAILED) == 0
    assert rig.core.regs.read32(queues.ack_register(0, 0)) == rig.table.read32(base + queues.Q_GENERATION)
    with pytest.raises(BlockingIOError):               # nobody said it waits: no signal
        os.read(rig.lines[0][0], 16)
    header.write32(queues.HDR_WAITING, 1)
    rig.submit(header, 6)
    rig.core.drain_all()
    assert os.read(rig.lines[0][0], 16) == b"\x01"


def test_bad_entries_fail_alone_and_a_bad_tail_stops_the_queue(rig):
    header = rig.add_queue(0)
    rig.submit(header, 1, written_seq=9)                 # not this job's entry
    rig.submit(header, 2, flags=0x4)                     # unknown flags
    rig.submit(header, 3, cmd_iova=iommu.IOVA_BASE + (1 << 30), cmd_size=64)   # unmapped
    rig.submit(header, 4)
    rig.core.drain_all()
    assert [rig.completion(header, seq)[1] for seq in range(1, 5)] == [-errno.EINVAL, -errno.EINVAL,
                                                                        -errno.EFAULT, 0]
    assert rig.table.read64(queues.slot_offset(0) + queues.Q_FAILED) == 3
    other = rig.add_queue(1)
    header.write64(queues.HDR_TAIL, 4 + QUEUE_ENTRIES + 1)   # more than the queue holds
    rig.submit(other, 1)
    rig.core.drain_all()
    assert header.error() == -errno.EINVAL and header.read64(queues.HDR_DONE) == 4
    assert other.read64(queues.HDR_DONE) == 1 and other.error() == 0


def test_rounds_share_the_core_between_the_kernel_ring_and_the_queues(rig, monkeypatch):
    """Counted at each kernel job: the ring runs JOBS_PER_TURN jobs, then each queue as many,
    then the ring again (the jobs after a queue's first run in C in the native loop)."""
    low, high = rig.add_queue(0, priority=0), rig.add_queue(1, priority=2)
    seen: list[tuple[int, int]] = []            # (low's done, high's done) as each kernel job starts
    run_kernel = rig.core.run_job_entry
    monkeypatch.setattr(rig.core, "run_job_entry", lambda *a: (
        seen.append((low.read64(queues.HDR_DONE), high.read64(queues.HDR_DONE))), run_kernel(*a)))
    for seq in range(1, 7):
        rig.submit(low, seq)
        rig.submit(high, seq)
    rig.kernel_jobs(list(range(1, 7)))
    rig.core.drain_all()
    turn = core_unit.JOBS_PER_TURN
    assert seen == [(0, 0)] * turn + [(turn, turn)] * 2
    assert low.read64(queues.HDR_DONE) == high.read64(queues.HDR_DONE) == 6


def test_the_higher_priority_queue_goes_first_in_a_round(rig):
    low, high = rig.add_queue(0, priority=0), rig.add_queue(1, priority=2)
    for seq in range(1, 3):                      # the command buffer's first run, in Python
        rig.submit(low, seq)
        rig.submit(high, seq)
    rig.core.drain_all()
    # A high-priority job that waits while the low queue has one: a table change after the
    # first job of the round ends the round; the job that ran is the high queue's.
    rig.submit(low, 3)
    rig.submit(high, 3)
    rig.core.queues.refresh()
    rig.table_changed()                          # seen between two jobs: the round ends after one
    rig.core.serve_queues()
    assert (low.read64(queues.HDR_DONE), high.read64(queues.HDR_DONE)) == (2, 3)


def test_four_clients_share_a_core_by_count(rig, monkeypatch):
    """Fairness counted, not timed: four queues full of jobs, and at every turn of the kernel
    ring (one between rounds) no queue that still had jobs is more than JOBS_PER_TURN jobs
    behind another."""
    headers = [rig.add_queue(slot) for slot in range(4)]
    jobs = QUEUE_ENTRIES - 1
    for header in headers:
        for seq in range(1, jobs + 1):
            rig.submit(header, seq)
    seen: list[list[int]] = []
    run_kernel = rig.core.run_job_entry
    monkeypatch.setattr(rig.core, "run_job_entry", lambda *a: (
        seen.append([h.read64(queues.HDR_DONE) for h in headers]), run_kernel(*a)))
    rig.kernel_jobs(list(range(1, ENTRIES)))     # a kernel job at each round's end
    rig.core.drain_all()
    assert all(h.read64(queues.HDR_DONE) == jobs for h in headers)
    turn = core_unit.JOBS_PER_TURN
    rounds = [done for done in seen if 0 < min(done) < jobs]
    assert rounds, seen
    for done in seen:
        assert max(done) - min(done) <= turn, seen


def test_a_disabled_queue_is_acknowledged_and_never_run_again(rig):
    header = rig.add_queue(0)
    rig.core.drain_all()
    base = queues.slot_offset(0)
    rig.table.write32(base + queues.Q_CONTROL, 0)
    rig.table.write32(base + queues.Q_GENERATION, rig.table.read32(base + queues.Q_GENERATION) + 1)
    rig.table_changed()
    rig.submit(header, 1)
    rig.core.drain_all()
    assert rig.core.regs.read32(queues.ack_register(0, 0)) == rig.table.read32(base + queues.Q_GENERATION)
    assert header.read64(queues.HDR_DONE) == 0 and not rig.core.queues.served


def test_the_watchdog_fails_a_user_queue_job_in_its_own_queue(rig, monkeypatch):
    header = rig.add_queue(0)
    rig.core.drain_all()
    top = chip_top.Chip(rig.bus, [-1], rig.irq, HardwareProfile(), ENTRIES)
    monkeypatch.setattr(top, "start_core", lambda core: None)
    # The core's registers as a core hung in job 1 of slot 0 leaves them.
    rig.submit(header, 1)
    rig.regs.write64(BANK + regs.JOB_START_NS, time.monotonic_ns() - 10**9)
    rig.regs.write32(BANK + regs.JOB_TIMEOUT_MS, 5)
    rig.regs.write32(BANK + regs.UQ_SLOT, 1)
    rig.regs.write64(BANK + regs.UQ_SEQ, 1)
    rig.regs.write64(BANK + regs.CURRENT_JOB, queues.user_job_id(0, 1))
    kernel_cq_tail = rig.regs.read32(BANK + regs.CQ_TAIL)
    top.watchdog()
    assert rig.regs.read64(BANK + regs.CURRENT_JOB) == 0
    assert rig.regs.read32(BANK + regs.CQ_TAIL) == kernel_cq_tail        # nothing on the kernel side
    restarted = rig.new_core()
    restarted.finish_aborted_user_job()
    assert rig.completion(header, 1)[:2] == (1, -errno.ETIMEDOUT) and header.read64(queues.HDR_DONE) == 1
    assert rig.regs.read32(BANK + regs.UQ_SLOT) == 0
    rig.submit(header, 2)                                # the next entry runs on the new core
    restarted.drain_all()
    assert rig.completion(header, 2)[:2] == (2, 0)


def test_the_chip_aborts_the_running_entry_of_a_disabled_queue(rig, monkeypatch):
    rig.add_queue(0)
    rig.core.drain_all()
    top = chip_top.Chip(rig.bus, [-1], rig.irq, HardwareProfile(), ENTRIES)
    monkeypatch.setattr(top, "start_core", lambda core: None)
    rig.regs.write64(BANK + regs.JOB_START_NS, time.monotonic_ns())
    rig.regs.write32(BANK + regs.JOB_TIMEOUT_MS, 60_000)
    rig.regs.write32(BANK + regs.UQ_SLOT, 1)
    rig.regs.write64(BANK + regs.UQ_SEQ, 1)
    rig.regs.write64(BANK + regs.CURRENT_JOB, queues.user_job_id(0, 1))
    top.watchdog()
    assert rig.regs.read64(BANK + regs.CURRENT_JOB) == queues.user_job_id(0, 1)   # enabled: left alone
    rig.table.write32(queues.slot_offset(0) + queues.Q_CONTROL, 0)
    top.watchdog()
    assert rig.regs.read64(BANK + regs.CURRENT_JOB) == 0
    assert rig.regs.read32(BANK + regs.UQ_ABORT_STATUS) == -errno.ECANCELED & 0xFFFFFFFF


def test_a_new_core_process_takes_up_what_clients_queued_while_its_predecessor_polled(rig):
    """A core that dies mid-job (the watchdog, a crash) leaves HDR_POLLING set in its
    queues; clients then write entries without ringing, as the protocol allows. The core
    process that takes over must clear the flag and run them, not sleep first (up to 1 s
    per restart: another user's 1 ms timeouts made a queue wait that long again and again)."""
    header = rig.add_queue(0)
    rig.core.drain_all()
    header.write32(queues.HDR_POLLING, 1)            # as the dead core left it
    rig.submit(header, 1)                            # no doorbell: none was needed
    restarted = rig.new_core()
    restarted.resume()
    assert header.read64(queues.HDR_DONE) == 1 and rig.completion(header, 1)[:2] == (1, 0)
    assert header.read32(queues.HDR_POLLING) == 0    # clients ring from now on


def test_queue_jobs_leave_half_the_profile_queue_to_the_kernel_ring(rig):
    """User-queue jobs raise no interrupt: the driver drains their profile records only
    every 100 ms, so one client's profiled queue jobs kept the core's profile queue full
    and every other context's profiled SUBMIT job lost its task records. They may fill at
    most half of it; a SUBMIT job's records always find the other half."""
    pq_path = memory.profile_queue_path(rig.bus, 0)
    pq_path.write_bytes(bytes(ring.PROFILE_ENTRIES * ring.PROFILE_RECORD_STRUCT.size))
    header = rig.add_queue(0)
    nops = np.frombuffer(b"".join(tasks.encode_task("NOP") for _ in range(20)), np.uint8)
    many = rig.chip.put(nops)
    seq = 0
    for _ in range(ring.PROFILE_ENTRIES // 21 + 10):        # more records than the whole queue holds
        seq += 1
        rig.submit(header, seq, many, nops.size, flags=queues.ENTRY_PROFILE)
        if seq % QUEUE_ENTRIES == QUEUE_ENTRIES - 1:
            rig.core.drain_all()
    rig.core.drain_all()
    held = rig.regs.read32(BANK + regs.PQ_TAIL) - rig.regs.read32(BANK + regs.PQ_HEAD)
    assert 0 < held <= ring.PROFILE_ENTRIES // 2
    dropped = rig.regs.read32(BANK + regs.PQ_DROPPED)
    tail = rig.regs.read32(BANK + regs.RING_TAIL)
    ring.RING_ENTRY_STRUCT.pack_into(rig.core.ring, tail * ring.RING_ENTRY.itemsize, ring.OP_JOB, ASID, 77, many,
                                     nops.size, 0, 0, ring.RING_FLAG_PROFILE)
    rig.regs.write32(BANK + regs.RING_TAIL, ring.ring_next(tail, ENTRIES))
    rig.core.drain_all()
    assert rig.regs.read32(BANK + regs.PQ_DROPPED) == dropped     # all 21 records of the SUBMIT job went in
    assert rig.regs.read32(BANK + regs.PQ_TAIL) - rig.regs.read32(BANK + regs.PQ_HEAD) == held + 21


def test_queues_of_one_priority_take_turns_at_going_first(rig, monkeypatch):
    """Two clients with a job each, again and again: the one served first alternates (before,
    the lower slot always went first, so its client always had its answer first). Profiled
    entries run in Python in both loops, which shows the order the loop chose."""
    first, second = rig.add_queue(0), rig.add_queue(1)
    order: list[int] = []
    run_user = rig.core.run_user_job
    monkeypatch.setattr(rig.core, "run_user_job", lambda q, *a: (order.append(q.slot), run_user(q, *a)))
    for seq in range(1, 5):
        rig.submit(first, seq, flags=queues.ENTRY_PROFILE)
        rig.submit(second, seq, flags=queues.ENTRY_PROFILE)
        rig.core.drain_all()
    assert order == [0, 1, 1, 0, 0, 1, 1, 0]
