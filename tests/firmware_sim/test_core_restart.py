"""A core of the chip that dies or hangs is restarted; only the job it was running
fails, with an errno that says why, and every other job runs (issue 11, findings 4, 6, 7).

The first tests drive the real core and watchdog code on a bus directory of their own,
killing the core at each step of a job; the others kill real core processes under the
mounted driver."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

import libnpu
from firmware_sim import chip as chip_top
from firmware_sim import core as core_unit
from firmware_sim import priority
from firmware_sim.timing import HardwareProfile
from kmd_fuse import paths
from kmd_fuse.udev.uevent import Uevent
from npu_hw import memory, regs, ring
from tests.support.device import (
    chip_pid,
    core_pids,
    set_fault_injection,
    start_npu,
    stop_npu,
    wait_until,
    wait_until_hung,
)

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

ENTRIES = 8
BANK = regs.core_bank(0)


# ---- the recovery protocol, one death point at a time ----

class CoreDied(BaseException):
    """The core's process ends here (raised where its next write would have happened)."""


class DyingRegisters:
    """The core's register view, dying instead of doing one chosen write."""

    def __init__(self, view: regs.RegisterView, offset: int, when):
        self.view, self.offset, self.when = view, offset, when
        self.read32, self.read64 = view.read32, view.read64

    def write32(self, offset: int, value: int) -> None:
        if offset == self.offset and self.when(value):
            raise CoreDied
        self.view.write32(offset, value)

    def write64(self, offset: int, value: int) -> None:
        if offset == self.offset and self.when(value):
            raise CoreDied
        self.view.write64(offset, value)


@pytest.fixture
def bus(tmp_path, monkeypatch):
    """A one-core chip's memories; the watchdog's core restarts are recorded, not forked."""
    for path, size in ((memory.regs_path(tmp_path), regs.REGS_SIZE),
                       (memory.ring_path(tmp_path, 0), ENTRIES * ring.RING_ENTRY.itemsize),
                       (memory.cq_path(tmp_path, 0), ENTRIES * ring.COMPLETION.itemsize)):
        path.write_bytes(bytes(size))
    irq = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    top = chip_top.Chip(tmp_path, [-1], irq, HardwareProfile(), ENTRIES)
    top.regs.write32(regs.RING_ENTRIES, ENTRIES)
    top.restarted = []
    monkeypatch.setattr(top, "start_core", top.restarted.append)
    yield top
    os.close(irq)


def _queue_jobs(top: chip_top.Chip, job_ids: list[int]) -> None:
    """Write OP_JOB entries as the driver does; cmd_iova carries the job id for the test."""
    tail = top.regs.read32(BANK + regs.RING_TAIL)
    for job_id in job_ids:
        ring.RING_ENTRY_STRUCT.pack_into(top.rings[0], tail * ring.RING_ENTRY.itemsize, ring.OP_JOB, 1,
                                         job_id, job_id, 0, 0, 0, 0)
        tail = ring.ring_next(tail, ENTRIES)
    top.regs.write32(BANK + regs.RING_TAIL, tail)


def _completions(top: chip_top.Chip) -> list[tuple[int, int]]:
    head, tail = top.regs.read32(BANK + regs.CQ_HEAD), top.regs.read32(BANK + regs.CQ_TAIL)
    done = []
    while head != tail:
        job_id, status = ring.COMPLETION_STRUCT.unpack_from(top.cqs[0], head * ring.COMPLETION.itemsize)[:2]
        done.append((job_id, status))
        head = ring.ring_next(head, ENTRIES)
    return done


# Where the core dies while running job 12 (its write that does not happen, and when), and
# what job 12 must end with. ``ran`` lists the jobs the core started, in order.
DEATHS = {
    "before CURRENT_JOB is set": (regs.CURRENT_JOB, lambda v, ran: v == 12, 0),   # never started: runs later
    "inside the job": (None, None, -errno.EIO),
    "before CQ_TAIL": (regs.CQ_TAIL, lambda v, ran: ran[-1] == 12, -errno.EIO),
    "before RING_HEAD": (regs.RING_HEAD, lambda v, ran: ran[-1] == 12, 0),       # its completion was posted
    "before CURRENT_JOB is cleared": (regs.CURRENT_JOB, lambda v, ran: v == 0 and ran[-1] == 12, 0),
    "before the interrupt": (regs.IRQ_STATUS, lambda v, ran: ran[-1] == 12, 0),
}


@pytest.mark.parametrize("where", DEATHS)
def test_a_core_death_at_any_step_loses_and_skips_no_job(bus, monkeypatch, where):
    top = bus
    offset, dies, expected = DEATHS[where]
    ran = []

    def run_job(dma, asid, cmd_iova, cmd_size, profile, **_):
        ran.append(cmd_iova)
        if where == "inside the job" and ran.count(12) == 1 and cmd_iova == 12:
            raise CoreDied
        return core_unit.JobResult()
    monkeypatch.setattr(core_unit, "run_job", run_job)

    _queue_jobs(top, [11, 12, 13])
    unit = core_unit.Core(top.bus, 0, -1, top.irq_fd, HardwareProfile())
    if offset is not None:
        unit.regs = DyingRegisters(unit.regs, BANK + offset, lambda v: dies(v, ran))
    with pytest.raises(CoreDied):
        unit.drain_ring()
    top.recover_core(0, -errno.EIO)            # what the watchdog does once it reaped the process
    assert top.restarted == [0]
    core_unit.Core(top.bus, 0, -1, top.irq_fd, HardwareProfile()).drain_ring()   # the restarted core

    assert _completions(top) == [(11, 0), (12, expected), (13, 0)]
    assert ran == [11, 12, 13]                 # job 12 ran once: never again after it started
    assert top.regs.read32(BANK + regs.RING_HEAD) == top.regs.read32(BANK + regs.RING_TAIL)
    assert top.regs.read64(BANK + regs.CURRENT_JOB) == 0
    assert top.regs.read32(BANK + regs.CORE_RESTARTS) == 1


def test_an_idle_core_death_fails_nothing(bus):
    top = bus
    top.recover_core(0, -errno.EIO)
    assert _completions(top) == [] and top.restarted == [0]
    assert top.regs.read32(BANK + regs.CORE_RESTARTS) == 1
    assert top.regs.read32(BANK + regs.IRQ_STATUS) == regs.IRQ_CORE_RESTART


def test_an_entry_that_kills_the_core_before_it_starts_is_dropped(bus, monkeypatch):
    """A core that dies twice in a row at the same entry, before starting it, is not
    restarted into it forever: that job fails with EIO and the next one runs."""
    top = bus
    _queue_jobs(top, [21, 22])
    monkeypatch.setattr(top, "reap_core", lambda core: signal.SIGSEGV)    # a wait status: killed by it
    top.watchdog()
    assert _completions(top) == [] and top.regs.read32(BANK + regs.RING_HEAD) == 0
    top.watchdog()
    assert _completions(top) == [(21, -errno.EIO)]
    assert top.restarted == [0, 0] and top.regs.read32(BANK + regs.CORE_RESTARTS) == 2
    core_unit.Core(top.bus, 0, -1, top.irq_fd, HardwareProfile()).drain_ring()
    assert _completions(top) == [(21, -errno.EIO), (22, 0)]


# ---- real core processes under the mounted driver ----



def _change_events(npu) -> list[Uevent]:
    out = npu.kmd("monitor", "--all", "--timeout", "1").stdout
    records = [r for r in out.split("\n\n") if r.startswith("KERNEL[")]
    return [e for e in map(Uevent.parse, records) if e.action == "change"]


def test_a_core_killed_by_sigbus_mid_job_fails_that_job_with_efault(fresh_npu):
    """Even with an unbounded timeout requested, a core that died under its job (SIGBUS: its
    memory vanished) is restarted at once; the job fails with EFAULT, not ETIMEDOUT, and the
    jobs queued behind it on the same ring run."""
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        assert wait_until(lambda: len(core_pids(npu.devroot)) == 2)
        set_fault_injection(npu.devroot, regs.FAULT_HANG)
        hung = [dev.submit(None, timeout_ms=0xFFFFFFFF) for _ in range(2)]      # one on each core
        wait_until_hung(npu.devroot, 2)
        set_fault_injection(npu.devroot, 0)
        queued = [dev.submit(None, timeout_ms=0xFFFFFFFF) for _ in range(6)]    # behind the hung ones
        for pid in core_pids(npu.devroot):
            os.kill(pid, signal.SIGBUS)
        dev.wait(hung + queued, timeout=60)
        assert [f.status for f in hung] == [-errno.EFAULT] * 2
        assert [f.status for f in queued] == [0] * 6
        assert wait_until(lambda: dev.info()["reset_count"] == count + 2)
        assert wait_until(lambda: len(core_pids(npu.devroot)) == 2)
        fences = [dev.submit(None) for _ in range(20)]
        dev.wait(fences, timeout=60)
        assert all(f.status == 0 for f in fences)


def test_an_idle_core_that_dies_is_restarted_counted_and_announced(fresh_npu):
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        assert wait_until(lambda: len(core_pids(npu.devroot)) == 2)
        assert _nices(npu) == _core_nice_expected()
        victim = core_pids(npu.devroot)[1]
        os.kill(victim, signal.SIGKILL)
        assert wait_until(lambda: dev.info()["reset_count"] == count + 1)
        assert wait_until(lambda: len(core_pids(npu.devroot)) == 2)
        assert victim not in core_pids(npu.devroot)
        assert _nices(npu) == _core_nice_expected()          # the new core asked again
        assert dev.info()["num_cores"] == 2
        fences = [dev.submit(None) for _ in range(40)]         # spread over both cores
        dev.wait(fences, timeout=60)
        assert all(f.status == 0 for f in fences)
        assert dev.info()["reset_count"] == count + 1
    events = _change_events(npu)
    assert [e.extra.get("RESET_COUNT") for e in events] == [str(count + 1)]


def _nices(npu) -> tuple[int, list[int], list[bool]]:
    """The chip's top-level process's nice, its cores', and whether each core's autogroup
    (if the kernel has them) has the core's nice."""
    cores = core_pids(npu.devroot)
    nices = [os.getpriority(os.PRIO_PROCESS, pid) for pid in cores]
    groups = [priority.autogroup_nice(pid) in (None, nice) for pid, nice in zip(cores, nices)]
    return os.getpriority(os.PRIO_PROCESS, chip_pid(npu.devroot)), nices, groups


def _core_nice_expected() -> tuple[int, list[int], list[bool]]:
    """The top level at this process's nice; each core raised to CORE_NICE where permitted
    (root here; the rootless scenario, test_rootless, checks the other case), its group too."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    core = min(own, priority.default_core_nice()) if os.geteuid() == 0 else own
    return own, [core, core], [True, True]


@pytest.fixture
def capped_npu(tmp_path):
    mounted = start_npu(tmp_path, extra=("--max-job-timeout", "0.3"))
    yield mounted
    stop_npu(mounted)


def test_a_job_timeout_is_clamped_to_the_devices_maximum(capped_npu):
    """timeout_ms = 0xFFFFFFFF on a hung core: the watchdog still ends the job, at the
    device's --max-job-timeout."""
    npu = capped_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        set_fault_injection(npu.devroot, regs.FAULT_HANG)
        fence = dev.submit(None, timeout_ms=0xFFFFFFFF)
        wait_until_hung(npu.devroot)
        set_fault_injection(npu.devroot, 0)
        with pytest.raises(libnpu.JobError) as exc:
            fence.wait(timeout=60)
        assert exc.value.errno == errno.ETIMEDOUT
        for _ in range(5):
            dev.run(None, timeout_ms=0xFFFFFFFF)


def test_the_driver_restarts_a_chip_whose_watchdog_is_stuck(capped_npu):
    """The driver's safety net: a job far past its (clamped) timeout while the chip's own
    watchdog does nothing (its process stopped) makes the driver restart the chip."""
    npu = capped_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        set_fault_injection(npu.devroot, regs.FAULT_HANG)
        chip = chip_pid(npu.devroot)
        os.kill(chip, signal.SIGSTOP)
        try:
            fence = dev.submit(None, timeout_ms=0xFFFFFFFF)
            wait_until_hung(npu.devroot)
            set_fault_injection(npu.devroot, 0)
            with pytest.raises(libnpu.JobError) as exc:
                fence.wait(timeout=60)
            assert exc.value.errno == errno.EIO           # lost in the chip's restart
        finally:
            try:
                os.kill(chip, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert dev.info()["reset_count"] == count + 1
        for _ in range(5):
            dev.run(None)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "1e10", "soon"])
def test_max_job_timeout_must_be_sensible(tmp_path, value):
    done = subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "start", "--devroot", str(tmp_path / "dev"),
                           f"--max-job-timeout={value}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-job-timeout" in done.stderr
    assert not (tmp_path / "dev").exists()


def test_an_unexpected_error_in_a_job_is_eio_and_the_core_keeps_serving(fresh_npu):
    npu = fresh_npu
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        count = dev.info()["reset_count"]
        assert wait_until(lambda: len(core_pids(npu.devroot)) == 2)
        cores = core_pids(npu.devroot)
        set_fault_injection(npu.devroot, regs.FAULT_INTERNAL)
        with pytest.raises(libnpu.JobError) as exc:
            dev.run(None)
        assert exc.value.errno == errno.EIO
        set_fault_injection(npu.devroot, 0)
        for _ in range(5):
            dev.run(None)
        assert core_pids(npu.devroot) == cores and dev.info()["reset_count"] == count
    log = paths.log_file(npu.devroot, 0).read_text()
    assert "Traceback" in log and "injected internal error (FAULT_INTERNAL)" in log


def test_buffer_memory_cannot_vanish_under_the_chip(fresh_npu):
    """Finding 4 as a client reached it was a buffer shrunk under the chip's mapping. Buffers
    are sealed memfds now: not even root can shrink one through the chip's bus entry, and
    the chip keeps computing on it. (A core that dies anyway: the SIGBUS test above.)"""
    npu = fresh_npu
    bus = paths.bus_dir(npu.devroot, 0)
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        before = set(os.listdir(bus))
        src, dst = dev.alloc_mem(1 << 20), dev.alloc_mem(1 << 20)
        created = sorted(set(os.listdir(bus)) - before)
        assert len(created) == 2
        src.view[:] = 3
        copy = dev.command_buffer()
        copy.add("DMA_COPY", src=src.address, dst=dst.address, length=1 << 20)
        dev.wait([dev.submit(copy, [src, dst]) for _ in range(4)], timeout=60)   # both cores map them
        for name in created:
            with pytest.raises(PermissionError):
                os.truncate(bus / name, 0)
        dev.run(copy, [src, dst])
        assert (dst.view == 3).all()
