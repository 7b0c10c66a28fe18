"""One NPU device as the driver manages it: contexts, memory, jobs, fences,
interrupts and reset.  Request handlers (``requests.py``) call into it; nothing
here blocks: anything that waits (WAIT, RESET) completes later from the
interrupt handler or a timer task."""
from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from pathlib import Path
from typing import Callable

import trio

from firmware_sim.spec import iommu, regs

from kmd_fuse import uapi
from kmd_fuse.context import MAX_PENDING_JOBS, Context, Job, Waiter, check_fence
from kmd_fuse.errors import KmdError
from kmd_fuse.hw import ChipConfig, Hardware
from kmd_fuse.limits import Limits, Quotas
from kmd_fuse.memory import BufferObject, DeviceMemory
from kmd_fuse.scheduler import Scheduler

log = logging.getLogger("kmd_fuse.device")

LOST_IRQ_POLL_S = 0.1      # completions are also collected this often, in case an interrupt was lost
# Hybrid polling of a read that waits for a short job (see Device.poll_for_reply): how long
# it polls the completion queues, and the longest last job of the context for which it does.
READ_SPIN_S = float(os.environ.get("NPU_KMD_READ_SPIN_US", "250")) / 1e6
READ_SPIN_MAX_EXEC_NS = int(READ_SPIN_S * 1.6e9)
RESET_TIMEOUT_S = 10.0
DRAIN_POLL_S = 0.001       # how often ring-control entries waiting for ring room are pumped
STUCK_JOB_GRACE_MS = 1000  # a job on a core for twice its timeout and this: the chip's watchdog is stuck
MODEL_NAME = "npu-emu"


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
                 limits: Limits = Limits()):
        self.index = index
        self.hw = Hardware(bus, config)
        self.memory = DeviceMemory(bus, memory_bytes)
        self.quotas = Quotas(limits, max_contexts=iommu.MAX_ASIDS - 1, memory_total=memory_bytes)
        self.contexts: dict[int, Context] = {}
        self.zombies: set[Context] = set()     # closed, waiting for their jobs to leave the chip
        self._context_ids = itertools.count(1)
        self._job_ids = itertools.count(1)
        self.jobs_completed = 0
        self.jobs_failed = 0
        self.reset_count = 0
        self.nursery: trio.Nursery | None = None
        self.resetting = False
        self.reset_hooks: list[Callable[[int], None]] = []   # called with reset_count after each reset
        self._polling = False              # a read is polling for its reply (poll_for_reply)
        self._draining = False             # a task is pumping ring-control entries (_drain)

    # ---- lifecycle ----
    def power_on(self) -> None:
        self.hw.power_on()
        self.scheduler = Scheduler(self.hw)

    def power_off(self) -> None:
        for ctx in list(self.contexts.values()):
            self.close_context(ctx)
        self.hw.power_off()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Interrupt handler and housekeeping; runs for the daemon's lifetime."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self._irq_loop)
            nursery.start_soon(self._poll_loop)
            task_status.started()

    def spawn(self, fn, *args) -> None:
        """Run ``fn(*args)`` in the device's nursery; an exception it raises is logged, never
        allowed to end the daemon (and with it every other context)."""
        async def contained():
            try:
                await fn(*args)
            except Exception:
                log.exception("%s failed", getattr(fn, "__name__", fn))
        self.nursery.start_soon(contained)

    async def _irq_loop(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.hw.irq_fd)
            try:
                self.hw.ack_irq()
                self.service_completions()
                self._account_core_restarts()
            except Exception:
                log.exception("interrupt handler failed")

    async def _poll_loop(self) -> None:
        while True:
            await trio.sleep(LOST_IRQ_POLL_S)
            try:
                if self.hw.process.poll() is not None and not self.resetting:
                    log.error("chip died (status %s): restarting it", self.hw.process.returncode)
                    self.spawn(self._recover_chip)
                elif not self.resetting:
                    self.service_completions()
                    self._account_core_restarts()
                    self._check_chip_watchdog()
            except Exception:
                log.exception("housekeeping failed")

    def pump(self) -> None:
        """Move queued work onto the rings. Ring-control entries (IOTLB invalidations) raise
        no interrupt when done, so while some wait for ring room a task keeps pumping until
        they are all on the rings: no later job waits behind them."""
        self.scheduler.pump()
        if self.scheduler.control_backlog() and not self._draining and self.nursery is not None:
            self._draining = True
            self.spawn(self._drain)

    async def _drain(self) -> None:
        try:
            while self.scheduler.control_backlog():
                await trio.sleep(DRAIN_POLL_S)
                self.scheduler.pump()
        finally:
            self._draining = False

    async def poll_for_reply(self, ctx: Context) -> None:
        """Hybrid polling for a read whose reply is a short job still running.

        Sleeping until the interrupt costs a wake-up on the critical path (tens of us on
        these VMs, more than the job itself when it is short).  So while the client is
        blocked in read() on a job of a context whose last job ran for at most
        READ_SPIN_MAX_EXEC_NS, the driver polls the completion queues for up to
        READ_SPIN_S instead, yielding to every other task (other requests are served
        meanwhile) and to every other runnable process at each round.  One read polls at a
        time (its rounds collect every context's completions); longer jobs, other readers,
        and anything not done in time wait for the interrupt as before."""
        if self._polling or self.resetting or not (
                READ_SPIN_S and ctx.pending and 0 <= ctx.last_exec_ns <= READ_SPIN_MAX_EXEC_NS):
            return
        self._polling = True
        try:
            deadline = time.monotonic() + READ_SPIN_S
            while not ctx.replies and ctx.pending and not ctx.closed and time.monotonic() < deadline:
                os.sched_yield()
                await trio.lowlevel.checkpoint()
                if not ctx.replies:
                    self.service_completions()
        finally:
            self._polling = False

    # ---- contexts ----
    def open_context(self, pid: int, uid: int, gid: int) -> Context:
        self.quotas.open_context(uid)
        try:
            space = self.memory.create_space()
        except KmdError:
            self.quotas.close_context(uid)
            raise
        ctx = Context(next(self._context_ids), pid, uid, gid, _comm(pid), space)
        self.contexts[ctx.context_id] = ctx
        log.info("context %d opened by pid %d (%s)", ctx.context_id, pid, ctx.comm)
        return ctx

    def close_context(self, ctx: Context) -> None:
        """The file was released (close or process death): free all it holds."""
        if ctx.closed:
            return
        ctx.closed = True
        self.contexts.pop(ctx.context_id, None)
        self.quotas.close_context(ctx.uid)
        for waiter in ctx.waiters:
            if waiter.cancel:
                waiter.cancel.cancel()
        ctx.waiters.clear()
        for job in self.scheduler.cancel(ctx):
            self._release_job_buffers(job)
            ctx.pending.pop(job.fence, None)
        for bo in list(ctx.buffers.values()):
            self._free_buffer(ctx, bo, invalidate=False)   # _reap invalidates the whole ASID
        self.zombies.add(ctx)
        self._reap(ctx)
        log.info("context %d closed", ctx.context_id)

    def _reap(self, ctx: Context) -> None:
        """Destroy a closed context's address space once no job of it is on the chip."""
        if ctx in self.zombies and not ctx.pending:
            self.zombies.discard(ctx)
            self.scheduler.invalidate(ctx.space.asid)
            self.memory.destroy_space(ctx.space)
            self.pump()

    # ---- memory ----
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

    def free(self, ctx: Context, handle: int) -> None:
        self._free_buffer(ctx, self.lookup(ctx, handle))
        self.pump()

    def _free_buffer(self, ctx: Context, bo: BufferObject, invalidate: bool = True) -> None:
        ctx.remove_buffer(bo)
        bo.freed = True
        if bo.users == 0:
            self._release(ctx, bo, invalidate)

    def _release_job_buffers(self, job: Job) -> None:
        for bo in job.bos:
            bo.users -= 1
            if bo.freed and bo.users == 0:
                self._release(job.ctx, bo, invalidate=not job.ctx.closed)

    def _release(self, ctx: Context, bo: BufferObject, invalidate: bool) -> None:
        """Give a freed buffer's memory back (no job holds it any more). A closed context's
        buffers need no invalidation each: _reap invalidates its whole ASID."""
        self.memory.release(ctx.space, bo)
        self.quotas.discharge(ctx.uid, bo.size)
        if invalidate:
            self.scheduler.invalidate(ctx.space.asid, bo.bo_id)

    # ---- jobs ----
    def submit(self, ctx: Context, req, seq: int = 0) -> Job:
        if req.flags & ~uapi.NPU_SUBMIT_WAIT:
            raise KmdError(errno.EINVAL, f"unknown SUBMIT flags {req.flags:#x}")
        if req.priority > uapi.NPU_PRIO_HIGH:
            raise KmdError(errno.EINVAL, f"priority {req.priority} out of range")
        if req.num_bos > uapi.NPU_MAX_SUBMIT_BOS:
            raise KmdError(errno.E2BIG, f"{req.num_bos} buffers, at most {uapi.NPU_MAX_SUBMIT_BOS}")
        if len(ctx.pending) >= MAX_PENDING_JOBS:
            raise KmdError(errno.EAGAIN, f"{MAX_PENDING_JOBS} jobs already pending in this context: wait for some")
        handles = uapi.ffi.unpack(req.bo_handles, req.num_bos)
        if len(set(handles)) != len(handles):
            raise KmdError(errno.EINVAL, "a buffer handle is listed twice")
        bos = [self.lookup(ctx, h) for h in handles]
        if req.cmd_size and not any(bo.contains(req.cmd_iova, req.cmd_size) for bo in bos):
            raise KmdError(errno.EFAULT, f"command buffer [{req.cmd_iova:#x}, +{req.cmd_size}) is not inside "
                                         "any buffer the job lists")
        if req.cmd_size % 8:
            raise KmdError(errno.EINVAL, f"command buffer size {req.cmd_size} is not a multiple of 8")
        ctx.last_fence += 1
        timeout_ms = min(req.timeout_ms or self.hw.config.watchdog_ms, self.hw.config.max_job_timeout_ms)
        job = Job(next(self._job_ids), ctx, ctx.last_fence, bos, req.cmd_iova, req.cmd_size, req.priority,
                  timeout_ms)
        if req.flags & uapi.NPU_SUBMIT_WAIT:
            req.fence = job.fence
            job.sync_reply = (seq, req)
        for bo in bos:
            bo.users += 1
        ctx.pending[job.fence] = job
        ctx.stats.jobs_submitted += 1
        self.scheduler.enqueue(job)
        self.pump()
        return job

    def service_completions(self) -> None:
        done = self.hw.completions()
        if not done:
            return
        touched = set()
        for completion in done:
            job = self.scheduler.retire(completion)
            if job is None:
                log.warning("completion for unknown job %d", completion.job_id)
                continue
            job.status, job.device_time_ns = completion.status, completion.device_time_ns
            job.ctx.stats.busy_time_ns += completion.exec_ns
            job.ctx.last_exec_ns = completion.exec_ns
            job.ctx.stats.device_time_ns += completion.device_time_ns
            if completion.status:
                log.info("job %d (context %d fence %d) failed: %s at %#x", job.job_id, job.ctx.context_id,
                         job.fence, errno.errorcode.get(-completion.status, completion.status),
                         completion.fault_iova)
            self._finish(job)
            touched.add(job.ctx)
        self.pump()
        for ctx in touched:
            if ctx.closed:
                self._reap(ctx)
            else:
                self._check_waiter(ctx)

    def _finish(self, job: Job) -> None:
        if job.status == 0:
            self.jobs_completed += 1
        else:
            self.jobs_failed += 1
        job.ctx.record_result(job)
        self._release_job_buffers(job)
        if job.sync_reply is not None and not job.ctx.closed:   # NPU_SUBMIT_WAIT
            seq, req = job.sync_reply
            req.status, req.device_time_ns = job.status, job.device_time_ns
            job.ctx.set_reply(uapi.pack_frame(uapi.NPU_CMD_SUBMIT, seq, req))

    # ---- fences ----
    def wait(self, ctx: Context, seq: int, req) -> bool:
        """Start a WAIT; returns True when its reply is already complete."""
        if not 1 <= req.count <= uapi.NPU_MAX_WAIT_FENCES:
            raise KmdError(errno.EINVAL, f"fence count {req.count} not in 1..{uapi.NPU_MAX_WAIT_FENCES}")
        if req.flags not in (uapi.NPU_WAIT_ALL, uapi.NPU_WAIT_ANY):
            raise KmdError(errno.EINVAL, f"unknown WAIT flags {req.flags:#x}")
        for i in range(req.count):
            check_fence(ctx, req.fences[i])
        if self._fill_wait(ctx, req):
            return True
        if req.timeout_ns == 0:   # a poll that found fences pending
            ctx.set_reply(uapi.pack_frame(uapi.NPU_CMD_WAIT, seq, req, result=-errno.ETIMEDOUT))
            return False
        waiter = Waiter(seq, req)
        ctx.waiters.append(waiter)
        if req.timeout_ns > 0:
            self.spawn(self._wait_timeout, ctx, waiter, req.timeout_ns / 1e9)
        return False

    def _fill_wait(self, ctx: Context, req) -> bool:
        signaled, first = 0, -1
        for i in range(req.count):
            status, device_time = ctx.fence_status(req.fences[i])
            req.status[i], req.device_time_ns[i] = status, device_time
            if status != uapi.NPU_FENCE_PENDING:
                signaled += 1
                first = i if first < 0 else first
        req.signaled, req.first_signaled = signaled, max(first, 0)
        return signaled == req.count or (req.flags == uapi.NPU_WAIT_ANY and signaled > 0)

    def _check_waiter(self, ctx: Context) -> None:
        """Answer every pending WAIT of the context whose fences are now satisfied."""
        for waiter in [w for w in ctx.waiters if self._fill_wait(ctx, w.payload)]:
            ctx.waiters.remove(waiter)
            if waiter.cancel:
                waiter.cancel.cancel()
            ctx.set_reply(uapi.pack_frame(uapi.NPU_CMD_WAIT, waiter.seq, waiter.payload))

    async def _wait_timeout(self, ctx: Context, waiter: Waiter, seconds: float) -> None:
        with trio.CancelScope() as scope:
            waiter.cancel = scope
            await trio.sleep(seconds)
            if waiter in ctx.waiters:
                ctx.waiters.remove(waiter)
                self._fill_wait(ctx, waiter.payload)
                ctx.set_reply(uapi.pack_frame(uapi.NPU_CMD_WAIT, waiter.seq, waiter.payload,
                                              result=-errno.ETIMEDOUT))

    # ---- reset ----
    async def reset(self, reason: str) -> None:
        """Full device reset: jobs on the chip fail with EIO, queued jobs run afterwards."""
        if self.resetting:
            raise KmdError(errno.EBUSY, "a reset is already in progress")
        self.resetting = True
        self.scheduler.halted = True
        try:
            request = self.hw.request_reset()
            deadline = time.monotonic() + RESET_TIMEOUT_S
            while not self.hw.reset_done(request):
                if time.monotonic() > deadline:
                    raise KmdError(errno.EIO, "the chip did not acknowledge the reset")
                await trio.sleep(0.005)
            self._after_reset(reason)
        finally:
            self.resetting = False
            self.scheduler.halted = False
            self.pump()

    def _after_reset(self, reason: str) -> None:
        self.hw.after_reset()
        self.reset_count += 1
        log.warning("device reset #%d (%s)", self.reset_count, reason)
        for hook in self.reset_hooks:
            hook(self.reset_count)
        touched = set()
        for job in self.scheduler.abort_in_flight():
            job.status = -errno.EIO
            self._finish(job)
            touched.add(job.ctx)
        for ctx in touched:
            self._reap(ctx) if ctx.closed else self._check_waiter(ctx)

    def _account_core_restarts(self) -> None:
        """The chip restarted a core that died or hung: each restart is a reset (counted and
        announced with a "change" uevent); the job it cost has already failed through the
        completion queue, and the core's queued jobs run on the new core."""
        if self.resetting:
            return
        for _ in range(self.hw.core_restarts()):
            self.reset_count += 1
            log.warning("device reset #%d (the chip restarted a core that died or hung)", self.reset_count)
            for hook in self.reset_hooks:
                hook(self.reset_count)

    def _check_chip_watchdog(self) -> None:
        """The driver's own safety net, as drm_sched's timeout handler is one: a job still on
        a core far past its timeout means the chip's watchdog itself is stuck.  Kill the chip;
        the poll loop then restarts it (jobs on it fail with EIO, queued ones run after)."""
        for job_id, elapsed_ns in self.hw.running():
            job = self.scheduler.in_flight.get(job_id)
            if job is not None and elapsed_ns > (2 * job.timeout_ms + STUCK_JOB_GRACE_MS) * 1_000_000:
                log.error("job %d has run %.1f s, its timeout is %d ms: the chip's watchdog is stuck, "
                          "restarting the chip", job_id, elapsed_ns / 1e9, job.timeout_ms)
                self.hw.process.kill()
                return

    async def _recover_chip(self) -> None:
        self.resetting = True
        self.scheduler.halted = True
        try:
            self.hw.restart_chip()
            deadline = time.monotonic() + RESET_TIMEOUT_S
            while not self.hw.ready():
                if time.monotonic() > deadline or self.hw.process.poll() is not None:
                    log.error("the chip did not come back; jobs stay queued")
                    return
                await trio.sleep(0.01)
            self._after_reset("chip died")
        finally:
            self.resetting = False
            self.scheduler.halted = False
            self.pump()

    # ---- reporting ----
    def fill_info(self, ctx: Context, info) -> None:
        info.abi_version = uapi.NPU_ABI_VERSION
        info.device_id = self.index
        info.hw_version = self.hw.regs.read32(regs.HW_VERSION)
        info.num_cores = self.hw.num_cores
        info.clock_mhz = self.hw.clock_mhz
        info.ring_entries = self.hw.entries
        info.page_size = 4096
        info.num_contexts = len(self.contexts)
        info.memory_total = self.memory.total
        info.memory_used = self.memory.used
        info.context_id = ctx.context_id
        info.jobs_completed = self.jobs_completed
        info.jobs_failed = self.jobs_failed
        info.busy_time_ns = self.hw.busy_ns()
        info.reset_count = self.reset_count
        info.model = MODEL_NAME.encode()

    def context_busy_ns(self, ctx: Context) -> int:
        """Chip time of the context's jobs, counting the ones running now (never decreases)."""
        total = ctx.stats.busy_time_ns
        for job_id, elapsed in self.hw.running():
            job = self.scheduler.in_flight.get(job_id)
            if job is not None and job.ctx is ctx:
                total += elapsed
        ctx.stats.busy_reported = max(ctx.stats.busy_reported, total)
        return ctx.stats.busy_reported

    def fill_stats(self, ctx: Context, stats) -> None:
        s = ctx.stats
        stats.context_id = ctx.context_id
        stats.memory_allocated = ctx.memory_allocated
        stats.memory_peak = s.memory_peak
        stats.buffers = len(ctx.buffers)
        stats.jobs_submitted = s.jobs_submitted
        stats.jobs_completed = s.jobs_completed
        stats.jobs_failed = s.jobs_failed
        stats.busy_time_ns = self.context_busy_ns(ctx)
        stats.jobs_queued = sum(1 for j in ctx.pending.values() if j.core < 0)
        stats.jobs_running = sum(1 for j in ctx.pending.values() if j.core >= 0)
