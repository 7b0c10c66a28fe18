"""Job profiles and the device's trace: what the chip timed, kept for whoever asks.

A job submitted with NPU_SUBMIT_PROFILE (or any job while the trace records) goes on the
ring with RING_FLAG_PROFILE; the core then times each task and publishes the records in
its profile queue before the job's completion (npu_hw/ring.py).  When the
driver retires the job it reads them (``collect``) and keeps a ``JobProfile``: in the
context, for GET_PROFILE (the last PROFILES_KEPT of each, PROFILE_TASKS_KEPT task records at
most), and in the trace.  A user-queue job's records (its entry asked with
NPU_QUEUE_ENTRY_PROFILE, or the trace records) come the same way without a completion
through the driver: kmd_fuse.user_queues takes them (``take_records``), under the job's
queue fence.

The trace (``Trace``) is the device's recorder of everything that happened on it, for
every context: jobs on their cores with their tasks, fences signalled, interrupts.  It
records only while on (the attribute tree's ``trace`` file: the device's owner writes
1 to start it afresh, 0 to stop), at most TRACE_EVENTS events (the oldest go first), and
reading ``trace`` gives them as JSON lines, which ``npu profile --trace`` turns into a
Chrome/Perfetto trace.
"""
from __future__ import annotations

import errno
import json
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kmd_fuse.errors import KmdError
from kmd_fuse.hw import Completion, Hardware, ProfileRecord
from npu_hw import ops as _ops  # noqa: F401 (registers the operators' task types, for their names)
from npu_hw import queues, ring, tasks

if TYPE_CHECKING:
    from kmd_fuse.context import Context, Job


class _RecordTaker(Protocol):
    def take_records(self, records: list[ProfileRecord]) -> None: ...


class ProfiledDevice(Protocol):
    """What profiling needs of a device (kmd_fuse.device.Device), named here so that this
    module stays below device.py and user_queues.py, which call it."""
    hw: Hardware
    queues: _RecordTaker
    trace: Trace
    unclaimed_profiles: dict[int, list[ProfileRecord]]
    profile_tasks_by_uid: Counter[int]

PROFILES_KEPT = 256         # finished profiled jobs a context can still ask about
PROFILE_TASKS_KEPT = 16_384  # and their task records at most (each ~200 bytes of the driver's memory)
# A user's contexts together (a user may open 256: ~4 MB of records each was ~1 GB).
PROFILE_TASKS_PER_USER = 65_536
UNCLAIMED_KEPT = 4096       # jobs whose records came before their completion (a reset can orphan some)
TRACE_EVENTS = 200_000      # events the trace keeps
TRACE_READERS_PER_USER = 4  # trace files a user may hold open at once (EMFILE beyond)


@dataclass
class JobProfile:
    fence: int
    core: int
    status: int
    submit_ns: int
    start_ns: int
    end_ns: int
    signal_ns: int
    cycles: int
    device_time_ns: int
    tasks: list[ProfileRecord] = field(default_factory=list)
    complete: bool = True       # every record arrived (the job record closes them)


class Trace:
    """The device's event recorder (see the module doc).

    Anyone may read the trace, so reading it costs the driver little: each event is
    rendered once, when recorded, and readers share one snapshot of the text (``snapshot``);
    a user holds at most TRACE_READERS_PER_USER trace files open (kmd_fuse.sysfs)."""

    def __init__(self, capacity: int = TRACE_EVENTS):
        self.enabled = False
        self.lines: deque[bytes] = deque(maxlen=capacity)   # one JSON line per event
        self.started_ns = 0
        self.changes = 0
        self._snapshot: tuple[int, bytes] = (-1, b"")   # (changes, text)

    def start(self) -> None:
        self.lines.clear()
        self.started_ns = time.monotonic_ns()
        self.enabled = True
        self.changes += 1

    def stop(self) -> None:
        self.enabled = False
        self.changes += 1

    def _add(self, event: dict) -> None:
        self.lines.append(json.dumps(event, separators=(",", ":")).encode() + b"\n")
        self.changes += 1

    def job(self, ctx: Context, job: Job, profile: JobProfile) -> None:
        base = {"context": ctx.context_id, "fence": job.fence, "core": profile.core}
        self._add({"type": "job", **base, "pid": ctx.pid, "comm": ctx.comm, "priority": job.priority,
                   "status": profile.status, "submit_ns": profile.submit_ns, "start_ns": profile.start_ns,
                   "end_ns": profile.end_ns, "signal_ns": profile.signal_ns, "cycles": profile.cycles,
                   "device_time_ns": profile.device_time_ns, "tasks": len(profile.tasks)})
        for record in profile.tasks:
            task = tasks.TASK_TYPES.get(record.opcode)
            self._add({"type": "task", **base, "core": record.core, "index": record.index, "opcode": record.opcode,
                       "name": task.name if task else f"op{record.opcode:#x}", "start_ns": record.start_ns,
                       "end_ns": record.end_ns, "cycles": record.cycles})
        self._add({"type": "fence", **base, "ts_ns": profile.signal_ns, "status": profile.status})

    def interrupt(self, ts_ns: int) -> None:
        self._add({"type": "irq", "ts_ns": ts_ns})

    def render(self) -> str:
        """The events as JSON lines, oldest first (a header line says when recording began)."""
        return self.snapshot().decode()

    def snapshot(self) -> bytes:
        """``render``'s text as bytes, one copy shared by every reader, made anew only when
        something was recorded since (joining the rendered lines: a copy, no encoding)."""
        changes, text = self._snapshot
        if changes != self.changes:
            head = {"type": "trace", "recording": self.enabled, "started_ns": self.started_ns,
                    "clock": "CLOCK_MONOTONIC", "events": len(self.lines)}
            text = json.dumps(head, separators=(",", ":")).encode() + b"\n" + b"".join(self.lines)
            self._snapshot = (self.changes, text)
        return text


def collect(device: ProfiledDevice, retired: list[tuple[Job, Completion]]) -> None:
    """Attach the chip's records to the profiled jobs just retired (before anyone is answered)."""
    profiled = [(job, completion) for job, completion in retired if job.profiled]
    by_job = device.unclaimed_profiles
    user_jobs = []
    for record in device.hw.profile_records():
        if record.job_id & queues.USER_JOB_BIT:      # a user-queue job's (traced, or its entry asked)
            user_jobs.append(record)
            continue
        # A core publishes a job's records before its completion, so records may come a
        # round before the completion does: they wait here for it.
        by_job.setdefault(record.job_id, []).append(record)
    if user_jobs:
        device.queues.take_records(user_jobs)
    while len(by_job) > UNCLAIMED_KEPT:
        del by_job[next(iter(by_job))]
    now = time.monotonic_ns()
    for job, completion in profiled:
        mine = by_job.pop(job.job_id, [])
        closing = [r for r in mine if r.kind == ring.PROFILE_JOB]
        if closing:
            start, end = closing[0].start_ns, closing[0].end_ns
        else:                   # records dropped: the completion's wall time, ending now
            start, end = now - completion.exec_ns, now
        profile = JobProfile(job.fence, completion.core, completion.status, job.submit_ns, start, end, now,
                             completion.cycles, completion.device_time_ns,
                             [r for r in mine if r.kind == ring.PROFILE_TASK], complete=bool(closing))
        if job.profile_wanted:
            keep(device, job.ctx, profile)
        if device.trace.enabled:
            device.trace.job(job.ctx, job, profile)


def keep(device: ProfiledDevice, ctx: Context, profile: JobProfile) -> None:
    """Keep ``profile`` for GET_PROFILE, forgetting the context's oldest ones beyond
    PROFILES_KEPT jobs or PROFILE_TASKS_KEPT task records, then the oldest of the
    user's fullest context while the user's contexts hold more than PROFILE_TASKS_PER_USER
    (a client's profiles are the driver's memory: they stay bounded however many tasks
    its jobs have and however many contexts it opens). Each context keeps its newest."""
    if ctx.closed:
        return
    ctx.profiles[profile.fence] = profile
    _count(device, ctx, len(profile.tasks))
    while len(ctx.profiles) > PROFILES_KEPT or (ctx.profile_tasks > PROFILE_TASKS_KEPT and len(ctx.profiles) > 1):
        forget(device, ctx, next(iter(ctx.profiles)))
    tasks_by_uid = device.profile_tasks_by_uid
    if tasks_by_uid[ctx.uid] <= PROFILE_TASKS_PER_USER:
        return
    # Past the bound: down to a margin below it at once, so that a user at the bound does
    # not cost a scan of its contexts per profiled job.
    while tasks_by_uid[ctx.uid] > PROFILE_TASKS_PER_USER - PROFILE_TASKS_KEPT // 4:
        fullest = max((c for c in ctx.ledger.contexts if len(c.profiles) > 1), key=lambda c: c.profile_tasks,
                      default=None)
        if fullest is None:
            break
        forget(device, fullest, next(iter(fullest.profiles)))


def forget(device: ProfiledDevice, ctx: Context, fence: int) -> None:
    """Drop one kept profile of ``ctx``."""
    _count(device, ctx, -len(ctx.profiles.pop(fence).tasks))


def forget_all(device: ProfiledDevice, ctx: Context) -> None:
    """Drop every profile of a context (it closed: nobody can ask any more)."""
    _count(device, ctx, -ctx.profile_tasks)
    ctx.profiles.clear()


def _count(device: ProfiledDevice, ctx: Context, tasks: int) -> None:
    ctx.profile_tasks += tasks
    left = device.profile_tasks_by_uid[ctx.uid] + tasks
    if left:
        device.profile_tasks_by_uid[ctx.uid] = left
    else:
        del device.profile_tasks_by_uid[ctx.uid]


def fill_profile(ctx: Context, req, max_tasks: int) -> None:
    """A struct npu_get_profile for the fence ``req.fence`` names, from task ``req.first`` on."""
    profile = ctx.profiles.get(req.fence)
    if profile is None:
        if req.fence in ctx.pending:
            raise KmdError(errno.EBUSY, f"fence {req.fence} has not signalled yet")
        raise KmdError(errno.ENOENT, f"no profile of fence {req.fence}: submitted without NPU_SUBMIT_PROFILE, "
                                     f"or older than the last {PROFILES_KEPT} profiled jobs "
                                     f"({PROFILE_TASKS_KEPT} task records)")
    if req.first > len(profile.tasks):
        raise KmdError(errno.EINVAL, f"first task {req.first} beyond the job's {len(profile.tasks)}")
    page = profile.tasks[req.first:req.first + max_tasks]
    req.count, req.num_tasks, req.core, req.status = len(page), len(profile.tasks), profile.core, profile.status
    req.complete = int(profile.complete)
    req.submit_ns, req.start_ns, req.end_ns, req.signal_ns = (profile.submit_ns, profile.start_ns, profile.end_ns,
                                                              profile.signal_ns)
    req.cycles, req.device_time_ns = profile.cycles, profile.device_time_ns
    for i, record in enumerate(page):
        out = req.tasks[i]
        out.opcode, out.index, out.cycles, out.start_ns, out.end_ns = (record.opcode, record.index, record.cycles,
                                                                        record.start_ns, record.end_ns)
        out.core = record.core
