"""User-mode submission queues, the driver's part (QUEUE_CREATE; docs/abi.md, "User queues").

The driver keeps everything but the job path: it allocates a queue's memory (a buffer of
the context, mapped in its IOMMU space and, through the hand-over socket, in the client),
registers it in a slot of the chip's queue table (npu_hw/queues.py) with the
ASID, priority, timeout cap and serving core, and hands out the queue's doorbell and
completion lines: named FIFOs it makes for this queue alone (``QueueLines``), which the
serving core opens when it takes the slot in. Jobs then go from the client to the core
and back without the driver.

What stays the driver's:
- teardown: QUEUE_DESTROY, a context that closes, a reset, a chip that died disable its
  queues; the queue's memory (and the context's address space) is given back only once the
  cores have acknowledged the disable (each its own UQ_ACKS word: with the chip's shared
  service any core may serve any queue), so no entry runs and no core view remains, and
  QUEUE_DESTROY is answered then (``destroy``);
- memory: MEM_FREE in a context with a live queue unmaps the pages at once (later entries
  fault) but gives them back only once every core has carried out the IOTLB invalidation
  (INVAL_DONE): a user-queue job that started before the free has ended by then
  (``kmd_fuse.deferred_frees``);
- stats: the chip counts each queue's jobs, failures, busy and device time in its slot;
  GET_STATS / GET_INFO add them (``context_counters``, ``device_counters``);
- profiles: a job whose entry asks for NPU_QUEUE_ENTRY_PROFILE is timed by its core; the
  driver keeps its profile in the context for GET_PROFILE, named by its queue fence
  (``take_records``, ``check_profile_fence``).
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
import secrets
from dataclasses import dataclass, field

import trio

from kmd_fuse import profiling, uapi
from kmd_fuse.buffer import BufferObject
from kmd_fuse.context import Context
from kmd_fuse.deferred_frees import DeferredFree, PendingFrees
from kmd_fuse.errors import KmdError
from kmd_fuse.profiling import JobProfile
from npu_hw import memory, queues, regs, ring

log = logging.getLogger("kmd_fuse.user_queues")

RELEASE_POLL_S = 0.001     # how often disables and deferred frees are checked while some wait
TRACE_PENDING_KEPT = 64    # user-queue jobs whose profile records are partly read
_ALL_WAITERS = 0x7FFFFFFF  # a disable wakes every thread asleep on the queue (they all must see the error)



@dataclass(eq=False)
class HandedFd:
    """A descriptor a hand-over token buys besides a buffer's (a queue's pipe ends)."""
    fd: int
    size: int = 0
    freed: bool = False


class QueueLines:
    """One queue's doorbell and completion line: FIFOs in the chip's bus directory (mode
    0600, a random name), made per QUEUE_CREATE and removed at release, so a client that
    held a slot before keeps only the ends of lines no one serves or waits on any more.
    Each end is its own open file: nothing a client does to its end (clear O_NONBLOCK,
    fill the line) can make the chip's end block.

    The driver holds a reader of the doorbell (a client's write end needs one until the
    core opens its own) and a writer of the completion line (to wake the queue's waiters
    when it disables the queue)."""

    def __init__(self, bus, slot: int) -> None:
        self.name = secrets.randbits(64)
        self.paths = [memory.queue_line_path(bus, slot, self.name, line) for line in ("db", "cq")]
        self.fds: list[int] = []
        try:
            for path in self.paths:
                os.mkfifo(path, 0o600)
            flags = os.O_NONBLOCK | os.O_CLOEXEC
            doorbell, completion = self.paths
            self.doorbell_reader = self._open(doorbell, os.O_RDONLY | flags)
            self.doorbell_writer = self._open(doorbell, os.O_WRONLY | flags)         # the client's
            self.completion_reader = self._open(completion, os.O_RDONLY | flags)     # the client's
            self.completion_writer = self._open(completion, os.O_WRONLY | flags)
        except OSError as exc:
            self.close()
            raise KmdError(exc.errno or errno.EIO, f"cannot make the queue's lines: {exc.strerror}") from None

    def _open(self, path, flags: int) -> int:
        fd = os.open(path, flags)
        self.fds.append(fd)
        return fd

    def wake_waiters(self) -> None:
        try:
            os.write(self.completion_writer, b"\x01")
        except (BlockingIOError, BrokenPipeError):     # full: a wake-up is pending; no reader: no waiter
            pass

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@dataclass
class TracedJob:
    """What the trace says of a user-queue job besides its profile (its seq is its fence)."""
    fence: int
    priority: int


@dataclass
class QueueCounters:
    done: int = 0
    failed: int = 0
    busy_ns: int = 0
    device_ns: int = 0


@dataclass(eq=False)
class UserQueue:
    ctx: Context
    slot: int
    bo: BufferObject          # the queue memory (not one of the context's handles)
    mem: mmap.mmap            # the driver's own mapping (the header's error on teardown)
    header: queues.Header
    entries: int
    priority: int
    core: int
    generation: int
    lines: QueueLines
    handed: list = field(default_factory=list)   # what its tokens buy
    disabled: bool = False
    destroy_reply: object | None = None   # the QUEUE_DESTROY (requests.Request) answered once given back


class UserQueues:
    """One device's user queues: its slots, the queues being torn down, the frees deferred."""

    def __init__(self, device) -> None:
        self.device = device
        self.slots: list[UserQueue | None] = [None] * queues.QUEUE_SLOTS
        self.releasing: list[UserQueue] = []
        self.deferred = PendingFrees()
        self.retired = QueueCounters()      # counters of released queues (the device's totals)
        self._polling = False
        self._trace_records: dict[int, list] = {}   # user job id -> its profile records so far

    # ---- creation ----
    def create(self, ctx: Context, entries: int, priority: int) -> UserQueue:
        device, hw = self.device, self.device.hw
        entries = entries or uapi.NPU_QUEUE_DEFAULT_ENTRIES
        if entries < 2 or entries > uapi.NPU_QUEUE_MAX_ENTRIES or entries & (entries - 1):
            raise KmdError(errno.EINVAL, f"{entries} queue entries: a power of two, 2 to "
                                         f"{uapi.NPU_QUEUE_MAX_ENTRIES}")
        if priority > uapi.NPU_PRIO_HIGH:
            raise KmdError(errno.EINVAL, f"priority {priority} out of range")
        if device.resetting:
            raise KmdError(errno.EAGAIN, "the device is resetting")
        slot = self._free_slot()
        device.quotas.add_queue(ctx.uid, len(ctx.queues))
        try:
            lines = QueueLines(hw.bus, slot)
        except KmdError:
            device.quotas.remove_queue(ctx.uid)
            raise
        try:
            # The driver's memory, like the rings: not the device's (the queue limits bound it).
            bo = device.memory.allocate(ctx.space, 0, queues.memory_size(entries), uapi.NPU_MEM_RW,
                                        accounted=False)
        except KmdError:
            lines.close()
            device.quotas.remove_queue(ctx.uid)
            raise
        mem = mmap.mmap(bo.fd, bo.size)
        header = queues.Header(mem)
        header.write32(queues.HDR_MAGIC, queues.QUEUE_MAGIC)
        header.write32(queues.HDR_ENTRIES, entries)
        served = [0] * hw.num_cores
        for held in self.slots:
            if held is not None:
                served[held.core] += 1
        core = min(range(hw.num_cores), key=served.__getitem__)
        base = queues.slot_offset(slot)
        table = hw.qtab
        generation = (table.read32(base + queues.Q_GENERATION) + 1) & 0xFFFFFFFF
        # The slot is disabled and acknowledged: its counters are the driver's to restart.
        for offset in (queues.Q_DONE, queues.Q_FAILED, queues.Q_BUSY_NS, queues.Q_DEVICE_NS, queues.Q_CYCLES):
            table.write64(base + offset, 0)
        table.write32(base + queues.Q_ERROR, 0)
        table.write32(base + queues.Q_CLAIM, 0)
        table.write32(base + queues.Q_ASID, ctx.space.asid)
        table.write64(base + queues.Q_IOVA, bo.iova)
        table.write32(base + queues.Q_ENTRIES, entries)
        table.write32(base + queues.Q_PRIORITY, priority)
        table.write32(base + queues.Q_TIMEOUT_CAP_MS, hw.config.max_job_timeout_ms)
        table.write32(base + queues.Q_CORE, core)
        table.write64(base + queues.Q_LINES, lines.name)
        table.write32(base + queues.Q_GENERATION, generation)
        table.write32(base + queues.Q_CONTROL, queues.Q_ENABLED | (queues.Q_TRACE if device.trace.enabled else 0))
        queue = UserQueue(ctx, slot, bo, mem, header, entries, priority, core, generation, lines)
        # The client gets the doorbell's write end and the completion line's read end.
        queue.handed = [bo, HandedFd(lines.doorbell_writer), HandedFd(lines.completion_reader)]
        self.slots[slot] = queue
        ctx.queues.append(queue)
        device.kick_housekeeping()        # a queue's records come without interrupts
        self._table_changed()
        log.info("context %d: user queue in slot %d (%d entries, priority %d, core %d)", ctx.context_id, slot,
                 entries, priority, core)
        return queue

    def _free_slot(self) -> int:
        """The lowest free slot (a queue's lines are its own: which slot it gets does not matter)."""
        for slot, held in enumerate(self.slots):
            if held is None and not any(q.slot == slot for q in self.releasing):
                return slot
        raise KmdError(errno.ENOSPC, f"the chip serves {queues.QUEUE_SLOTS} user queues at once, all in use")

    def tokens(self, queue: UserQueue) -> list[int]:
        grants = self.device.memory.grants
        return [grants.issue(queue.ctx.space, queue.ctx.uid, handed) for handed in queue.handed]

    def _table_changed(self) -> None:
        """Every core takes the change in and acknowledges it (any may serve the queue)."""
        hw = self.device.hw
        hw.regs.write32(regs.QUEUE_TABLE_GEN, hw.regs.read32(regs.QUEUE_TABLE_GEN) + 1)
        for core in range(hw.num_cores):
            hw.wake(core)

    # ---- teardown ----
    def disable(self, queue: UserQueue, error: int) -> None:
        """Stop the chip serving ``queue`` (its header says ``error``); given back once acknowledged."""
        if queue.disabled:
            return
        queue.disabled = True
        queue.header.set_error(error)
        queue.lines.wake_waiters()
        queue.header.wake_futex(_ALL_WAITERS)   # a client asleep on HDR_DONE (NPU_QUEUE_WAIT_FUTEX) too
        table = self.device.hw.qtab
        base = queues.slot_offset(queue.slot)
        table.write32(base + queues.Q_CONTROL, 0)
        queue.generation = (queue.generation + 1) & 0xFFFFFFFF
        table.write32(base + queues.Q_GENERATION, queue.generation)
        self.slots[queue.slot] = None
        self.releasing.append(queue)
        for handed in queue.handed:
            self.device.memory.grants.forget_buffer(queue.ctx.space, handed)
        self._table_changed()
        self._start_polling()

    def disable_context(self, ctx: Context, error: int) -> None:
        for queue in list(ctx.queues):
            self.disable(queue, error)

    def disable_all(self, error: int) -> None:
        for queue in [q for q in self.slots if q is not None]:
            self.disable(queue, error)

    def live_queue(self, ctx: Context, queue_id: int) -> UserQueue:
        """The context's live queue ``queue_id``: EINVAL past the chip's slots, ENOENT for a
        slot holding no queue of this context (another context's is not told apart)."""
        if queue_id >= queues.QUEUE_SLOTS:
            raise KmdError(errno.EINVAL, f"queue {queue_id}: the chip has {queues.QUEUE_SLOTS} queue slots")
        queue = self.slots[queue_id]
        if queue is None or queue.ctx is not ctx:
            raise KmdError(errno.ENOENT, f"no user queue {queue_id} in this context (never created, destroyed, "
                                         "or stopped by a reset)")
        return queue

    def destroy(self, ctx: Context, queue_id: int, flags: int, request) -> None:
        """QUEUE_DESTROY: disable the queue now, answer ``request`` once it is given back.
        Jobs in flight (the tail past the chip's done) are EBUSY unless the caller cancels them."""
        if flags & ~uapi.NPU_QUEUE_DESTROY_CANCEL:
            raise KmdError(errno.EINVAL, f"unknown QUEUE_DESTROY flags {flags:#x}")
        queue = self.live_queue(ctx, queue_id)
        if not flags & uapi.NPU_QUEUE_DESTROY_CANCEL:
            pending = self.in_flight(queue)
            if pending:
                raise KmdError(errno.EBUSY, f"user queue {queue_id} has {pending} job(s) in flight: wait for them, "
                                            "or destroy with NPU_QUEUE_DESTROY_CANCEL")
        queue.destroy_reply = request
        self.disable(queue, -errno.ECANCELED)
        log.info("context %d: user queue in slot %d destroyed%s", ctx.context_id, queue.slot,
                 " (its jobs cancelled)" if flags else "")

    def in_flight(self, queue: UserQueue) -> int:
        """Jobs of ``queue`` written and not completed, as the chip sees them (0 once it stopped
        the queue: no more entry runs). Whether it stopped is the chip's Q_ERROR: the header's
        error is the client's to write too."""
        base = queues.slot_offset(queue.slot)
        table = self.device.hw.qtab
        if table.read32(base + queues.Q_ERROR):
            return 0
        tail, done = queue.header.read64(queues.HDR_TAIL), table.read64(base + queues.Q_DONE)
        return min(tail - done, queue.entries) if tail > done else 0

    def defer_free(self, ctx: Context, bo: BufferObject) -> DeferredFree:
        """MEM_FREE of a buffer a live user queue may use: unmapped now, given back later."""
        ctx.space.table.unmap(bo.iova, bo.npages)
        self.device.scheduler.invalidate(ctx.space.asid, bo.bo_id)
        self.device.pump()
        hw, scheduler = self.device.hw, self.device.scheduler
        # A user-queue job of the context may run on any core (shared service) outside the ring's
        # order: wait for every core to carry out the invalidation.
        targets = [(hw.invalidations_pushed[core] + len(scheduler.control[core])) & 0xFFFFFFFF
                   for core in range(hw.num_cores)]
        deferred = DeferredFree(ctx, bo, targets)
        self.deferred.add(deferred, hw.invalidation_counts())
        self._start_polling()
        return deferred

    def defer_context_frees(self, ctx: Context, bo: BufferObject) -> DeferredFree:
        """A closing context's buffer: given back once its queues are."""
        deferred = DeferredFree(ctx, bo, None)
        self.deferred.add(deferred, [])
        self._start_polling()
        return deferred

    def after_reset(self) -> None:
        """Every core restarted: none runs a job or holds a view any more. The queues the
        reset stopped are given back now, not when the new cores get round to acknowledging
        their disabled slots: a context at its queue limit makes new queues at once."""
        self.poll(cores_restarted=True)
        self.deferred.reset()
        self.poll()

    def poll(self, cores_restarted: bool = False) -> bool:
        """Give back what is safe to give back now (``cores_restarted``: every queue being
        torn down, as no core holds a view); True while something still waits."""
        device, hw = self.device, self.device.hw
        released = [queue for queue in self.releasing
                    if cores_restarted
                    or all(hw.regs.read32(queues.ack_register(core, queue.slot)) == queue.generation
                           for core in range(hw.num_cores))
                    or hw.process.poll() is not None]
        if released:
            # Their jobs' last profile records, before another queue takes the slot (a record
            # names its job by slot and seq).
            profiling.collect(device, [])
        for queue in released:
            self.releasing.remove(queue)
            self._forget_profiles(queue)
            self._retire_counters(queue)
            if queue.ctx.closed:
                device.memory.release(queue.ctx.space, queue.bo)   # reap invalidates the whole ASID
            else:
                # The context lives on: its cores may hold translations of the queue memory (the
                # serving core's view, a job that pointed into it). Its address range is reused
                # only once every core has dropped them; QUEUE_DESTROY is answered then.
                self.defer_free(queue.ctx, queue.bo).reply_to = queue.destroy_reply
            queue.ctx.queues.remove(queue)
            queue.header.release()
            queue.mem.close()
            queue.lines.close()
            device.quotas.remove_queue(queue.ctx.uid)
            log.info("context %d: user queue in slot %d released", queue.ctx.context_id, queue.slot)
        if self.deferred:
            self._give_back_deferred()
        for ctx in [c for c in device.zombies if not c.queues]:
            device.reap(ctx)
        return bool(self.releasing or self.deferred)

    def _give_back_deferred(self) -> None:
        """Give back the deferred frees now safe and answer their MEM_FREEs (in the order they
        came). The index hands out only what the cores' counts or the queues let go, so a
        round stays short with thousands pending (a user's every buffer, behind a hung core)
        and the daemon keeps serving everyone else."""
        device = self.device
        for deferred in self.deferred.take_ready(device.hw.invalidation_counts()):
            try:
                device.release_buffer(deferred.ctx, deferred.bo)
            except Exception:      # a driver bug: logged; the MEM_FREE is answered all the same
                log.exception("context %d: giving back buffer %d failed", deferred.ctx.context_id,
                              deferred.bo.handle)
            request = deferred.reply_to
            if request is not None and not deferred.ctx.closed:
                deferred.ctx.set_reply(request.reply())     # type: ignore[attr-defined]

    def _start_polling(self) -> None:
        if not self._polling:
            self._polling = True
            self.device.spawn(self._poll_task)

    async def _poll_task(self) -> None:
        try:
            while True:
                try:
                    if not self.poll():
                        return
                except Exception:
                    log.exception("user queue teardown failed")
                await trio.sleep(RELEASE_POLL_S)
        finally:
            self._polling = False

    # ---- the device's trace ----
    def set_tracing(self, on: bool) -> None:
        """Have the chip time every live queue's jobs (in its profile queues) while the trace records."""
        table = self.device.hw.qtab
        for queue in filter(None, self.slots):
            table.write32(queues.slot_offset(queue.slot) + queues.Q_CONTROL,
                          queues.Q_ENABLED | (queues.Q_TRACE if on else 0))

    def take_records(self, records: list) -> None:
        """Take the user-queue jobs whose profile records (npu_hw.ring) arrived: a
        job's PROFILE_JOB record comes last and carries its errno (PROFILE_QUEUE_JOB: its entry
        asked for the profile, which the context keeps for GET_PROFILE under the job's queue
        fence). The trace records them while on."""
        device = self.device
        pending = self._trace_records
        for record in records:
            pending.setdefault(record.job_id, []).append(record)
            if record.kind not in (ring.PROFILE_JOB, ring.PROFILE_QUEUE_JOB):
                continue
            mine = pending.pop(record.job_id)
            slot = queues.user_job_slot(record.job_id)
            queue = self.slots[slot] if slot < queues.QUEUE_SLOTS else None
            wanted = record.kind == ring.PROFILE_QUEUE_JOB
            if queue is None or not (wanted or device.trace.enabled):
                continue
            device_ns = record.cycles * 1000 // max(1, device.hw.clock_mhz)
            task_records = [r for r in mine if r.kind == ring.PROFILE_TASK]
            seq = record.job_id & queues.USER_JOB_SEQ_MASK
            # No SUBMIT: the job was "submitted" when its core took the entry.
            profile = JobProfile(seq, queue.core, -record.opcode, record.start_ns, record.start_ns, record.end_ns,
                                 record.end_ns, record.cycles, device_ns, task_records)
            if wanted:
                profiling.keep(device, queue.ctx, JobProfile(record.job_id, queue.core, profile.status, record.start_ns,
                                                     record.start_ns, record.end_ns, self._posted_ns(queue, seq,
                                                                                                     record),
                                                     record.cycles, device_ns, task_records,
                                                     complete=len(task_records) == record.index))
            if device.trace.enabled:
                device.trace.job(queue.ctx, TracedJob(profile.fence, queue.priority), profile)
        while len(pending) > TRACE_PENDING_KEPT:
            del pending[next(iter(pending))]

    @staticmethod
    def _posted_ns(queue: UserQueue, seq: int, record) -> int:
        """When the core posted the job's completion (its signal): start + the completion's
        exec_ns (pacing included), if the completion is still this job's; else the end."""
        at = queues.completions_offset(queue.entries) + (seq & (queue.entries - 1)) * queues.COMPLETION_STRUCT.size
        posted_seq, *_, exec_ns = queues.COMPLETION_STRUCT.unpack_from(queue.mem, at)
        return record.start_ns + exec_ns if posted_seq == seq and exec_ns else record.end_ns

    def check_profile_fence(self, ctx: Context, fence: int) -> None:
        """GET_PROFILE of a queue fence: EINVAL for a slot past the table or a job never
        written, ENOENT for no live queue of this context there, EBUSY for a job not done yet;
        else the records the cores published so far are taken in."""
        queue = self.live_queue(ctx, queues.user_job_slot(fence))
        seq = fence & queues.USER_JOB_SEQ_MASK
        if not 1 <= seq <= queue.header.read64(queues.HDR_TAIL):
            raise KmdError(errno.EINVAL, f"queue {queue.slot} job {seq} was never written")
        if seq > self.device.hw.qtab.read64(queues.slot_offset(queue.slot) + queues.Q_DONE):
            raise KmdError(errno.EBUSY, f"queue {queue.slot} job {seq} has not completed yet")
        profiling.collect(self.device, [])

    def _forget_profiles(self, queue: UserQueue) -> None:
        """A queue given back takes its jobs' profiles along (its slot and seqs will be reused)."""
        profiles = queue.ctx.profiles
        for fence in [f for f in profiles if f & queues.USER_JOB_BIT and queues.user_job_slot(f) == queue.slot]:
            profiling.forget(self.device, queue.ctx, fence)

    # ---- stats ----
    def _live_counters(self, queue: UserQueue) -> QueueCounters:
        table = self.device.hw.qtab
        base = queues.slot_offset(queue.slot)
        return QueueCounters(table.read64(base + queues.Q_DONE), table.read64(base + queues.Q_FAILED),
                             table.read64(base + queues.Q_BUSY_NS), table.read64(base + queues.Q_DEVICE_NS))

    def _retire_counters(self, queue: UserQueue) -> None:
        counters = self._live_counters(queue)
        stats = queue.ctx.stats
        stats.jobs_submitted += counters.done
        stats.jobs_completed += counters.done - counters.failed
        stats.jobs_failed += counters.failed
        stats.busy_time_ns += counters.busy_ns
        stats.device_time_ns += counters.device_ns
        self.retired.done += counters.done
        self.retired.failed += counters.failed

    def context_counters(self, ctx: Context) -> QueueCounters:
        """Counters of the context's queues not yet folded into its stats."""
        total = QueueCounters()
        for queue in ctx.queues:
            counters = self._live_counters(queue)
            total.done += counters.done
            total.failed += counters.failed
            total.busy_ns += counters.busy_ns
            total.device_ns += counters.device_ns
        return total

    def device_counters(self) -> tuple[int, int]:
        """(jobs done, failed) of every user queue since the driver started."""
        done, failed = self.retired.done, self.retired.failed
        for queue in [*filter(None, self.slots), *self.releasing]:
            counters = self._live_counters(queue)
            done += counters.done
            failed += counters.failed
        return done, failed
