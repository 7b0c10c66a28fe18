"""Hardware access layer: the only place the KMD touches the chip.

It provides the chip's memories on the bus directory, powers the chip on (the
platform starts ``python -m firmware_sim`` - a separate process the KMD never
imports), and then talks to it only through the register file, the command
rings, the completion queues and the doorbell / interrupt lines.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from npu_hw import memory, profiles, queues, regs, ring
from npu_hw.memory import map_file

log = logging.getLogger("kmd_fuse.hw")


@dataclass(frozen=True)
class ChipConfig:
    cores: int = 2
    ring_entries: int = ring.DEFAULT_RING_ENTRIES
    profile: str = profiles.DEFAULT_PROFILE   # spec.profiles: the timing model the chip runs
    pacing: bool = False                      # jobs end no earlier than their modeled device time
    watchdog_ms: int = regs.DEFAULT_JOB_TIMEOUT_MS   # a job's timeout when SUBMIT gives none
    max_job_timeout_ms: int = 10_000    # SUBMIT's timeouts (and the default) are clamped to this


@dataclass
class ProfileRecord:
    """One record of a core's profile queue (npu_hw/ring.py, PROFILE_RECORD)."""
    job_id: int
    index: int
    opcode: int
    kind: int
    core: int               # the core that ran it (a graph job's task: the one it was placed on)
    start_ns: int
    end_ns: int
    cycles: int


@dataclass
class Completion:
    job_id: int
    status: int
    core: int
    cycles: int
    device_time_ns: int
    exec_ns: int
    fault_iova: int
    task_index: int = 0     # the task a failed job failed in (or the count of tasks run)


def _create_file(path: Path, size: int, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


class Hardware:
    """The chip as the KMD sees it."""

    def __init__(self, bus: Path, config: ChipConfig, device_memory: int = 0):
        self.bus, self.config = bus, config
        self.device_memory = device_memory      # bytes: the chip bounds its cores' address space by it
        self.entries = config.ring_entries
        self.process: subprocess.Popen | None = None
        self.process_fd = -1     # the chip process's pidfd: readable once it exits
        self.doorbells: list[int] = []
        self.irq_fd = -1
        self.control_fd = -1     # written after RESET_REQ: the chip sleeps until something needs it
        self.invalidations_pushed: list[int] = []   # per core, OP_INVALIDATE entries written (wraps like INVAL_DONE)
        self._busy_reported = 0

    # ---- bring-up ----
    def power_on(self, timeout: float = 60.0) -> None:
        """Create the chip's memories, start it, wait until it reports ready.

        The chip's start is Python imports and its cores' self-test: ~1 s alone, but 20 s
        was missed on a 2-CPU host at load 25, and a first start builds the C kernels (22 s
        at load 10), so the deadline is generous; a chip that dies while starting is seen
        at once (``poll``), and a stop meanwhile ends the wait at once (the daemon's
        SIGTERM handler raises out of it; ``firmware_sim.startup``: the chip dies with us)."""
        self.bus.mkdir(parents=True, exist_ok=True)
        os.chmod(self.bus, 0o711)  # clients open their own buffer files by path
        _create_file(memory.regs_path(self.bus), regs.REGS_SIZE)
        _create_file(memory.queue_table_path(self.bus), queues.QTAB_SIZE)
        for core in range(self.config.cores):
            _create_file(memory.ring_path(self.bus, core), self.entries * ring.RING_ENTRY.itemsize)
            _create_file(memory.cq_path(self.bus, core), self.entries * ring.COMPLETION.itemsize)
            _create_file(memory.profile_queue_path(self.bus, core), ring.PROFILE_ENTRIES * ring.PROFILE_RECORD.itemsize)
        self._regs_map = map_file(memory.regs_path(self.bus))
        self.regs = regs.RegisterView(self._regs_map)
        self._qtab_map = map_file(memory.queue_table_path(self.bus))
        self.qtab = regs.RegisterView(self._qtab_map)
        self.rings = [map_file(memory.ring_path(self.bus, c)) for c in range(self.config.cores)]
        self.cqs = [map_file(memory.cq_path(self.bus, c)) for c in range(self.config.cores)]
        self.pqs = [map_file(memory.profile_queue_path(self.bus, c)) for c in range(self.config.cores)]
        self.regs.write32(regs.RING_ENTRIES, self.entries)
        self.regs.write32(regs.WATCHDOG_MS, self.config.watchdog_ms)
        self.regs.write32(regs.PACING, regs.PACING_ON if self.config.pacing else 0)
        self._start_chip()
        deadline = time.monotonic() + timeout
        while not self.regs.read32(regs.STATUS) & regs.STATUS_READY:
            if self.process.poll() is not None:
                raise OSError(errno.ENODEV, f"chip exited during power-on (status {self.process.returncode})")
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, "chip did not come up")
            time.sleep(0.005)
        if self.regs.read32(regs.ID) != regs.DEVICE_ID_VALUE:
            raise OSError(errno.ENODEV, "unexpected chip id")
        self.num_cores = self.regs.read32(regs.NUM_CORES)
        self.clock_mhz = self.regs.read32(regs.CLOCK_MHZ)
        self.profile = profiles.BY_ID.get(self.regs.read32(regs.PROFILE_ID))
        self.banks = [regs.core_bank(c) for c in range(self.num_cores)]
        self.tails = [self.reg(c, regs.RING_TAIL) for c in range(self.num_cores)]
        self._restarts_seen = [self.reg(c, regs.CORE_RESTARTS) for c in range(self.num_cores)]
        self.invalidations_pushed = [self.reg(c, regs.INVAL_DONE) for c in range(self.num_cores)]

    def _start_chip(self) -> None:
        if not self.doorbells:
            self.doorbells = [os.eventfd(0, os.EFD_CLOEXEC) for _ in range(self.config.cores)]
            self.irq_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self.control_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        cmd = [sys.executable, "-m", "firmware_sim", "--bus", str(self.bus),
               "--doorbell-fds", ",".join(map(str, self.doorbells)), "--irq-fd", str(self.irq_fd),
               "--control-fd", str(self.control_fd), "--parent", str(os.getpid()),
               "--ring-entries", str(self.entries), "--profile", self.config.profile,
               "--memory", str(self.device_memory)]
        self.process = spawn_keeping_loop_free(cmd, [*self.doorbells, self.irq_fd, self.control_fd])
        self._close_process_fd()
        self.process_fd = os.pidfd_open(self.process.pid)     # not reaped yet: it is this process
        log.info("chip started (pid %d, %d cores)", self.process.pid, self.config.cores)

    def restart_chip(self) -> None:
        """Cold-restart a chip that died: all ring state starts from zero."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.regs.write32(regs.STATUS, 0)
        for core in range(self.config.cores):   # the chip is dead: its registers are ours to clear
            bank = regs.core_bank(core)
            for offset in (regs.RING_HEAD, regs.RING_TAIL, regs.CQ_HEAD, regs.CQ_TAIL, regs.PQ_HEAD, regs.PQ_TAIL):
                self.regs.write32(bank + offset, 0)
            self.regs.write64(bank + regs.CURRENT_JOB, 0)
            for offset in (regs.UQ_SLOT, regs.UQ_ABORT_STATUS, regs.INVAL_DONE):
                self.regs.write32(bank + offset, 0)
            self.tails[core] = 0
            self.invalidations_pushed[core] = 0
        self._start_chip()

    def _close_process_fd(self) -> None:
        if self.process_fd >= 0:
            os.close(self.process_fd)
            self.process_fd = -1

    def ready(self) -> bool:
        return bool(self.regs.read32(regs.STATUS) & regs.STATUS_READY)

    def power_off(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_process_fd()
        for fd in [*self.doorbells, self.irq_fd, self.control_fd]:
            if fd >= 0:
                os.close(fd)
        self.doorbells, self.irq_fd, self.control_fd = [], -1, -1
        shutil.rmtree(self.bus, ignore_errors=True)

    # ---- registers ----
    def reg(self, core: int, offset: int) -> int:
        return self.regs.read32(regs.core_bank(core) + offset)

    def reg64(self, core: int, offset: int) -> int:
        return self.regs.read64(regs.core_bank(core) + offset)

    def set_fault_injection(self, bits: int) -> None:
        self.regs.write32(regs.FAULT_INJECT, bits)

    # ---- command ring ----
    def ring_space(self, core: int) -> int:
        """Free ring slots on ``core`` (one slot always stays empty)."""
        used = (self.tails[core] - self.regs.read32(self.banks[core] + regs.RING_HEAD)) % self.entries
        return self.entries - 1 - used

    def push(self, core: int, opcode: int, asid: int, job_id: int = 0, cmd_iova: int = 0,
             cmd_size: int = 0, timeout_ms: int = 0, bo_id: int = 0, flags: int = 0) -> None:
        """Write one ring entry (caller checked ``ring_space``); ``doorbell`` publishes it."""
        tail = self.tails[core]
        if opcode == ring.OP_INVALIDATE:
            self.invalidations_pushed[core] = (self.invalidations_pushed[core] + 1) & 0xFFFFFFFF
        ring.RING_ENTRY_STRUCT.pack_into(self.rings[core], tail * ring.RING_ENTRY_STRUCT.size, opcode, asid,
                                         job_id, cmd_iova, cmd_size, timeout_ms, bo_id, flags)
        self.tails[core] = ring.ring_next(tail, self.entries)

    def doorbell(self, core: int) -> None:
        """Publish the new tail and wake the core."""
        bank = self.banks[core]
        self.regs.write32(bank + regs.RING_TAIL, self.tails[core])
        self.regs.write32(bank + regs.DOORBELL, self.regs.read32(bank + regs.DOORBELL) + 1)
        os.eventfd_write(self.doorbells[core], 1)

    def wake(self, core: int) -> None:
        """Ring a core's doorbell with nothing new on its ring (it re-reads the queue table)."""
        os.eventfd_write(self.doorbells[core], 1)

    def invalidations_done(self, targets: list[int], done: list[int] | None = None) -> bool:
        """Whether every core has carried out the invalidations counted in ``targets``
        (``invalidations_pushed`` and those still queued, taken at one moment); ``done``:
        the cores' INVAL_DONE as ``invalidation_counts`` read them (else read now)."""
        if done is None:
            done = self.invalidation_counts()
        return all((count - target) & 0xFFFFFFFF < 1 << 31 for count, target in zip(done, targets))

    def invalidation_counts(self) -> list[int]:
        """Each core's INVAL_DONE now."""
        return [self.reg(core, regs.INVAL_DONE) for core in range(self.num_cores)]

    # ---- interrupts and completions ----
    def ack_irq(self) -> None:
        try:
            os.eventfd_read(self.irq_fd)
        except BlockingIOError:
            pass

    def completions(self) -> list[Completion]:
        """Drain every core's completion queue."""
        done = []
        read32 = self.regs.read32
        for core, bank in enumerate(self.banks):
            head, tail = read32(bank + regs.CQ_HEAD), read32(bank + regs.CQ_TAIL)
            if head == tail:
                continue
            cq = self.cqs[core]
            while head != tail:
                job_id, status, unit, cycles, device_ns, fault_iova, task_index, _, exec_ns = \
                    ring.COMPLETION_STRUCT.unpack_from(cq, head * ring.COMPLETION_STRUCT.size)
                done.append(Completion(job_id, status, unit, cycles, device_ns, exec_ns, fault_iova, task_index))
                head = ring.ring_next(head, self.entries)
            self.regs.write32(bank + regs.CQ_HEAD, head)
        return done

    def profile_records(self) -> list[ProfileRecord]:
        """Drain every core's profile queue (read after ``completions``: a job's records are
        published before its completion)."""
        records = []
        size = ring.PROFILE_RECORD_STRUCT.size
        for core, bank in enumerate(self.banks):
            head, tail = self.regs.read32(bank + regs.PQ_HEAD), self.regs.read32(bank + regs.PQ_TAIL)
            if head == tail:
                continue
            pq = self.pqs[core]
            while head != tail:
                records.append(ProfileRecord(*ring.PROFILE_RECORD_STRUCT.unpack_from(pq, head * size)))
                head = (head + 1) % ring.PROFILE_ENTRIES
            self.regs.write32(bank + regs.PQ_HEAD, head)
        return records

    def profile_dropped(self) -> int:
        """Profile records the cores dropped so far (their queues were full)."""
        return sum(self.reg(core, regs.PQ_DROPPED) for core in range(self.num_cores))

    # ---- reset ----
    def request_reset(self) -> int:
        """Ask the chip for a full reset; returns the request number to wait for."""
        request = (self.regs.read32(regs.RESET_REQ) + 1) & 0xFFFFFFFF
        self.regs.write32(regs.RESET_REQ, request)
        os.eventfd_write(self.control_fd, 1)       # the chip sleeps until told
        return request

    def reset_done(self, request: int) -> bool:
        return self.regs.read32(regs.RESET_ACK) == request

    def after_reset(self) -> None:
        """The chip emptied its rings (head caught up with our tail): nothing to redo."""
        self.tails = [self.reg(c, regs.RING_TAIL) for c in range(self.num_cores)]
        self._restarts_seen = [self.reg(c, regs.CORE_RESTARTS) for c in range(self.num_cores)]
        self.invalidations_pushed = [self.reg(c, regs.INVAL_DONE) for c in range(self.num_cores)]
        self.ack_irq()

    def core_restarts(self) -> int:
        """How many times the chip restarted a core (it died or hung) since the last call.

        The job such a core was running has already failed through its completion queue."""
        new = 0
        for core in range(self.num_cores):
            count = self.reg(core, regs.CORE_RESTARTS)
            new += (count - self._restarts_seen[core]) & 0xFFFFFFFF
            self._restarts_seen[core] = count
        return new

    # ---- counters ----
    def running(self) -> list[tuple[int, int]]:
        """(job id, ns it has run so far) of the job each busy core is executing."""
        now = time.monotonic_ns()
        jobs = []
        for core in range(self.num_cores):
            job_id = self.reg64(core, regs.CURRENT_JOB)
            if job_id:
                jobs.append((job_id, max(0, now - self.reg64(core, regs.JOB_START_NS))))
        return jobs

    def busy_ns(self) -> int:
        """Wall time the cores have spent on jobs, including the jobs running now."""
        now = time.monotonic_ns()
        total = 0
        for core in range(self.num_cores):
            total += self.reg64(core, regs.BUSY_NS)
            if self.reg64(core, regs.CURRENT_JOB):
                total += max(0, now - self.reg64(core, regs.JOB_START_NS))
        # A job finishing between the two reads above can make one sample short: never go back.
        self._busy_reported = max(self._busy_reported, total)
        return self._busy_reported


def spawn_keeping_loop_free(cmd: list[str], pass_fds: list[int]) -> subprocess.Popen:
    """Start ``cmd`` with ``pass_fds`` inherited, without ever waiting on our own mount.

    ``Popen(pass_fds=...)`` closes every other descriptor in the child before exec, while
    the parent (the FUSE loop) waits for that exec. A descriptor of our own node or sysfs
    tree open at that moment (the udev thread reading an attribute) makes that close a
    FLUSH request only the waiting loop could answer: a deadlock, seen when the chip was
    restarted during a uevent. With ``close_fds=False`` Popen uses posix_spawn, and the
    kernel closes the close-on-exec descriptors (all but these: PEP 446) after it has
    released the parent, so the loop is free to answer."""
    for fd in pass_fds:
        os.set_inheritable(fd, True)
    try:
        return subprocess.Popen(cmd, close_fds=False, stdin=subprocess.DEVNULL)
    finally:
        for fd in pass_fds:
            os.set_inheritable(fd, False)
