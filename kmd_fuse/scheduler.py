"""Job scheduler: software queues in front of the cores' command rings.

Jobs wait in per-priority queues, one FIFO per context, served round-robin so
that one busy client cannot starve another; higher priorities go first, but a lower
queue that has waited STARVATION_NS gives one job before them (every client may ask
for HIGH).  A job moves onto the ring of the core with the fewest jobs in flight while
that ring has room and its context has fewer than RING_JOBS_PER_CORE a core on the
rings (jobs on a ring run first, whoever submitted them: one client filling the rings
would delay everyone by that many jobs).  A core never has more jobs in flight than its
completion queue has slots, so the chip never stalls on completions.  A full ring is
back-pressure: the job simply stays queued until an interrupt frees a slot.
"""
from __future__ import annotations

import time
from collections import OrderedDict, deque

from kmd_fuse.context import Context, Job
from kmd_fuse.hw import Completion, Hardware
from npu_hw import ring

PRIORITIES = 3
RING_JOBS_PER_CORE = 8        # a context's share of the rings: jobs it may have on them, per core
STARVATION_NS = 200_000_000   # a lower queue gives at least one job this often, whatever waits above it


class Scheduler:
    def __init__(self, hw: Hardware):
        self.hw = hw
        self.queues: list[OrderedDict[int, deque[Job]]] = [OrderedDict() for _ in range(PRIORITIES)]
        self.served_ns = [0] * PRIORITIES                         # when each queue last gave a job
        self.in_flight: dict[int, Job] = {}                       # job id -> job on a ring
        self.per_core = [0] * hw.num_cores
        self.on_rings: dict[int, int] = {}                        # context id -> its jobs on the rings
        self.control: list[deque[tuple[int, int]]] = [deque() for _ in range(hw.num_cores)]
        self.max_per_core = hw.entries - 1
        self.queued = 0
        self.halted = False                                       # during a reset

    # ---- queueing ----
    def enqueue(self, job: Job) -> None:
        queue = self.queues[job.priority]
        queue.setdefault(job.ctx.context_id, deque()).append(job)
        self.queued += 1

    def cancel(self, ctx: Context) -> list[Job]:
        """Remove a context's queued jobs (those on a ring run to completion)."""
        cancelled = []
        for queue in self.queues:
            jobs = queue.pop(ctx.context_id, None)
            if jobs:
                cancelled.extend(jobs)
        self.queued -= len(cancelled)
        return cancelled

    def invalidate(self, asid: int, bo_id: int = 0) -> None:
        """Make every core drop cached translations (ordered after jobs already on its ring).
        An invalidation of the whole ASID (bo_id 0) replaces that ASID's queued ones."""
        for control in self.control:
            if not bo_id and control:
                kept = [entry for entry in control if entry[0] != asid]
                if len(kept) != len(control):
                    control.clear()
                    control.extend(kept)
            control.append((asid, bo_id))

    def control_backlog(self) -> bool:
        """Ring-control entries still wait for ring room (nothing but a pump moves them)."""
        return any(self.control)

    def _next_job(self) -> Job | None:
        # Highest priority first, except that a lower queue that has waited STARVATION_NS
        # gives one job first: any client may submit at NPU_PRIO_HIGH, and a flood of such
        # jobs must not hold everyone else's until it ends. A context with its share of
        # the rings already (RING_JOBS_PER_CORE a core) waits for one of them to finish.
        now = time.monotonic_ns()
        for priority in range(PRIORITIES - 1):
            if self._starved(priority, now):
                job = self._pop(priority, now)
                if job is not None:
                    return job
        for priority in reversed(range(PRIORITIES)):
            job = self._pop(priority, now)
            if job is not None:
                return job
        return None

    def _starved(self, priority: int, now: int) -> bool:
        """Whether ``priority``'s queue has had a job waiting, and no job served, for
        STARVATION_NS: then it gets one job (one per STARVATION_NS at worst, so a flood of
        old low-priority jobs does not turn the order around either)."""
        queue = self.queues[priority]
        if not queue:
            return False
        waiting_since = max(self.served_ns[priority], next(iter(queue.values()))[0].submit_ns)
        return now - waiting_since >= STARVATION_NS

    def _pop(self, priority: int, now: int) -> Job | None:
        """The next job of ``priority``'s queue, round-robin between the contexts below
        their share of the rings; None if there is none."""
        queue = self.queues[priority]
        share = RING_JOBS_PER_CORE * self.hw.num_cores
        ctx_id = next((c for c in queue if self.on_rings.get(c, 0) < share), None)
        if ctx_id is None:
            return None
        self.served_ns[priority] = now
        jobs = queue[ctx_id]
        job = jobs.popleft()
        if jobs:
            queue.move_to_end(ctx_id)                             # round-robin between contexts
        else:
            del queue[ctx_id]
        self.queued -= 1
        return job

    # ---- rings ----
    def pump(self) -> None:
        """Move work onto the rings while there is room, then ring the doorbells."""
        if self.halted:
            return
        touched = set()
        for core in range(self.hw.num_cores):
            while self.control[core] and self.hw.ring_space(core) > 0:
                asid, bo_id = self.control[core].popleft()
                self.hw.push(core, ring.OP_INVALIDATE, asid, bo_id=bo_id)
                touched.add(core)
        while self.queued:
            core = min(range(self.hw.num_cores), key=self.per_core.__getitem__)
            if self.per_core[core] >= self.max_per_core or self.hw.ring_space(core) == 0:
                break
            job = self._next_job()
            if job is None:                                       # every waiting context has its share
                break
            job.core = core
            self.in_flight[job.job_id] = job
            self.per_core[core] += 1
            self.on_rings[job.ctx.context_id] = self.on_rings.get(job.ctx.context_id, 0) + 1
            self.hw.push(core, ring.OP_JOB, job.ctx.space.asid, job.job_id, job.cmd_iova, job.cmd_size,
                         job.timeout_ms, flags=ring.RING_FLAG_PROFILE if job.profiled else 0)
            touched.add(core)
        for core in touched:
            self.hw.doorbell(core)

    def retire(self, completion: Completion) -> Job | None:
        job = self.in_flight.pop(completion.job_id, None)
        if job is not None:
            self.per_core[job.core] -= 1
            left = self.on_rings.pop(job.ctx.context_id, 1) - 1
            if left:
                self.on_rings[job.ctx.context_id] = left
        return job

    def abort_in_flight(self) -> list[Job]:
        """A reset emptied the rings: every job on them is lost."""
        jobs = list(self.in_flight.values())
        self.in_flight.clear()
        self.on_rings.clear()
        self.per_core = [0] * self.hw.num_cores
        for control in self.control:
            control.clear()
        return jobs
