"""One compute core: consumes its command ring, runs jobs, posts completions.

The core sleeps on its doorbell line (an eventfd the KMD writes after moving
RING_TAIL), runs every entry between RING_HEAD and RING_TAIL, writes a
completion for each job to its completion queue, advances RING_HEAD and raises
the interrupt line (an eventfd shared by all cores).  The chip's top-level
process restarts a core whose process died or hung (``chip.Chip.watchdog``), and
replaces one that grew and holds nothing any more (``firmware_sim.recycling``).
"""
from __future__ import annotations

import errno
import mmap
import os
import select
import time
from pathlib import Path

from firmware_sim import caches, queue_service
from firmware_sim.dma import DmaEngine
from firmware_sim.executor import JobResult, TaskHook, failed_step_result, run_job
from firmware_sim.idle_poll import IdlePoll
from firmware_sim.kernels.warm_up import warm_up
from firmware_sim.recycling import RETIRED, Recycling, Succession
from firmware_sim.timing import HardwareProfile
from firmware_sim.user_queues import JOBS_PER_TURN, ServedQueue, UserQueues, abort_status
from firmware_sim.wakeups import WatchdogArm
from npu_hw import memory, queues, regs, ring
from npu_hw.memory import map_file

# While the core serves user queues it sleeps at most this long. Only a safety net: the
# polling flag's protocol loses no wake-up (spec.queues), so nothing should ever wait on it.
QUEUE_SLEEP_MS = 1000
# NPU_NATIVE_QUEUES=0: the Python service loop alone (the reference the C loop is tested against).
NATIVE_SERVICE = os.environ.get("NPU_NATIVE_QUEUES", "1") != "0"


class Core:
    """The state of one core, as seen from inside it."""

    def __init__(self, bus: Path, core: int, doorbell_fd: int, irq_fd: int, profile: HardwareProfile,
                 recycle_kb: int = -1, succession: Succession | None = None, watch: WatchdogArm | None = None,
                 peers: list[int] | None = None):
        self.watch = watch      # the chip's watchdog, woken when a job starts while it sleeps
        self.peers = peers      # every core's kernel doorbell (the lead calls helpers in), or None
        self.core, self.doorbell_fd, self.irq_fd, self.profile = core, doorbell_fd, irq_fd, profile
        self._regs_map = map_file(memory.regs_path(bus))
        self.regs = regs.RegisterView(self._regs_map)
        self.bank = regs.core_bank(core)
        self.entries = self.regs.read32(regs.RING_ENTRIES)
        self.chip_cores = max(1, self.regs.read32(regs.NUM_CORES))   # what a graph job may be placed on
        self.ring = map_file(memory.ring_path(bus, core))
        self.cq = map_file(memory.cq_path(bus, core))
        self.dma = DmaEngine(bus)
        self.bus = bus
        self.pq: mmap.mmap | bytes | None = None     # the profile queue, mapped at the first profiled job
        self.queues = UserQueues(bus, core, self.regs, self.dma)
        # The queues' jobs in C where it can run them (None: the Python loop alone).
        self.service = queue_service.QueueService.start(self) if NATIVE_SERVICE else None
        self.queues.shared = self.service is not None and self.service.shared
        self.queues_idle = False    # serve_queues' last round (the C loop's) found no job
        self._poller, self._watched = select.poll(), ()     # what sleep() waits on, kept between sleeps
        warm_up()   # each C kernel once (done by the chip before it forked us: then nothing to do)
        self.recycling = Recycling(recycle_kb, core, succession)
        self.recycling.started()

    def reg(self, offset: int) -> int:
        return self.regs.read32(self.bank + offset)

    def set_reg(self, offset: int, value: int) -> None:
        self.regs.write32(self.bank + offset, value)

    def run_forever(self) -> None:
        self.set_reg(regs.CORE_STATE, regs.CORE_IDLE)
        read32, clock = self.regs.read32, time.monotonic_ns
        tail_reg, head_reg = self.bank + regs.RING_TAIL, self.bank + regs.RING_HEAD
        poll = IdlePoll(self.profile.idle_poll_ns)
        idle_since = polled = 0
        while True:
            self.sleep()   # until the KMD or a client rings a doorbell
            if idle_since:
                poll.record(clock() - idle_since, polled)
            self.queues.set_polling(True)
            self.drain_all()
            # Hybrid polling: watch the ring's tail and the queues' tails for a while
            # (adaptive, see idle_poll) before sleeping again, so back-to-back jobs skip the wake-up.
            while True:
                if self.service is not None:
                    # The queues' jobs, the idle poll and the sleep on the doorbells in C until
                    # something needs Python (a job it cannot run, the kernel ring, a table
                    # change, recycling): no Python per job or per wake-up (docs/hardware.md).
                    why = self.service.run(self.queues, self.doorbell_fd, self.recycling.may_sleep_unasked(),
                                           QUEUE_SLEEP_MS)
                    if why != queue_service.ASKS:
                        if why != queue_service.RING:   # a job for Python, where the C loop stopped
                            self.serve_queues(why)
                        self.drain_all()
                        continue
                idle_since = clock()
                polled = poll.window()
                deadline, arrived = idle_since + polled, False
                while self.service is None and clock() < deadline:
                    if read32(tail_reg) != read32(head_reg) or self.queues.has_work():
                        arrived = True
                        break
                    os.sched_yield()   # any runnable host process (the KMD, a client) goes first
                if not arrived:
                    # Clients ring the doorbell from now on; work that came just before is taken first.
                    # The fence: the cleared flags are visible before the tails are read, so a
                    # client that saw a flag still set wrote its tail where this look finds it.
                    # (npu_uq_rest did this already when it asks.)
                    if self.service is None:
                        self.queues.set_polling(False)
                        queues.store_load_fence()
                        if read32(tail_reg) != read32(head_reg) or self.queues.has_work():
                            self.queues.set_polling(True)
                            self.drain_all()
                            continue
                    if self.recycling.at_sleep(self.holds_anything):
                        # Where it would sleep: what comes next rings a doorbell its successor
                        # answers (firmware_sim.recycling).
                        os._exit(RETIRED)
                    break
                poll.record(clock() - idle_since, polled)
                self.drain_all()

    def resume(self) -> None:
        """Start where the previous process of this core left off (a restart, a successor):
        run what its ring and queues hold. A process that died mid-job left HDR_POLLING set,
        so clients wrote entries without ringing: the flags are cleared first (clients ring
        from then on), then the queues are looked at, with the fence of ``run_forever``'s
        way to sleep between the two."""
        self.queues.refresh()
        self.queues.release_claims()
        self.queues.set_polling(False)
        queues.store_load_fence()
        self.drain_all()

    def holds_anything(self) -> bool:
        """Whether any context's state is still here: a page table or buffer mapped, a queue served."""
        return bool(self.queues.served) or self.dma.holds_anything()

    def sleep(self) -> None:
        """Block on the kernel doorbell and the served queues' doorbells, and consume them."""
        self.queues.refresh()
        doorbells = self.queues.doorbells()
        if not doorbells:
            os.read(self.doorbell_fd, 8)
            return
        watched = (self.doorbell_fd, *doorbells)
        if watched != self._watched:          # the served queues changed: a new poll set
            self._poller, self._watched = select.poll(), watched
            for fd in watched:
                self._poller.register(fd, select.POLLIN)
        for fd, _ in self._poller.poll(QUEUE_SLEEP_MS):
            if fd == self.doorbell_fd:
                os.read(fd, 8)
            else:
                drain_pipe(fd)

    def drain_all(self) -> None:
        """Run everything there is, in rounds: up to JOBS_PER_TURN jobs of the kernel ring,
        then up to JOBS_PER_TURN of each user queue by priority (the driver keeps refilling
        its ring: draining it whole first would starve the queues)."""
        while True:
            ran = self.drain_ring(JOBS_PER_TURN)
            self.queues.refresh()
            ran += self.serve_queues()
            # The C loop's last round found nothing: another one here would find nothing either.
            if (not ran or self.queues_idle) and self.reg(regs.RING_HEAD) == self.reg(regs.RING_TAIL):
                return

    def serve_queues(self, why: int | None = None) -> int:
        """Rounds over the served queues, by priority, at most JOBS_PER_TURN jobs each;
        ring-control entries (invalidations) are carried out between any two jobs. The C
        loop (``queue_service``) runs the jobs it can, this one the others; without it, one
        round in Python. ``why``: the C loop stopped already (``QueueService.run``), for this."""
        service = self.service
        self.queues_idle = False
        if service is None:
            return self.serve_round()
        ran = 0
        while True:
            if why is None:
                why = service.serve(self.queues)
                ran += service.ran
            stopped, why = why, None
            if stopped in (queue_service.IDLE, queue_service.RING):
                self.queues_idle = stopped == queue_service.IDLE
                return ran
            if stopped != queue_service.BETWEEN:
                # The C loop left the job of the queue at its position to Python, the queue claimed.
                q = service.current(self.queues)
                if stopped == queue_service.FAILED:
                    self.finish_failed_native_job(q, *service.failed_job())
                else:
                    entry = self.queues.next_entry(q)
                    if entry is None:          # stopped (a garbled tail) or emptied since
                        service.release(q)
                        service.next_queue()
                        continue
                    self.run_user_job(q, *entry)
                    service.remember(q, entry[1], entry[2])
                service.release(q)
                service.next_turn()
                ran += 1
            self.drain_ring(0)
            if self.queues.refresh():     # the table changed: start a new round
                return ran

    def serve_round(self) -> int:
        """One round over the served queues in Python, by priority, at most JOBS_PER_TURN
        jobs each; ring-control entries (invalidations) are carried out between any two jobs."""
        ran = 0
        for q in list(self.queues.served):
            for _ in range(JOBS_PER_TURN):
                entry = self.queues.next_entry(q)
                if entry is None:
                    break
                self.run_user_job(q, *entry)
                ran += 1
                self.drain_ring(0)
                if self.queues.refresh():     # the table changed: start a new round
                    return ran
        if ran:
            self.queues.turn()
        return ran

    def run_user_job(self, q: ServedQueue, seq: int, cmd_iova: int, cmd_size: int, timeout_ms: int,
                     flags: int) -> None:
        """Run a user-queue job and post its completion in its queue; the same register order
        as ``run_job_entry`` (UQ_SLOT / UQ_SEQ name the job for the watchdog), no interrupt.
        Registers through the word views: a NOP's whole cost is this bookkeeping."""
        u32, u64 = self.regs.words()
        bank = self.bank
        timeout_ms = regs.job_timeout_ms(timeout_ms, int(u32[regs.WATCHDOG_MS >> 2]), q.timeout_cap_ms)
        job_id = queues.user_job_id(q.slot, seq)
        started = time.monotonic_ns()
        u64[(bank + regs.JOB_START_NS) >> 3] = started
        u32[(bank + regs.JOB_TIMEOUT_MS) >> 2] = timeout_ms & 0xFFFFFFFF
        u32[(bank + regs.UQ_SLOT) >> 2] = q.slot + 1
        u64[(bank + regs.UQ_SEQ) >> 3] = seq
        u64[(bank + regs.CURRENT_JOB) >> 3] = job_id
        u32[(bank + regs.CORE_STATE) >> 2] = regs.CORE_BUSY
        if self.watch is not None:
            self.watch.job_started()
        wanted = flags == queues.ENTRY_PROFILE
        tasks: list[tuple[int, int, int, int, int, int]] | None = [] if wanted or self.queues.traced(q) else None
        if flags & ~queues.ENTRY_FLAGS:
            result = JobResult(status=-errno.EINVAL)
        else:
            result = self.execute(q.asid, cmd_iova, cmd_size,
                                  (lambda *task: tasks.append(task)) if tasks is not None else None)
        self.end_user_job(q, seq, result, started, timeout_ms, tasks, wanted)

    def finish_failed_native_job(self, q: ServedQueue, seq: int, started: int, timeout_ms: int, status: int,
                                 index: int) -> None:
        """Complete the job the C loop left running when its C step ``index`` failed with ``status``."""
        self.end_user_job(q, seq, failed_step_result(status, index, q.asid), started, timeout_ms)

    def end_user_job(self, q: ServedQueue, seq: int, result: JobResult, started: int, timeout_ms: int,
                     tasks: list[tuple[int, int, int, int, int, int]] | None = None, wanted: bool = False) -> None:
        """The end of a user-queue job: pacing, its profile, its completion, the registers."""
        u32, u64 = self.regs.words()
        bank = self.bank
        executed = time.monotonic_ns()
        if u32[regs.PACING >> 2] & regs.PACING_ON:
            self.pace(result, started, timeout_ms)
        result.exec_ns = exec_ns = time.monotonic_ns() - started
        if tasks is not None:
            self.record_profile(queues.user_job_id(q.slot, seq), tasks, started, executed, result,
                                ring.PROFILE_QUEUE_JOB if wanted else ring.PROFILE_JOB)
        cycles = result.cycles
        self.queues.post(q, seq, result.status, cycles, self.profile.nanoseconds(cycles) if cycles else 0,
                         result.fault_iova, exec_ns, result.failed_task)
        u64[(bank + regs.CURRENT_JOB) >> 3] = 0
        u32[(bank + regs.UQ_SLOT) >> 2] = 0
        u64[(bank + regs.BUSY_NS) >> 3] += exec_ns
        u64[(bank + regs.BUSY_CYCLES) >> 3] += cycles
        u32[(bank + regs.CORE_STATE) >> 2] = regs.CORE_IDLE

    def finish_aborted_user_job(self) -> None:
        """Post the completion of the user-queue job the watchdog failed (the previous process
        of this core died or hung in it), in its own queue, at most once."""
        slot = self.reg(regs.UQ_SLOT) - 1
        if slot < 0:
            return
        seq = self.regs.read64(self.bank + regs.UQ_SEQ)
        status = abort_status(self.regs, self.bank)
        self.queues.refresh()
        q = self.queues.find(slot)
        if q is not None and q.done < seq:
            self.queues.post(q, seq, status, 0, 0, 0, 0)
        self.set_reg(regs.UQ_ABORT_STATUS, 0)
        self.set_reg(regs.UQ_SLOT, 0)

    def drain_ring(self, max_jobs: int | None = None) -> int:
        """Carry out the ring's entries, stopping before the job past ``max_jobs`` (None: all);
        the number of jobs run."""
        head = self.reg(regs.RING_HEAD)
        ran = 0
        while head != self.reg(regs.RING_TAIL):
            opcode, asid, job_id, cmd_iova, cmd_size, timeout_ms, bo_id, flags = \
                ring.RING_ENTRY_STRUCT.unpack_from(self.ring, head * ring.RING_ENTRY_STRUCT.size)
            following = ring.ring_next(head, self.entries)
            if opcode == ring.OP_JOB:
                if max_jobs is not None and ran >= max_jobs:
                    break
                self.run_job_entry(job_id, asid, cmd_iova, cmd_size, timeout_ms, following, flags)
                ran += 1
            else:
                if opcode == ring.OP_INVALIDATE:
                    caches.invalidate(self.dma, asid, bo_id)
                    if self.service is not None:
                        self.service.release_stale()     # the plans it took may be gone: their views too
                    if not bo_id:
                        self.recycling.context_closed()
                self.set_reg(regs.RING_HEAD, following)
                if opcode == ring.OP_INVALIDATE:
                    # After RING_HEAD: a KMD that sees the count knows no job started before
                    # the invalidation still runs (it gives freed memory back then).
                    self.set_reg(regs.INVAL_DONE, self.reg(regs.INVAL_DONE) + 1)
            head = following
        return ran

    def run_job_entry(self, job_id: int, asid: int, cmd_iova: int, cmd_size: int, timeout_ms: int,
                      following: int, flags: int = 0) -> None:
        """Run the job at RING_HEAD, post its completion and move RING_HEAD to ``following``.

        The order is what lets the chip's watchdog recover from this process dying at any
        point without losing or skipping a job: (1) JOB_START_NS and JOB_TIMEOUT_MS, then
        CURRENT_JOB; (2) the job runs; (3) the completion, then CQ_TAIL; (4) RING_HEAD; (5)
        CURRENT_JOB = 0.  Dying before (1) leaves the entry at RING_HEAD for the restarted
        core to run.  Dying between (1) and (5), the watchdog finds CURRENT_JOB set: it posts
        the job's completion unless the last one posted is already that job's (died after
        (3)), and steps RING_HEAD past the entry only if the entry at RING_HEAD is still
        that job (died before (4)); the job itself never runs again."""
        bank = self.bank
        started = time.monotonic_ns()
        self.regs.write64(bank + regs.JOB_START_NS, started)
        self.set_reg(regs.JOB_TIMEOUT_MS, timeout_ms)
        self.regs.write64(bank + regs.CURRENT_JOB, job_id)
        self.set_reg(regs.CORE_STATE, regs.CORE_BUSY)
        if self.watch is not None:
            self.watch.job_started()
        tasks: list[tuple[int, int, int, int, int, int]] | None = [] if flags & ring.RING_FLAG_PROFILE else None
        result = self.execute(asid, cmd_iova, cmd_size, (lambda *task: tasks.append(task)) if tasks is not None
                              else None)
        executed = time.monotonic_ns()
        self.pace(result, started, regs.job_timeout_ms(timeout_ms, self.regs.read32(regs.WATCHDOG_MS)))
        result.exec_ns = time.monotonic_ns() - started
        if tasks is not None:
            self.record_profile(job_id, tasks, started, executed, result)
        self.post(result, job_id)
        self.set_reg(regs.RING_HEAD, following)
        # Clear CURRENT_JOB before adding to BUSY_NS: a reader in between sees the job
        # neither running nor counted (short, and the KMD never reports less than before)
        # rather than both (counted twice).
        self.regs.write64(bank + regs.CURRENT_JOB, 0)
        self.regs.write64(bank + regs.BUSY_NS, self.regs.read64(bank + regs.BUSY_NS) + result.exec_ns)
        self.regs.write64(bank + regs.BUSY_CYCLES, self.regs.read64(bank + regs.BUSY_CYCLES) + result.cycles)
        self.regs.write64(bank + regs.JOBS_DONE, self.regs.read64(bank + regs.JOBS_DONE) + 1)
        self.set_reg(regs.CORE_STATE, regs.CORE_IDLE)
        raise_irq(self.regs, bank, self.irq_fd, completion_cause(result.status))

    def pace(self, result: JobResult, started: int, timeout_ms: int) -> None:
        """Pacing: hold a job that succeeded until its modeled device time has passed."""
        if self.regs.read32(regs.PACING) & regs.PACING_ON and result.status == 0:
            modeled_ns = self.profile.nanoseconds(result.cycles)
            if modeled_ns >= timeout_ms * 1_000_000:
                # The modeled chip would run past the job's timeout: fail it now rather than
                # sleep into the watchdog, which would restart the core for it.
                result.status = -errno.ETIMEDOUT
            else:
                pace_until(started + modeled_ns)

    def execute(self, asid: int, cmd_iova: int, cmd_size: int, on_task: TaskHook | None = None) -> JobResult:
        """Run one job's command buffer, applying the fault injection bits set now."""
        faults = self.regs.read32(regs.FAULT_INJECT)
        if faults & regs.FAULT_HANG:
            self.set_reg(regs.CORE_STATE, regs.CORE_HUNG)   # readable: it took the fault in this job
            while True:              # a hung core: only the watchdog's reset ends this
                time.sleep(1)
        self.dma.inject_bus_error = bool(faults & regs.FAULT_DMA_ERROR)
        result = run_job(self.dma, asid, cmd_iova, cmd_size, self.profile,
                         inject_internal_error=bool(faults & regs.FAULT_INTERNAL), on_task=on_task,
                         replay=not faults, cores=self.chip_cores)
        if faults & regs.FAULT_BIT_FLIP and result.status == 0:
            self.dma.flip_last_written_bit()
        return result

    def record_profile(self, job_id: int, tasks: list[tuple[int, int, int, int, int, int]], started: int,
                       executed: int, result: JobResult, kind: int = ring.PROFILE_JOB) -> None:
        """Publish a profiled job's records (one per task, then the job's: its execution without
        any pacing) in the profile queue, before its completion; what does not fit is dropped
        (but a user-queue job's own record, while one slot is free)."""
        if self.pq is None:
            try:
                self.pq = map_file(memory.profile_queue_path(self.bus, self.core))
            except OSError:
                self.pq = b""              # a chip without profile queues: every record is dropped
        capacity = len(self.pq) // ring.PROFILE_RECORD_STRUCT.size
        head, tail = self.reg(regs.PQ_HEAD), self.reg(regs.PQ_TAIL)
        free = (capacity - 1 - (tail - head) % capacity) if capacity else 0
        if job_id & queues.USER_JOB_BIT:
            # Queue jobs raise no interrupt (the driver drains their records only every
            # 100 ms): they leave half the queue to the kernel ring's jobs, so that one
            # client's profiled queue jobs cannot take every other context's profiles.
            free = max(0, free - capacity // 2)
        # A task's core: the one it was placed on, counted from this one (task_graph).
        records = [(job_id, index, opcode, ring.PROFILE_TASK, (self.core + tile) % self.chip_cores, start, end, cycles)
                   for index, opcode, start, end, cycles, tile in tasks]
        records.append((job_id, len(tasks), -result.status & 0xFFFF, kind, self.core, started, executed,
                        result.cycles))
        if len(records) > free:
            if job_id & queues.USER_JOB_BIT and free:
                # A queue job's profile has no completion through the driver to stand in for
                # its job record: that one goes alone (its task count tells the tasks are missing).
                self.set_reg(regs.PQ_DROPPED, self.reg(regs.PQ_DROPPED) + len(tasks))
                records = records[-1:]
            else:
                self.set_reg(regs.PQ_DROPPED, self.reg(regs.PQ_DROPPED) + len(records))
                return
        for record in records:
            ring.PROFILE_RECORD_STRUCT.pack_into(self.pq, tail * ring.PROFILE_RECORD_STRUCT.size, *record)
            tail = (tail + 1) % capacity
        self.set_reg(regs.PQ_TAIL, tail)

    def post(self, result: JobResult, job_id: int) -> None:
        """Write the completion and publish it (CQ_TAIL); the interrupt comes later."""
        while ring.ring_full(self.reg(regs.CQ_HEAD), self.reg(regs.CQ_TAIL), self.entries):
            time.sleep(0.0002)  # the KMD keeps fewer jobs in flight than CQ slots; defensive only
        tail = self.reg(regs.CQ_TAIL)
        write_completion(self.cq, tail, job_id, self.core, result, self.profile)
        self.set_reg(regs.CQ_TAIL, ring.ring_next(tail, self.entries))


def drain_pipe(fd: int) -> None:
    """Empty a queue's doorbell pipe (the chip's non-blocking read end: no client shares it)."""
    try:
        while len(os.read(fd, 65536)) == 65536:
            pass
    except BlockingIOError:
        pass


def pace_until(deadline_ns: int) -> None:
    """Pacing: hold the job until the modeled chip would have finished it (never earlier).
    The core sleeps rather than spins, so paced cores leave the host's CPUs to the others."""
    while (left := deadline_ns - time.monotonic_ns()) > 0:
        time.sleep(left / 1e9)


def completion_cause(status: int) -> int:
    """The interrupt cause for a job that ended with ``status`` (0 or -errno)."""
    if status == 0:
        return regs.IRQ_JOB_DONE
    return regs.IRQ_MMU_FAULT if status == -errno.EFAULT else regs.IRQ_JOB_ERROR


def write_completion(cq, slot: int, job_id: int, core: int, result: JobResult, profile: HardwareProfile) -> None:
    ring.COMPLETION_STRUCT.pack_into(cq, slot * ring.COMPLETION_STRUCT.size, job_id, result.status, core,
                                     result.cycles, profile.nanoseconds(result.cycles), result.fault_iova,
                                     result.task_index, 0, result.exec_ns)


def raise_irq(view: regs.RegisterView, bank: int, irq_fd: int, cause: int) -> None:
    view.write32(bank + regs.IRQ_STATUS, cause)
    view.write32(bank + regs.IRQ_COUNT, view.read32(bank + regs.IRQ_COUNT) + 1)
    if not view.read32(regs.FAULT_INJECT) & regs.FAULT_LOST_IRQ:
        os.eventfd_write(irq_fd, 1)
