"""Jobs, fences and WAIT: what SUBMIT queues, what the interrupt retires, what WAIT waits for.

A job gets the context's next fence at SUBMIT and runs later; its completion (from
the interrupt, the housekeeping poll, or a read polling for it) records the fence's
status, answers a NPU_SUBMIT_WAIT request, and answers every WAIT it satisfies.
"""
from __future__ import annotations

import errno
import logging
import os
import time

import trio

from kmd_fuse import profiling, uapi
from kmd_fuse.context import MAX_PENDING_JOBS, MAX_PENDING_JOBS_PER_USER, Context, Job, Waiter, check_fence
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from kmd_fuse.requests import Request
from npu_hw import regs

log = logging.getLogger("kmd_fuse.jobs")

# Hybrid polling of a read that waits for a short job (see poll_for_reply): how long
# it polls the completion queues, and the longest last job of the context for which it does.
READ_SPIN_S = float(os.environ.get("NPU_KMD_READ_SPIN_US", "250")) / 1e6
READ_SPIN_MAX_EXEC_NS = int(READ_SPIN_S * 1.6e9)


# ---- jobs ----
def submit(device: Device, ctx: Context, request: Request) -> Job:
    """Queue the job a SUBMIT describes; its fence is in the job (and, with NPU_SUBMIT_WAIT,
    the request is answered when the job is done)."""
    req = request.payload
    if req.flags & ~(uapi.NPU_SUBMIT_WAIT | uapi.NPU_SUBMIT_PROFILE):
        raise KmdError(errno.EINVAL, f"unknown SUBMIT flags {req.flags:#x}")
    _check_room(ctx, 1)
    job = _queue(device, ctx, req, _checked_buffers(device, ctx, req))
    if req.flags & uapi.NPU_SUBMIT_WAIT:
        job.sync_reply = request
    device.pump()
    return job


def submit_batch(device: Device, ctx: Context, request: Request) -> list[Job]:
    """Queue the first ``count`` SUBMITs of a SUBMIT_BATCH, in order, each checked as
    SUBMIT checks it; all or none (the first refused entry's errno answers the request)."""
    batch = request.payload
    if batch.flags:
        raise KmdError(errno.EINVAL, f"unknown SUBMIT_BATCH flags {batch.flags:#x}")
    if not 1 <= batch.count <= uapi.NPU_MAX_BATCH_JOBS:
        raise KmdError(errno.EINVAL, f"{batch.count} jobs in a batch, 1 to {uapi.NPU_MAX_BATCH_JOBS}")
    entries = [batch.jobs[i] for i in range(batch.count)]
    for i, req in enumerate(entries):
        if req.flags & ~uapi.NPU_SUBMIT_PROFILE:
            raise KmdError(errno.EINVAL, f"batch entry {i}: flags {req.flags:#x} (only NPU_SUBMIT_PROFILE; "
                                         "NPU_SUBMIT_WAIT is not taken in a batch: WAIT on the fences)")
        if any(req.reserved):
            raise KmdError(errno.EINVAL, f"batch entry {i}: reserved bytes must be zero")
    _check_room(ctx, len(entries))
    buffers = [_checked_buffers(device, ctx, req) for req in entries]
    queued = [_queue(device, ctx, req, bos) for req, bos in zip(entries, buffers)]
    device.pump()
    return queued


def _check_room(ctx: Context, jobs: int) -> None:
    if len(ctx.pending) + jobs > MAX_PENDING_JOBS:
        raise KmdError(errno.EAGAIN, f"{MAX_PENDING_JOBS} jobs already pending in this context: wait for some")
    if ctx.ledger.pending() + jobs > MAX_PENDING_JOBS_PER_USER:
        raise KmdError(errno.EAGAIN, f"{MAX_PENDING_JOBS_PER_USER} jobs already pending in the contexts of uid "
                                     f"{ctx.uid}: wait for some")


def _checked_buffers(device: Device, ctx: Context, req) -> list:
    """The buffers a SUBMIT payload lists, after every check of its fields."""
    if req.priority > uapi.NPU_PRIO_HIGH:
        raise KmdError(errno.EINVAL, f"priority {req.priority} out of range")
    if req.num_bos > uapi.NPU_MAX_SUBMIT_BOS:
        raise KmdError(errno.E2BIG, f"{req.num_bos} buffers, at most {uapi.NPU_MAX_SUBMIT_BOS}")
    handles = uapi.ffi.unpack(req.bo_handles, req.num_bos)
    if len(set(handles)) != len(handles):
        raise KmdError(errno.EINVAL, "a buffer handle is listed twice")
    bos = [device.lookup(ctx, h) for h in handles]
    if req.cmd_size and not any(bo.contains(req.cmd_iova, req.cmd_size) for bo in bos):
        raise KmdError(errno.EFAULT, f"command buffer [{req.cmd_iova:#x}, +{req.cmd_size}) is not inside "
                                     "any buffer the job lists")
    if req.cmd_size % 8:
        raise KmdError(errno.EINVAL, f"command buffer size {req.cmd_size} is not a multiple of 8")
    return bos


def _queue(device: Device, ctx: Context, req, bos: list) -> Job:
    """Give a checked SUBMIT payload its fence (written into ``req``) and queue its job."""
    ctx.last_fence += 1
    config = device.hw.config
    timeout_ms = regs.job_timeout_ms(req.timeout_ms, config.watchdog_ms, config.max_job_timeout_ms)
    job = Job(next(device.job_ids), ctx, ctx.last_fence, bos, req.cmd_iova, req.cmd_size, req.priority,
              timeout_ms, submit_ns=time.monotonic_ns(), profile_wanted=bool(req.flags & uapi.NPU_SUBMIT_PROFILE))
    job.profiled = job.profile_wanted or device.trace.enabled
    req.fence = job.fence
    for bo in bos:
        bo.users += 1
    ctx.pending[job.fence] = job
    ctx.stats.jobs_submitted += 1
    device.scheduler.enqueue(job)
    return job


TASK_ERRNOS = (errno.EINVAL, errno.EFAULT, errno.EIO)   # a job's errnos that a task of it caused


def service_completions(device: Device) -> None:
    """Retire every job the chip reports done and answer who waits for it."""
    done = device.hw.completions()
    if not done:
        return
    touched = set()
    retired = []
    for completion in done:
        job = device.scheduler.retire(completion)
        if job is None:
            log.warning("completion for unknown job %d", completion.job_id)
            continue
        retired.append((job, completion))
    profiling.collect(device, retired)
    for job, completion in retired:
        job.status, job.device_time_ns = completion.status, completion.device_time_ns
        job.ctx.stats.busy_time_ns += completion.exec_ns
        job.ctx.last_exec_ns = completion.exec_ns
        job.ctx.stats.device_time_ns += completion.device_time_ns
        if completion.status:
            # Warning: the index (and the chip's log line before it, with the reason) is what
            # tells a user which of a model's tasks the chip refused.
            # (A timeout's or an abort's task_index counts the tasks run: no task failed.)
            where = (f"at task {completion.task_index}" if -completion.status in TASK_ERRNOS
                     else f"after {completion.task_index} tasks")
            log.warning("job %d of context %d (fence %d) failed %s: %s (fault address %#x)",
                        job.job_id, job.ctx.context_id, job.fence, where,
                        errno.errorcode.get(-completion.status, completion.status), completion.fault_iova)
        finish(device, job)
        touched.add(job.ctx)
    device.pump()
    settle(device, touched)


def finish(device: Device, job: Job) -> None:
    """A job is done (its status set): count it, free its buffers, answer a waiting SUBMIT."""
    if job.status == 0:
        device.jobs_completed += 1
    else:
        device.jobs_failed += 1
    job.ctx.signal_fence(job)
    device.release_job_buffers(job)
    if job.sync_reply is not None and not job.ctx.closed:   # NPU_SUBMIT_WAIT
        request = job.sync_reply
        request.payload.status, request.payload.device_time_ns = job.status, job.device_time_ns
        job.ctx.set_reply(request.reply())


def settle(device: Device, touched: set[Context]) -> None:
    """After jobs of these contexts finished: reap the closed ones, answer the others' WAITs."""
    for ctx in touched:
        if ctx.closed:
            device.reap(ctx)
        else:
            answer_waiters(ctx)


async def poll_for_reply(device: Device, ctx: Context, seq: int | None = None) -> None:
    """Hybrid polling for a read whose reply is a short job still running.

    Sleeping until the interrupt costs a wake-up on the critical path (tens of us on
    these VMs, more than the job itself when it is short).  So while the client is
    blocked in read() on a job of a context whose last job ran for at most
    READ_SPIN_MAX_EXEC_NS, the driver polls the completion queues for up to
    READ_SPIN_S instead, yielding to every other task (other requests are served
    meanwhile) and to every other runnable process at each round.  One read polls at a
    time (its rounds collect every context's completions); longer jobs, other readers,
    and anything not done in time wait for the interrupt as before."""
    if device.polling or device.resetting or not (
            READ_SPIN_S and ctx.pending and 0 <= ctx.last_exec_ns <= READ_SPIN_MAX_EXEC_NS):
        return
    device.polling = True
    try:
        deadline = time.monotonic() + READ_SPIN_S
        while ctx.ready_reply(seq) is None and ctx.pending and not ctx.closed and time.monotonic() < deadline:
            os.sched_yield()
            await trio.lowlevel.checkpoint()
            if ctx.ready_reply(seq) is None:
                service_completions(device)
    finally:
        device.polling = False


# ---- fences ----
def wait(device: Device, ctx: Context, request: Request) -> bool:
    """Start a WAIT; True when its reply is already complete (else it is answered later)."""
    req = request.payload
    if not 1 <= req.count <= uapi.NPU_MAX_WAIT_FENCES:
        raise KmdError(errno.EINVAL, f"fence count {req.count} not in 1..{uapi.NPU_MAX_WAIT_FENCES}")
    if req.flags not in (uapi.NPU_WAIT_ALL, uapi.NPU_WAIT_ANY):
        raise KmdError(errno.EINVAL, f"unknown WAIT flags {req.flags:#x}")
    for i in range(req.count):
        check_fence(ctx, req.fences[i])
    if _fill_wait(ctx, req):
        return True
    if req.timeout_ns == 0:   # a poll that found fences pending
        ctx.set_reply(request.reply(-errno.ETIMEDOUT))
        return False
    waiter = Waiter(request)
    ctx.waiters.append(waiter)
    if req.timeout_ns > 0:
        device.spawn(_wait_timeout, ctx, waiter, req.timeout_ns / 1e9)
    return False


def _fill_wait(ctx: Context, req) -> bool:
    signaled, first = 0, -1
    for i in range(req.count):
        status, device_time = ctx.fence_status(req.fences[i])
        req.status[i], req.device_time_ns[i] = status, device_time
        if status != uapi.NPU_FENCE_PENDING:
            signaled += 1
            first = i if first < 0 else first
    req.signaled, req.first_signaled = signaled, max(first, 0)
    return signaled == req.count or (req.flags == uapi.NPU_WAIT_ANY and signaled > 0)


def answer_waiters(ctx: Context) -> None:
    """Answer every pending WAIT of the context whose fences are now satisfied."""
    for waiter in [w for w in ctx.waiters if _fill_wait(ctx, w.request.payload)]:
        ctx.waiters.remove(waiter)
        if waiter.cancel:
            waiter.cancel.cancel()
        ctx.set_reply(waiter.request.reply())


async def _wait_timeout(ctx: Context, waiter: Waiter, seconds: float) -> None:
    with trio.CancelScope() as scope:
        waiter.cancel = scope
        await trio.sleep(seconds)
        if waiter in ctx.waiters:
            ctx.waiters.remove(waiter)
            _fill_wait(ctx, waiter.request.payload)
            ctx.set_reply(waiter.request.reply(-errno.ETIMEDOUT))
