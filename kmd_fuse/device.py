"""One NPU device as the driver manages it: its lifecycle, its contexts and their buffers.

The other concerns sit beside it, each in its own module working on a Device, as
ivpu splits its files: jobs, fences and WAIT in ``jobs.py``; reset and recovery in
``recovery.py``; the MMU in ``mmu.py``; device facts (GET_INFO, GET_STATS,
GET_PARAM) in ``info.py``; the command table in ``ioctls.py``.  Nothing here
blocks: what waits runs in the device's ``BackgroundTasks``, given to it when built.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import trio

from kmd_fuse import profiling, uapi
from kmd_fuse.buffer import BufferObject
from kmd_fuse.context import Context, Job, UserLedger
from kmd_fuse.deferred_frees import DeferredFree
from kmd_fuse.errors import KmdError
from kmd_fuse.hw import ChipConfig, Hardware
from kmd_fuse.limits import Limits, Quotas
from kmd_fuse.memory import DeviceMemory
from kmd_fuse.profiling import Trace
from kmd_fuse.scheduler import Scheduler
from kmd_fuse.tasks import BackgroundTasks
from kmd_fuse.user_queues import UserQueues
from npu_hw import iommu

log = logging.getLogger("kmd_fuse.device")

DRAIN_POLL_S = 0.001       # how often ring-control entries waiting for ring room are pumped


def _comm(pid: int) -> str:
    """The process's command name, made safe to print: a process sets its own name
    (prctl PR_SET_NAME) to any bytes, newlines included, and the name is rendered into
    text files other users read (clients/<id>, npu smi)."""
    try:
        raw = Path(f"/proc/{pid}/comm").read_bytes()
    except OSError:
        return "?"
    name = raw.removesuffix(b"\n").decode("utf-8", errors="replace")
    return "".join(c if c.isprintable() else "?" for c in name) or "?"


class Device:
    def __init__(self, index: int, bus: Path, memory_bytes: int, config: ChipConfig,
                 limits: Limits = Limits(), *, tasks: BackgroundTasks):
        self.index = index
        self.tasks = tasks
        self.hw = Hardware(bus, config, memory_bytes)
        self.memory = DeviceMemory(bus, memory_bytes)
        self.quotas = Quotas(limits, max_contexts=iommu.MAX_ASIDS - 1, memory_total=memory_bytes,
                             owner_uid=os.geteuid())
        self.contexts: dict[int, Context] = {}
        self.zombies: set[Context] = set()     # closed, waiting for their jobs to leave the chip
        self._context_ids = itertools.count(1)
        self.job_ids = itertools.count(1)
        self.jobs_completed = 0
        self.jobs_failed = 0
        self.reset_count = 0
        self.resetting = False
        self.reset_hooks: list[Callable[[int], None]] = []   # called with reset_count after each reset
        self.polling = False               # a read is polling for its reply (jobs.poll_for_reply)
        self._draining = False             # a task is pumping ring-control entries (_drain)
        self.trace = Trace()                # the device's event recorder (kmd_fuse.profiling)
        self.unclaimed_profiles: dict[int, list] = {}   # job id -> profile records read before its completion
        self.profile_tasks_by_uid: Counter[int] = Counter()   # task records kept for GET_PROFILE, per user
        self.ledgers: dict[int, UserLedger] = {}   # per user: the fence results its contexts remember
        self.queues = UserQueues(self)      # user-mode submission queues (kmd_fuse.user_queues)
        self.housekeeping_kick = trio.Event()   # set: work came, the idle housekeeping wakes (kmd_fuse.irq)

    # ---- lifecycle ----
    def power_on(self) -> None:
        self.hw.power_on()
        self.scheduler = Scheduler(self.hw)

    def power_off(self) -> None:
        for ctx in list(self.contexts.values()):
            self.close_context(ctx)
        self.hw.power_off()

    def kick_housekeeping(self) -> None:
        """Work came: the housekeeping polls again (it sleeps while the device is idle)."""
        self.housekeeping_kick.set()

    def spawn(self, fn, *args) -> None:
        """Run ``fn(*args)`` in the device's background tasks."""
        self.tasks.spawn(fn, *args)

    def pump(self) -> None:
        """Move queued work onto the rings. Ring-control entries (IOTLB invalidations) raise
        no interrupt when done, so while some wait for ring room a task keeps pumping until
        they are all on the rings: no later job waits behind them."""
        self.scheduler.pump()
        self.kick_housekeeping()
        if self.scheduler.control_backlog() and not self._draining:
            self._draining = True
            self.spawn(self._drain)

    async def _drain(self) -> None:
        try:
            while self.scheduler.control_backlog():
                await trio.sleep(DRAIN_POLL_S)
                self.scheduler.pump()
        finally:
            self._draining = False

    # ---- contexts ----
    def open_context(self, pid: int, uid: int, gid: int) -> Context:
        self.quotas.open_context(uid)
        try:
            space = self.memory.create_space()
        except KmdError:
            self.quotas.close_context(uid)
            raise
        ledger = self.ledgers.setdefault(uid, UserLedger())
        ctx = Context(next(self._context_ids), pid, uid, gid, _comm(pid), space, ledger=ledger)
        ledger.contexts.add(ctx)
        self.contexts[ctx.context_id] = ctx
        log.info("context %d opened by pid %d (%s)", ctx.context_id, pid, ctx.comm)
        return ctx

    def close_context(self, ctx: Context) -> None:
        """The file was released (close or process death): free all it holds."""
        if ctx.closed:
            return
        ctx.closed = True
        self.contexts.pop(ctx.context_id, None)
        profiling.forget_all(self, ctx)
        ctx.forget_results()
        if not ctx.ledger.contexts:
            self.ledgers.pop(ctx.uid, None)
        self.quotas.close_context(ctx.uid)
        for waiter in ctx.waiters:
            if waiter.cancel:
                waiter.cancel.cancel()
        ctx.waiters.clear()
        # Its user queues stop first: until the cores acknowledge, a user-queue job may still
        # use any of its buffers, so those are given back only after (user_queues.poll).
        self.queues.disable_context(ctx, -errno.ECANCELED)
        self.queues.deferred.context_closing(ctx)
        for job in self.scheduler.cancel(ctx):
            self.release_job_buffers(job)
            ctx.pending.pop(job.fence, None)
        for bo in list(ctx.buffers.values()):
            self._free_buffer(ctx, bo, invalidate=False)   # reap invalidates the whole ASID
        self.zombies.add(ctx)
        self.reap(ctx)
        log.info("context %d closed", ctx.context_id)

    def reap(self, ctx: Context) -> None:
        """Destroy a closed context's address space once no job of it is on the chip."""
        if ctx in self.zombies and not ctx.pending and not ctx.queues and \
                not self.queues.deferred.holds(ctx):
            self.zombies.discard(ctx)
            self.scheduler.invalidate(ctx.space.asid)
            self.memory.destroy_space(ctx.space)
            self.pump()

    # ---- buffers ----
    def alloc(self, ctx: Context, size: int, flags: int) -> BufferObject:
        flags = flags or uapi.NPU_MEM_RW
        if flags & ~uapi.NPU_MEM_RW:
            raise KmdError(errno.EINVAL, f"unknown MEM_ALLOC flags {flags:#x}")
        bo = self.memory.allocate(ctx.space, ctx.next_handle, size, flags)
        try:
            self.quotas.charge(ctx.uid, bo.size)
        except KmdError:
            self.memory.release(ctx.space, bo)
            raise
        ctx.next_handle += 1
        ctx.add_buffer(bo)
        return bo

    def lookup(self, ctx: Context, handle: int) -> BufferObject:
        bo = ctx.buffers.get(handle)
        if bo is None:
            raise KmdError(errno.ENOENT, f"no buffer with handle {handle} in this context")
        return bo

    def free(self, ctx: Context, handle: int) -> DeferredFree | None:
        """MEM_FREE; the deferral, when the buffer is given back later (a user queue may use it)."""
        deferred = self._free_buffer(ctx, self.lookup(ctx, handle))
        self.pump()
        return deferred

    def _free_buffer(self, ctx: Context, bo: BufferObject, invalidate: bool = True) -> DeferredFree | None:
        ctx.remove_buffer(bo)
        bo.freed = True
        if bo.users == 0:
            return self._release_or_defer(ctx, bo, invalidate)
        return None

    def release_job_buffers(self, job: Job) -> None:
        """A job left the device (done or dropped): its buffers may now be given back."""
        for bo in job.bos:
            bo.users -= 1
            if bo.freed and bo.users == 0:
                self._release_or_defer(job.ctx, bo, invalidate=not job.ctx.closed)

    def _release_or_defer(self, ctx: Context, bo: BufferObject, invalidate: bool) -> DeferredFree | None:
        """Give a freed buffer back now, or, while a user queue of its context may still run
        a job using it, once that is no longer possible (kmd_fuse.user_queues)."""
        if not ctx.queues:
            self._release(ctx, bo, invalidate)
            return None
        if ctx.closed:
            return self.queues.defer_context_frees(ctx, bo)
        return self.queues.defer_free(ctx, bo)

    def release_buffer(self, ctx: Context, bo: BufferObject) -> None:
        """Give back a buffer whose deferral ended (its pages were unmapped and invalidated)."""
        self._release(ctx, bo, invalidate=False)

    def _release(self, ctx: Context, bo: BufferObject, invalidate: bool) -> None:
        """Give a freed buffer's memory back (no job holds it any more). A closed context's
        buffers need no invalidation each: reap invalidates its whole ASID."""
        self.memory.release(ctx.space, bo)
        if bo.accounted:                   # a destroyed user queue's memory was never charged
            self.quotas.discharge(ctx.uid, bo.size)
        if invalidate:
            self.scheduler.invalidate(ctx.space.asid, bo.bo_id)
