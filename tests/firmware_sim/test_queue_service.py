"""The C service loop of a core's user queues (firmware_sim.queue_service) against the Python
one: the same completions, fence values, counters and output bytes, and the same refusals of
what a hostile client writes, after the C loop has taken the job's plan."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from firmware_sim import job_plans
from npu_hw import iommu, memory, queues, regs, ring, tasks
from tests.support.chip_memory import ASID, BO
from tests.support.queue_rig import BANK, ENTRIES, QUEUE_ENTRIES, Rig

pytestmark = pytest.mark.recovery     # queues (benchmarks/flake_hunt.py -m recovery)

K, N = 16, 8


class FcJob:
    """A FULLY_CONNECTED job (per-channel requantization, one C kernel call) in the rig's
    memory; its output on a page of its own, so that the page can be unmapped alone."""

    def __init__(self, rig: Rig, seed: int = 0, graph: bool = False):
        rng = np.random.default_rng(seed)
        chip = self.chip = rig.chip
        self.x = chip.put(rng.integers(-128, 128, (1, K), dtype=np.int8))
        weights = chip.put(rng.integers(-127, 128, (N, K), dtype=np.int8))
        bias = chip.put(rng.integers(-500, 500, N, dtype=np.int32))
        mult = chip.put(np.full(N, 1 << 30, np.int32))
        self.shift = chip.put(np.full(N, -3, np.int32))
        page = iommu.PAGE_SIZE
        self.out = -(-chip.alloc(3 * page) // page) * page
        self.command = tasks.encode_task(
            "FULLY_CONNECTED", tasks.FC_PER_CHANNEL, input=self.x, weights=weights, bias=bias, output=self.out,
            mult_iova=mult, shift_iova=self.shift, rows=1, in_features=K, out_features=N, input_zp=3,
            output_zp=-2, act_min=-128, act_max=127)
        if graph:        # the same layer twice, as a graph job of two independent tasks on the chip's cores
            self.command = b"".join(tasks.encode_graph([[], []], [self.command, self.command]))
        self.iova = chip.put(np.frombuffer(self.command, np.uint8))
        self.size = len(self.command)

    def submit(self, rig: Rig, header: queues.Header, seq: int, timeout_ms: int = 0) -> None:
        rig.submit(header, seq, self.iova, self.size, timeout_ms=timeout_ms)

    def set_input(self, seed: int) -> None:
        at = self.x - iommu.IOVA_BASE
        self.chip.bytes[at:at + K] = np.random.default_rng(seed).integers(-128, 128, K, dtype=np.int8).view(np.uint8)

    def output(self) -> bytes:
        return self.chip.get(self.out, np.int8, (1, N)).tobytes()

    def set_shift(self, value: int) -> None:
        at = self.shift - iommu.IOVA_BASE
        self.chip.bytes[at:at + 4 * N] = np.full(N, value, np.int32).view(np.uint8)

    def rewrite_output_address(self, iova: int) -> None:
        field = tasks.FULLY_CONNECTED.dtype.fields["output"][1]
        at = self.iova - iommu.IOVA_BASE + field
        self.chip.bytes[at:at + 8] = np.array([iova], np.uint64).view(np.uint8)


def _script(rig: Rig) -> tuple[list, dict]:
    """Two queues, FC jobs with new inputs, NOPs and timeouts asked or not; what a client and
    the driver can see of each job, and the counters after."""
    first, second = rig.add_queue(0, priority=1), rig.add_queue(1, priority=1)
    first.write32(queues.HDR_WAITING, 1)
    job = FcJob(rig)
    seen = []
    for seq in range(1, 9):
        job.set_input(seq)
        job.submit(rig, first, seq, timeout_ms=(0, 7, 10**6)[seq % 3])
        rig.submit(second, seq, timeout_ms=seq % 2)
        rig.core.drain_all()
        seen.append((rig.completion(first, seq)[:6], rig.completion(second, seq)[:6], job.output(),
                     rig.regs.read32(BANK + regs.JOB_TIMEOUT_MS)))
    counters = {name: rig.table.read64(queues.slot_offset(slot) + offset)
                for slot in (0, 1) for name, offset in (("done", queues.Q_DONE), ("failed", queues.Q_FAILED),
                                                        ("cycles", queues.Q_CYCLES), ("device", queues.Q_DEVICE_NS))}
    counters["busy_cycles"] = rig.regs.read64(BANK + regs.BUSY_CYCLES)
    counters["signals"] = len(_read_all(rig.lines[0][0]))
    counters["state"] = rig.regs.read32(BANK + regs.CORE_STATE), rig.regs.read32(BANK + regs.UQ_SLOT)
    return seen, counters


def _read_all(fd: int) -> bytes:
    got = b""
    try:
        while chunk := os.read(fd, 4096):
            got += chunk
    except BlockingIOError:
        pass
    return got


def test_the_c_loop_and_the_python_loop_complete_jobs_alike(tmp_path: Path, monkeypatch) -> None:
    results, python_jobs = {}, {}
    for native in (True, False):
        folder = tmp_path / str(native)
        folder.mkdir()
        rig = Rig(folder, native=native)
        calls = python_jobs[native] = [0]
        run_user = rig.core.run_user_job
        monkeypatch.setattr(rig.core, "run_user_job", lambda *a, run=run_user, n=calls: (
            n.__setitem__(0, n[0] + 1), run(*a)))
        try:
            results[native] = _script(rig)
        finally:
            rig.close()
    assert results[True] == results[False]
    seen, counters = results[True]
    assert all(first[1] == 0 and first[3] > 0 for first, _, _, _ in seen)    # FC jobs ran, with cycles
    assert counters["signals"] == 8 and counters["state"] == (regs.CORE_IDLE, 0)
    assert python_jobs[False] == [16] and python_jobs[True][0] <= 4     # first runs only: the rest in C


def _warm(rig: Rig, header: queues.Header, job: FcJob, upto: int) -> None:
    """Jobs 1..upto: the plan is made, then its C call (job_plans.NATIVE_TRIES), then it runs in C."""
    for seq in range(1, upto + 1):
        job.submit(rig, header, seq)
    rig.core.drain_all()
    assert [rig.completion(header, seq)[1] for seq in range(1, upto + 1)] == [0] * upto


def test_a_command_buffer_rewritten_after_its_plan_was_taken_is_checked_again(queue_rig: Rig) -> None:
    header = queue_rig.add_queue(0)
    job = FcJob(queue_rig)
    _warm(queue_rig, header, job, 4)
    job.rewrite_output_address(iommu.IOVA_BASE + (1 << 31))      # not mapped
    job.submit(queue_rig, header, 5)
    queue_rig.core.drain_all()
    assert queue_rig.completion(header, 5)[1] == -errno.EFAULT
    assert queue_rig.completion(header, 5)[5] == iommu.IOVA_BASE + (1 << 31)   # the fault's address


def test_an_unmapped_operand_faults_after_the_invalidation_even_with_a_plan_taken(queue_rig: Rig) -> None:
    """The driver unmaps the output's page and invalidates the ASID: the job's next run must
    not write through the translation its plan was made with."""
    header = queue_rig.add_queue(0)
    job = FcJob(queue_rig)
    _warm(queue_rig, header, job, 4)
    before = job_plans.GENERATION[0]
    table = np.memmap(memory.page_table_path(queue_rig.bus, ASID), dtype=iommu.PTE_DTYPE, mode="r+",
                      shape=(iommu.PT_ENTRIES,))
    table[(job.out - iommu.IOVA_BASE) >> iommu.PAGE_SHIFT] = 0
    table.flush()
    tail = queue_rig.regs.read32(BANK + regs.RING_TAIL)
    ring.RING_ENTRY_STRUCT.pack_into(queue_rig.core.ring, tail * ring.RING_ENTRY.itemsize, ring.OP_INVALIDATE, ASID,
                                     0, 0, 0, 0, BO, 0)
    queue_rig.regs.write32(BANK + regs.RING_TAIL, ring.ring_next(tail, ENTRIES))
    job.submit(queue_rig, header, 5)
    queue_rig.core.drain_all()
    assert job_plans.GENERATION[0] != before
    assert queue_rig.completion(header, 5)[1] == -errno.EFAULT and queue_rig.completion(header, 5)[5] == job.out


def test_a_c_step_failing_mid_job_fails_that_job_alone(queue_rig: Rig) -> None:
    """A shift operand rewritten out of range in memory (the command buffer unchanged): the
    kernel's own check fails the job with EINVAL; the queue carries on with the next one."""
    header = queue_rig.add_queue(0)
    job = FcJob(queue_rig)
    _warm(queue_rig, header, job, 4)
    expected = job.output()
    job.set_shift(40)
    job.submit(queue_rig, header, 5)
    queue_rig.core.drain_all()
    job.set_shift(-3)
    job.submit(queue_rig, header, 6)
    queue_rig.core.drain_all()
    assert [queue_rig.completion(header, seq)[1] for seq in (5, 6)] == [-errno.EINVAL, 0]
    assert job.output() == expected
    base = queues.slot_offset(0)
    assert queue_rig.table.read64(base + queues.Q_FAILED) == 1 and queue_rig.table.read64(base + queues.Q_DONE) == 6
    assert queue_rig.regs.read32(BANK + regs.CORE_STATE) == regs.CORE_IDLE
    assert queue_rig.regs.read64(BANK + regs.CURRENT_JOB) == 0


def test_bad_entries_and_tails_are_refused_after_the_plan_was_taken(queue_rig: Rig) -> None:
    """The checks of ``user_queues.next_entry`` and ``run_user_job`` hold for an entry naming a
    command buffer the C loop replays: another seq's entry, unknown flags, the profile flag
    (timed by the Python path), an address outside the queue's ASID; then a tail too far."""
    header = queue_rig.add_queue(0)
    job = FcJob(queue_rig)
    _warm(queue_rig, header, job, 4)
    queue_rig.submit(header, 5, job.iova, job.size, written_seq=13)
    queue_rig.submit(header, 6, job.iova, job.size, flags=0x4)
    queue_rig.submit(header, 7, job.iova, job.size, flags=queues.ENTRY_PROFILE)
    queue_rig.submit(header, 8, job.iova + (1 << 32), job.size)
    job.submit(queue_rig, header, 9)
    queue_rig.core.drain_all()
    assert [queue_rig.completion(header, seq)[1] for seq in range(5, 10)] == [
        -errno.EINVAL, -errno.EINVAL, 0, -errno.EFAULT, 0]
    header.write64(queues.HDR_TAIL, 9 + QUEUE_ENTRIES + 1)
    queue_rig.core.drain_all()
    assert header.error() == -errno.EINVAL and header.read64(queues.HDR_DONE) == 9


def test_a_graph_job_settled_on_one_thread_runs_in_c_as_in_python(tmp_path: Path, monkeypatch) -> None:
    """A job placed on two cores whose choice of threads (graph_threads) has settled on one
    thread for good: the C loop replays its one-thread steps, with the Python loop's
    completions and outputs."""
    results, python_jobs = {}, {}
    for native in (True, False):
        folder = tmp_path / str(native)
        folder.mkdir()
        rig = Rig(folder, native=native, cores=2)
        calls = python_jobs[native] = []
        run_user = rig.core.run_user_job
        monkeypatch.setattr(rig.core, "run_user_job", lambda q, seq, *a, run=run_user, n=calls: (
            n.append(seq), run(q, seq, *a)))
        try:
            header = rig.add_queue(0)
            job = FcJob(rig, graph=True)
            seen = []
            for seq in range(1, 25):
                job.set_input(seq)
                job.submit(rig, header, seq)
                rig.core.drain_all()
                seen.append((rig.completion(header, seq)[:6], job.output()))
            results[native] = seen
        finally:
            rig.close()
    assert results[True] == results[False] and all(c[1] == 0 for c, _ in results[True])
    assert len(python_jobs[False]) == 24
    # Python: the first run and the samples that settle the choice; then C.
    assert len(python_jobs[True]) < 16, python_jobs[True]
    assert python_jobs[True] == list(range(1, len(python_jobs[True]) + 1))
