"""The chip's top level: brings up the register file, starts one process per
core, and runs the watchdog and the reset logic.

The watchdog reaps each core's process as it exits (its pidfd wakes the main process)
and, only while a job runs, times it every WATCHDOG_PERIOD_S (``firmware_sim.wakeups``:
an idle chip sleeps): a core that died (of any cause: a vanished page under a job's
buffer is SIGBUS) or whose job ran past its timeout is restarted, the job it was running fails (EFAULT for SIGBUS,
ETIMEDOUT for a timeout, else EIO), the next ones run, and CORE_RESTARTS with the
IRQ_CORE_RESTART interrupt tell the driver.

A job's timeout counts the chip's time, which is the CPU time its core's process gets (as a
virtual machine's clock stops while its vCPU is not scheduled), not the host's wall time: a
loaded host makes a job take longer, never time out (``overdue_job``).

It is started by the platform (the KMD's probe) as ``python -m firmware_sim``
with the bus directory, the doorbell eventfds (one per core), the interrupt eventfd and
the control eventfd (written after RESET_REQ); it never talks to the KMD any other way.

The main process runs the C kernels and the self-test once (``kernels.warm_up``) and
freezes its heap (``gc.freeze``) before it forks the cores: they share those pages
instead of each faulting and dirtying its own (a core's private memory 8 MiB -> 2.4).
"""
from __future__ import annotations

import argparse
import errno
import gc
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from firmware_sim.core import Core, completion_cause, raise_irq, write_completion
from firmware_sim.executor import JobResult
from firmware_sim.kernels.warm_up import warm_up
from firmware_sim.priority import default_core_nice, raise_core
from firmware_sim.recycling import RETIRED, Succession, default_growth_kb
from firmware_sim.startup import die_with_parent
from firmware_sim.timing import HardwareProfile
from firmware_sim.wakeups import Wakeups, WatchdogArm
from npu_hw import memory, profiles, queues, regs, ring
from npu_hw.memory import map_file

WATCHDOG_PERIOD_S = 0.02     # how often a running job is timed (never while no job runs)
CPUCLOCK_SCHED = 2           # a process's CPU clock id is (~pid << 3) | CPUCLOCK_SCHED (Linux)


CORE_CODE_BYTES = 1 << 30      # a core's interpreter, numpy, the C kernels and their libraries
CORE_WORKING_BYTES = 2 << 30   # a task's scratch memory beyond the device memory it maps


def core_address_space(device_memory: int) -> int:
    """The address space a core may use (its RLIMIT_AS; 0: no limit, the memory size unknown).

    A core maps device memory (at most all of it) and takes scratch memory for its
    kernels, which size it from the operands: a descriptor over large buffers could ask
    for many times the device's memory of the host's. Past the limit an allocation fails
    and the job with it (EINVAL: more working memory than the chip has, units._guarded)."""
    return device_memory + CORE_CODE_BYTES + CORE_WORKING_BYTES if device_memory > 0 else 0


class Chip:
    def __init__(self, bus: Path, doorbell_fds: list[int], irq_fd: int, profile: HardwareProfile,
                 ring_entries: int, device_memory: int = 0, recycle_kb: int = -1, control_fd: int = -1,
                 core_nice: int = 0):
        self.bus, self.doorbell_fds, self.irq_fd, self.profile = bus, doorbell_fds, irq_fd, profile
        self.core_nice = core_nice        # each core process's nice, where permitted (firmware_sim.priority)
        self.control_fd = control_fd      # the driver writes it after RESET_REQ (-1: none, poll the register)
        self.watch = WatchdogArm()        # before any core is forked: they all share it
        self._busy_seen = -1              # the cores' BUSY_NS at the last tick (next_tick)
        self.recycle_kb = recycle_kb      # a core that grew this much is succeeded when empty (-1: never)
        self.succession = Succession(len(doorbell_fds)) if recycle_kb >= 0 else None
        # Per core, a successor warming up: (its pid, the pipe end that lets it start).
        self.successors: list[tuple[int, int] | None] = [None] * len(doorbell_fds)
        self.address_space = core_address_space(device_memory)
        self._regs_map = map_file(memory.regs_path(bus))
        self.regs = regs.RegisterView(self._regs_map)
        self.num_cores = len(doorbell_fds)
        self.ring_entries = ring_entries
        self.pids: list[int] = [0] * self.num_cores
        self.died_before_entry: list[int | None] = [None] * self.num_cores   # see drop_fatal_entry
        # Per core, the job it runs as first seen: (job id, JOB_START_NS, core pid, its CPU clock then).
        self.job_clocks: list[tuple[int, int, int, int] | None] = [None] * self.num_cores
        self.rings = [np.frombuffer(map_file(memory.ring_path(bus, core)), ring.RING_ENTRY, count=ring_entries)
                      for core in range(self.num_cores)]
        self.cqs = [map_file(memory.cq_path(bus, core)) for core in range(self.num_cores)]
        try:
            self._qtab_map = map_file(memory.queue_table_path(bus))
            self.qtab: regs.RegisterView | None = regs.RegisterView(self._qtab_map)
        except OSError:
            self.qtab = None           # started without a queue table: no user queues

    def power_on(self) -> None:
        r = self.regs
        r.write32(regs.HW_VERSION, regs.HW_VERSION_VALUE)
        r.write32(regs.NUM_CORES, self.num_cores)
        r.write32(regs.CLOCK_MHZ, self.profile.clock_mhz)
        r.write32(regs.RING_ENTRIES, self.ring_entries)
        r.write32(regs.PAGE_SHIFT, 12)
        r.write32(regs.MACS_PER_CYCLE, self.profile.macs_per_cycle)
        r.write32(regs.DMA_BYTES_PER_CYCLE, self.profile.dma_bytes_per_cycle)
        r.write32(regs.TASK_OVERHEAD_CYCLES, self.profile.task_overhead_cycles)
        r.write32(regs.SRAM_KB, self.profile.sram_bytes >> 10)
        r.write32(regs.PROFILE_ID, self.profile.profile_id)
        r.write32(regs.RESET_ACK, r.read32(regs.RESET_REQ))
        for core in range(self.num_cores):
            r.write32(regs.core_bank(core) + regs.CORE_RESTARTS, 0)
            self.start_core(core)
        r.write32(regs.ID, regs.DEVICE_ID_VALUE)
        r.write32(regs.STATUS, regs.STATUS_READY)

    def start_core(self, core: int) -> None:
        """Start ``core``'s process: its successor if one is ready or warming up, else a new one."""
        successor = self.successors[core]
        if successor is not None:
            self.successors[core] = None
            pid, go = successor
            assert self.succession is not None
            self.succession.clear(core)         # before it runs: it is no old core's successor
            try:
                os.write(go, b"g")
                self.pids[core] = pid
                return
            except BrokenPipeError:             # it died warming up: reap it, start a new core
                os.waitpid(pid, 0)
            finally:
                os.close(go)
        self.pids[core] = self._fork_core(core, None)

    def start_successor(self, core: int) -> None:
        """Fork a successor for ``core``, which asked for one (``firmware_sim.recycling``)."""
        if self.successors[core] is not None or not self.pids[core]:
            return
        wait, go = os.pipe()
        try:
            pid = self._fork_core(core, wait, go)
        finally:
            os.close(wait)
        self.successors[core] = (pid, go)

    def stop_successor(self, core: int) -> None:
        successor = self.successors[core]
        if successor is None:
            return
        self.successors[core] = None
        pid, go = successor
        os.close(go)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        assert self.succession is not None
        self.succession.clear(core)

    def reap_successors(self) -> None:
        """Forget a successor that died while warming up (its old core goes on serving)."""
        for core, successor in enumerate(self.successors):
            if successor is None:
                continue
            try:
                pid, _ = os.waitpid(successor[0], os.WNOHANG)
            except ChildProcessError:
                pid = successor[0]
            if pid:
                print(f"chip: the successor of core {core} died while warming up", file=sys.stderr, flush=True)
                self.successors[core] = None
                os.close(successor[1])
                assert self.succession is not None
                self.succession.clear(core)

    def _fork_core(self, core: int, wait: int | None, go: int = -1) -> int:
        """A core's process; with ``wait``, a successor: it warms up, announces itself and
        touches the ring only once the main process writes to that pipe (``go``, its other end)."""
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                if go >= 0:
                    os.close(go)
                die_with_parent(parent)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a dying core is recovered, not dumped
                raise_core(self.core_nice)
                if self.address_space:
                    resource.setrlimit(resource.RLIMIT_AS, (self.address_space, self.address_space))
                profile_path = os.environ.get("NPU_PROFILE_CHIP")  # developer aid: cProfile each core
                unit = Core(self.bus, core, self.doorbell_fds[core], self.irq_fd, self.profile,
                            -1 if profile_path else self.recycle_kb, self.succession, self.watch,
                            self.doorbell_fds)
                if wait is not None:
                    assert self.succession is not None
                    self.succession.announce(core, self.doorbell_fds[core])
                    if os.read(wait, 1) != b"g":
                        os._exit(0)           # not wanted after all (the main process let go)
                    os.close(wait)
                    self.succession.clear(core)   # had it announced itself after being adopted
                unit.finish_aborted_user_job()
                unit.resume()          # ring entries and queue entries written before a reset/respawn
                if profile_path:
                    import cProfile
                    profiler = cProfile.Profile()
                    signal.signal(signal.SIGTERM, lambda *_: (profiler.dump_stats(f"{profile_path}.core{core}"),
                                                               os._exit(0)))
                    profiler.runcall(unit.run_forever)
                unit.run_forever()
            except BaseException:
                print(f"chip: core {core} stopped by an internal error:", file=sys.stderr)
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(1)
        return pid

    def stop_core(self, core: int, graceful: bool = False) -> None:
        self.stop_successor(core)
        pid = self.pids[core]
        if pid:
            try:
                if graceful:
                    os.kill(pid, signal.SIGTERM)
                    time.sleep(0.2)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pids[core] = 0

    def watchdog(self) -> None:
        """Restart every core whose process died, and every core whose job ran past its timeout;
        fork the successors cores asked for and hand each core over to its ready successor."""
        if self.succession is not None:
            self.reap_successors()
            for core in sorted(self.succession.requests()):
                if core < self.num_cores:
                    self.start_successor(core)
        for core in range(self.num_cores):
            died = self.reap_core(core)
            if died is not None and self.retired(core, died):
                self.start_core(core)
                continue
            if died is not None:
                signum = os.WTERMSIG(died) if os.WIFSIGNALED(died) else 0
                # SIGBUS: the memory under a mapped buffer vanished (the job's DMA faulted).
                status = -errno.EFAULT if signum == signal.SIGBUS else -errno.EIO
                how = signal.Signals(signum).name if signum else f"exit status {os.waitstatus_to_exitcode(died)}"
                print(f"chip: core {core} died ({how}): restarting it", file=sys.stderr, flush=True)
                self.drop_fatal_entry(core)
                self.recover_core(core, status)
                continue
            overdue = self.overdue_job(core)
            if overdue:
                self.stop_core(core)
                self.recover_core(core, -errno.ETIMEDOUT, overdue)
            elif self.running_disabled_queue(core):
                # Its queue was disabled (the client is gone, a reset): abort the entry
                # rather than finish it, so the driver gets the queue's memory back now.
                self.stop_core(core)
                self.recover_core(core, -errno.ECANCELED)

    def retired(self, core: int, status: int) -> bool:
        """Whether ``core``'s process exited by retiring (``firmware_sim.recycling``): idle,
        no job of the ring or of a queue in it; then a fresh core is all it needs."""
        bank = regs.core_bank(core)
        return (os.WIFEXITED(status) and os.WEXITSTATUS(status) == RETIRED
                and not self.regs.read64(bank + regs.CURRENT_JOB) and not self.regs.read32(bank + regs.UQ_SLOT))

    def running_disabled_queue(self, core: int) -> bool:
        """Whether ``core`` runs a job of a user queue the driver has disabled."""
        job_id = self.regs.read64(regs.core_bank(core) + regs.CURRENT_JOB)
        if not job_id & queues.USER_JOB_BIT or self.qtab is None:
            return False
        slot = (job_id >> 48) & 0x7FFF
        if slot >= queues.QUEUE_SLOTS:
            return False
        enabled = self.qtab.read32(queues.slot_offset(slot) + queues.Q_CONTROL) & queues.Q_ENABLED
        # Re-read: the registers above belong to this job only if it is still the current one.
        return not enabled and self.regs.read64(regs.core_bank(core) + regs.CURRENT_JOB) == job_id

    def reap_core(self, core: int) -> int | None:
        """The wait status of ``core``'s process if it has exited (reaping it), else None."""
        if not self.pids[core]:
            return None
        try:
            pid, status = os.waitpid(self.pids[core], os.WNOHANG)
        except ChildProcessError:       # reaped elsewhere: treat it as dead of unknown cause
            pid, status = self.pids[core], 1 << 8
        if pid == 0:
            return None
        self.pids[core] = 0
        return status

    def overdue_job(self, core: int) -> int:
        """The id of the job ``core`` has run for longer than its timeout, else 0.

        The timeout counts the CPU time the core's process got since the watchdog first saw
        the job (``core_cpu_ns``), never less than the wall time since it started: on a loaded
        host a job takes longer but is failed only for the work it did. A core hung by
        FAULT_HANG (it sleeps) is timed on the wall clock, and one that used less than its
        timeout of CPU in regs.STUCK_FACTOR timeouts is stuck (stopped, starved): both are failed."""
        bank = regs.core_bank(core)
        job_id = self.regs.read64(bank + regs.CURRENT_JOB)
        if not job_id:
            self.job_clocks[core] = None
            return 0
        started = self.regs.read64(bank + regs.JOB_START_NS)
        pid = self.pids[core]
        cpu_ns = core_cpu_ns(pid)
        key, seen = (job_id, started, pid), self.job_clocks[core]
        if cpu_ns is not None and (seen is None or seen[:3] != key):
            # Before any wall-time check: the CPU the job uses is counted from its first tick.
            seen = self.job_clocks[core] = (*key, cpu_ns)
        timeout_ns = regs.job_timeout_ms(self.regs.read32(bank + regs.JOB_TIMEOUT_MS),
                                         self.regs.read32(regs.WATCHDOG_MS)) * 1_000_000
        wall_ns = time.monotonic_ns() - started
        if wall_ns < timeout_ns:
            return 0
        hung = self.regs.read32(bank + regs.CORE_STATE) == regs.CORE_HUNG
        if not hung and wall_ns < regs.STUCK_FACTOR * timeout_ns:
            # No clock: the process just exited (the next tick reaps it) or is not there.
            used_ns = cpu_ns - seen[3] if cpu_ns is not None and seen is not None and seen[:3] == key else 0
            if used_ns < timeout_ns:
                return 0
        # The registers above belong to this job only if it is still the current one.
        return job_id if self.regs.read64(bank + regs.CURRENT_JOB) == job_id else 0

    def drop_fatal_entry(self, core: int) -> None:
        """A dead core that had not started the entry at RING_HEAD, for the second time in a
        row at that entry, dies of it: fail it (EIO, if a job) and step past it, instead of
        restarting the core into it forever."""
        bank = regs.core_bank(core)
        head = self.regs.read32(bank + regs.RING_HEAD)
        pending = head != self.regs.read32(bank + regs.RING_TAIL) and not self.regs.read64(bank + regs.CURRENT_JOB)
        if not pending or self.died_before_entry[core] != head:
            self.died_before_entry[core] = head if pending else None
            return
        self.died_before_entry[core] = None
        entry = self.rings[core][head]
        print(f"chip: core {core} died twice at ring entry {head} before starting it: dropping it",
              file=sys.stderr, flush=True)
        if int(entry["opcode"]) == ring.OP_JOB:
            tail = self.regs.read32(bank + regs.CQ_TAIL)
            write_completion(self.cqs[core], tail, int(entry["job_id"]), core, JobResult(status=-errno.EIO),
                             self.profile)
            self.regs.write32(bank + regs.CQ_TAIL, ring.ring_next(tail, self.ring_entries))
        self.regs.write32(bank + regs.RING_HEAD, ring.ring_next(head, self.ring_entries))

    def recover_core(self, core: int, status: int, overdue: int = 0) -> None:
        """Finish the registers of a core whose process is gone and start a new one.

        The job it was running (CURRENT_JOB) fails with ``status`` (with ETIMEDOUT only if it
        is the job found ``overdue``: one that started since ends with EIO) and is never run
        again: it may be what killed the core.  See ``Core.run_job_entry`` for the order of
        the core's own writes that this relies on."""
        bank = regs.core_bank(core)
        job_id = self.regs.read64(bank + regs.CURRENT_JOB)
        cause = regs.IRQ_CORE_RESTART
        if job_id & queues.USER_JOB_BIT:
            # A user-queue job: the restarted core posts its completion in its own queue
            # (Core.finish_aborted_user_job); the kernel ring and queue are not the job's.
            if status == -errno.ETIMEDOUT and job_id != overdue:
                status = -errno.EIO
            self.regs.write32(bank + regs.UQ_ABORT_STATUS, status)
            cause |= regs.IRQ_WATCHDOG if status == -errno.ETIMEDOUT else 0
            self.regs.write64(bank + regs.CURRENT_JOB, 0)
        elif job_id:
            if status == -errno.ETIMEDOUT and job_id != overdue:
                status = -errno.EIO
            tail = self.regs.read32(bank + regs.CQ_TAIL)
            last = ring.ring_prev(tail, self.ring_entries)
            posted = ring.COMPLETION_STRUCT.unpack_from(self.cqs[core], last * ring.COMPLETION_STRUCT.size)[0]
            if posted != job_id:
                write_completion(self.cqs[core], tail, job_id, core, JobResult(status=status), self.profile)
                self.regs.write32(bank + regs.CQ_TAIL, ring.ring_next(tail, self.ring_entries))
                cause |= regs.IRQ_WATCHDOG if status == -errno.ETIMEDOUT else completion_cause(status)
            head = self.regs.read32(bank + regs.RING_HEAD)
            if head != self.regs.read32(bank + regs.RING_TAIL) and int(self.rings[core][head]["job_id"]) == job_id:
                self.regs.write32(bank + regs.RING_HEAD, ring.ring_next(head, self.ring_entries))
            self.regs.write64(bank + regs.CURRENT_JOB, 0)
        self.regs.write32(bank + regs.CORE_STATE, regs.CORE_HUNG)
        self.regs.write32(bank + regs.CORE_RESTARTS, self.regs.read32(bank + regs.CORE_RESTARTS) + 1)
        raise_irq(self.regs, bank, self.irq_fd, cause)
        self.start_core(core)

    def reset_if_requested(self) -> None:
        request = self.regs.read32(regs.RESET_REQ)
        if request == self.regs.read32(regs.RESET_ACK):
            return
        for core in range(self.num_cores):
            self.stop_core(core)
            bank = regs.core_bank(core)
            # Empty the ring and the completion queue by moving the chip's own
            # indices up to the KMD's: entries queued before the reset are dropped.
            self.regs.write32(bank + regs.RING_HEAD, self.regs.read32(bank + regs.RING_TAIL))
            self.regs.write32(bank + regs.CQ_TAIL, self.regs.read32(bank + regs.CQ_HEAD))
            self.regs.write32(bank + regs.PQ_TAIL, self.regs.read32(bank + regs.PQ_HEAD))
            self.regs.write32(bank + regs.IRQ_STATUS, 0)
            self.regs.write64(bank + regs.CURRENT_JOB, 0)
            self.regs.write32(bank + regs.UQ_SLOT, 0)          # a user-queue job running is dropped too
            self.regs.write32(bank + regs.UQ_ABORT_STATUS, 0)
            self.regs.write32(bank + regs.CORE_STATE, regs.CORE_IDLE)
            self.died_before_entry[core] = None
        if self.succession is not None:
            self.succession.requests()     # asked by cores that are gone
        for core in range(self.num_cores):
            self.start_core(core)
        self.regs.write32(regs.RESET_ACK, request)

    def children(self) -> set[int]:
        """The live processes of the cores and of their warming successors."""
        return {pid for pid in self.pids if pid} | {s[0] for s in self.successors if s is not None}

    def next_tick(self) -> float | None:
        """How long the main process may sleep: WATCHDOG_PERIOD_S while a job runs or ran
        since the last tick (or with no control line to wake it for a reset), else until
        something wakes it. Staying armed through a stream of short jobs spares a wake-up
        per job (the core's write to the arming line, the main process's turn)."""
        if self.control_fd < 0:
            return WATCHDOG_PERIOD_S
        self.watch.disarm()
        banks = [regs.core_bank(core) for core in range(self.num_cores)]
        busy_ns = sum(self.regs.read64(bank + regs.BUSY_NS) for bank in banks)
        if any(self.regs.read64(bank + regs.CURRENT_JOB) for bank in banks) or busy_ns != self._busy_seen:
            self._busy_seen = busy_ns
            self.watch.arm()
            return WATCHDOG_PERIOD_S
        return None

    def run(self) -> None:
        warm_up(self.bus)    # once, here: the forked cores share its pages (see the module's docstring)
        gc.collect()
        gc.freeze()          # what exists now is never scanned by a core's GC (scanning dirties its pages)
        stopping = []
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)       # SIGTERM ends the sleep below, not only sets the flag
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        fixed = [self.control_fd, self.watch.fd, wake_r]
        if self.succession is not None:
            fixed.append(self.succession.fd)
        wakeups = Wakeups(fixed)
        self.power_on()
        try:
            while not stopping:
                wakeups.follow(self.children())
                for fd in wakeups.wait(self.next_tick()):
                    if fd == wake_r:
                        drain_pipe(wake_r)
                    elif fd in (self.control_fd, self.watch.fd):
                        consume_eventfd(fd)
                    # the succession pipe: watchdog() reads the requests
                self.watchdog()
                self.reset_if_requested()
        finally:
            self.regs.write32(regs.STATUS, 0)
            for core in range(self.num_cores):
                self.stop_core(core, graceful=bool(os.environ.get("NPU_PROFILE_CHIP")))
            wakeups.close()


def core_cpu_ns(pid: int) -> int | None:
    """The CPU time (ns) process ``pid`` has used, all its threads (its clock_getcpuclockid
    clock); None when it has none (no process, or one that just exited)."""
    if pid <= 0:
        return None
    try:
        return time.clock_gettime_ns((~pid << 3) | CPUCLOCK_SCHED)
    except OSError:
        return None


def consume_eventfd(fd: int) -> None:
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m firmware_sim", description="The emulated NPU chip")
    parser.add_argument("--bus", required=True, type=Path, help="directory of the chip's memories")
    parser.add_argument("--doorbell-fds", required=True, help="comma-separated eventfds, one per core")
    parser.add_argument("--irq-fd", required=True, type=int)
    parser.add_argument("--control-fd", type=int, default=-1,
                        help="eventfd the driver writes after a reset request (without it: polled)")
    parser.add_argument("--parent", type=int, default=None,
                        help="the driver's pid: exit at once if it is already gone (firmware_sim.startup)")
    parser.add_argument("--ring-entries", type=int, default=ring.DEFAULT_RING_ENTRIES)
    parser.add_argument("--memory", type=int, default=0,
                        help="device memory in bytes: bounds each core's address space (0: no bound)")
    parser.add_argument("--profile", choices=sorted(profiles.PROFILES), default=profiles.DEFAULT_PROFILE,
                        help="hardware profile: the timing model's clock, MACs/cycle, bandwidth and SRAM")
    parser.add_argument("--core-recycle-kb", type=int, default=None,
                        help="a core whose memory grew this much retires when its last context is gone, "
                             "and a fresh one starts (negative: never; default: $NPU_CORE_RECYCLE_KB or "
                             "firmware_sim.recycling.DEFAULT_GROWTH_KB)")
    parser.add_argument("--idle-poll-us", type=int, default=HardwareProfile.idle_poll_ns // 1000,
                        help="the longest an idle core polls its ring before sleeping (adapted; 0: never)")
    parser.add_argument("--core-nice", type=int, default=default_core_nice(),
                        help="the core processes' nice value where the host permits it (default: $NPU_CORE_NICE or "
                             "firmware_sim.priority.CORE_NICE; 0: the clients' priority)")
    args = parser.parse_args(argv)     # --parent: acted on before the imports (firmware_sim.__main__)
    profile = HardwareProfile.named(args.profile, idle_poll_ns=args.idle_poll_us * 1000)
    doorbells = [int(fd) for fd in args.doorbell_fds.split(",")]
    recycle_kb = default_growth_kb() if args.core_recycle_kb is None else args.core_recycle_kb
    Chip(args.bus, doorbells, args.irq_fd, profile, args.ring_entries, args.memory, recycle_kb,
         args.control_fd, args.core_nice).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
