"""Job profiles and the device's trace: what the chip timed, kept for whoever asks.

A job submitted with NPU_SUBMIT_PROFILE (or any job while the trace records) goes on the
ring with RING_FLAG_PROFILE; the core then times each task and publishes the records in
its profile queue before the job's completion (firmware_sim/spec/ring.py).  When the
driver retires the job it reads them (``collect``) and keeps a ``JobProfile``: in the
context, for GET_PROFILE (the last PROFILES_KEPT of each), and in the trace.

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
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from firmware_sim.spec import ops as _ops  # noqa: F401 (registers the operators' task types, for their names)
from firmware_sim.spec import ring, tasks
from kmd_fuse.errors import KmdError
from kmd_fuse.hw import Completion, ProfileRecord

if TYPE_CHECKING:
    from kmd_fuse.context import Context, Job
    from kmd_fuse.device import Device

PROFILES_KEPT = 256         # finished profiled jobs a context can still ask about
UNCLAIMED_KEPT = 4096       # jobs whose records came before their completion (a reset can orphan some)
TRACE_EVENTS = 200_000      # events the trace keeps


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
    """The device's event recorder (see the module doc)."""

    def __init__(self, capacity: int = TRACE_EVENTS):
        self.enabled = False
        self.events: deque[dict] = deque(maxlen=capacity)
        self.started_ns = 0

    def start(self) -> None:
        self.events.clear()
        self.started_ns = time.monotonic_ns()
        self.enabled = True

    def stop(self) -> None:
        self.enabled = False

    def job(self, ctx: Context, job: Job, profile: JobProfile) -> None:
        base = {"context": ctx.context_id, "fence": job.fence, "core": profile.core}
        self.events.append({"type": "job", **base, "pid": ctx.pid, "comm": ctx.comm, "priority": job.priority,
                            "status": profile.status, "submit_ns": profile.submit_ns, "start_ns": profile.start_ns,
                            "end_ns": profile.end_ns, "signal_ns": profile.signal_ns, "cycles": profile.cycles,
                            "device_time_ns": profile.device_time_ns, "tasks": len(profile.tasks)})
        for record in profile.tasks:
            task = tasks.TASK_TYPES.get(record.opcode)
            self.events.append({"type": "task", **base, "index": record.index, "opcode": record.opcode,
                                "name": task.name if task else f"op{record.opcode:#x}", "start_ns": record.start_ns,
                                "end_ns": record.end_ns, "cycles": record.cycles})
        self.events.append({"type": "fence", **base, "ts_ns": profile.signal_ns, "status": profile.status})

    def interrupt(self, ts_ns: int) -> None:
        self.events.append({"type": "irq", "ts_ns": ts_ns})

    def render(self) -> str:
        """The events as JSON lines, oldest first (a header line says when recording began)."""
        head = {"type": "trace", "recording": self.enabled, "started_ns": self.started_ns,
                "clock": "CLOCK_MONOTONIC", "events": len(self.events)}
        return "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in (head, *self.events))


def collect(device: Device, retired: list[tuple[Job, Completion]]) -> None:
    """Attach the chip's records to the profiled jobs just retired (before anyone is answered)."""
    profiled = [(job, completion) for job, completion in retired if job.profiled]
    by_job = device.unclaimed_profiles
    for record in device.hw.profile_records():
        # A core publishes a job's records before its completion, so records may come a
        # round before the completion does: they wait here for it.
        by_job.setdefault(record.job_id, []).append(record)
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
            job.ctx.profiles[job.fence] = profile
            while len(job.ctx.profiles) > PROFILES_KEPT:
                job.ctx.profiles.popitem(last=False)
        if device.trace.enabled:
            device.trace.job(job.ctx, job, profile)


def fill_profile(ctx: Context, req, max_tasks: int) -> None:
    """A struct npu_get_profile for the fence ``req.fence`` names, from task ``req.first`` on."""
    profile = ctx.profiles.get(req.fence)
    if profile is None:
        if req.fence in ctx.pending:
            raise KmdError(errno.EBUSY, f"fence {req.fence} has not signalled yet")
        raise KmdError(errno.ENOENT, f"no profile of fence {req.fence}: submitted without NPU_SUBMIT_PROFILE, "
                                     f"or older than the last {PROFILES_KEPT} profiled jobs")
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
