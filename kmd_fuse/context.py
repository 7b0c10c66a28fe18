"""Client contexts (one per open() of the node), their jobs and fences."""
from __future__ import annotations

import errno
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import trio

from kmd_fuse import uapi
from kmd_fuse.buffer import BufferObject
from kmd_fuse.errors import KmdError
from kmd_fuse.mmu import AddressSpace

log = logging.getLogger("kmd_fuse.context")

RESULTS_KEPT = 1 << 16   # signalled fences whose status a context remembers
# ... and a user's contexts together (entries of results and failures: ~180 bytes of the
# driver's memory each; a user may open 256 contexts, which could hold 6 GB)
RESULTS_PER_USER = 1 << 17
FORGET_AT_ONCE = 1024    # entries dropped per eviction round past the user's bound
MAX_OUTSTANDING = 64     # requests one open file may have in flight (EBUSY beyond)
MAX_PENDING_JOBS = 4096  # jobs one context may have queued or running (SUBMIT fails with EAGAIN beyond)
MAX_PENDING_JOBS_PER_USER = 16_384   # and a user's contexts together (~0.9 KB of the driver's memory each)


@dataclass(eq=False)
class Job:
    job_id: int                # device-wide, what the ring carries
    ctx: Context
    fence: int                 # per context, what the client sees
    bos: list[BufferObject]
    cmd_iova: int
    cmd_size: int
    priority: int
    timeout_ms: int
    core: int = -1
    status: int | None = None  # None while pending, then 0 or -errno
    device_time_ns: int = 0
    sync_reply: object | None = None  # the NPU_SUBMIT_WAIT request (requests.Request) to answer when done
    submit_ns: int = 0         # CLOCK_MONOTONIC when SUBMIT accepted it
    profiled: bool = False     # on the ring with RING_FLAG_PROFILE (NPU_SUBMIT_PROFILE, or the trace records)
    profile_wanted: bool = False  # NPU_SUBMIT_PROFILE: keep its profile for GET_PROFILE


@dataclass(eq=False)
class Waiter:
    """A WAIT request whose reply is deferred until its fences signal or it times out."""

    request: object            # the WAIT (requests.Request), answered with request.reply()
    cancel: trio.CancelScope | None = None


class UserLedger:
    """What one user's contexts together hold of the driver's memory that no quota counts:
    remembered fence results (bounded by RESULTS_PER_USER) and pending jobs (counted when
    a SUBMIT asks for room: ``pending``)."""

    def __init__(self) -> None:
        self.contexts: set[Context] = set()
        self.results = 0           # entries of results and failures among the contexts

    def pending(self) -> int:
        """Jobs of the user's open contexts queued or running."""
        return sum(len(ctx.pending) for ctx in self.contexts)

    def bound(self) -> None:
        """Forget the oldest results of the user's fullest context (successes first: a
        forgotten one reads as signalled OK, as after RESULTS_KEPT) until within the bound."""
        if self.results <= RESULTS_PER_USER:
            return
        while self.results > RESULTS_PER_USER - FORGET_AT_ONCE:
            fullest = max(self.contexts, key=lambda c: len(c.results) + len(c.failures), default=None)
            if fullest is None or not (fullest.results or fullest.failures):
                return
            kept = fullest.results if fullest.results else fullest.failures
            for _ in range(min(FORGET_AT_ONCE, len(kept))):
                kept.popitem(last=False)
                self.results -= 1


@dataclass
class ContextStats:
    memory_peak: int = 0
    jobs_submitted: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    busy_time_ns: int = 0      # wall time the chip spent on this context's finished jobs
    busy_reported: int = 0     # the largest busy time reported so far (with running jobs)
    device_time_ns: int = 0    # simulated device time of its jobs


@dataclass(eq=False)
class Context:
    """Everything one open file holds: buffers, address space, fences, stats."""

    context_id: int
    pid: int
    uid: int
    gid: int
    comm: str
    space: AddressSpace
    buffers: dict[int, BufferObject] = field(default_factory=dict)
    next_handle: int = 1
    last_fence: int = 0
    pending: dict[int, Job] = field(default_factory=dict)         # fence -> job not yet signalled
    results: OrderedDict = field(default_factory=OrderedDict)    # recent fence -> (status, device_time_ns)
    failures: OrderedDict = field(default_factory=OrderedDict)   # failed fence -> (status, device_time_ns)
    stats: ContextStats = field(default_factory=ContextStats)
    closed: bool = False
    # request/reply state of the file: requests may overlap; each reply is kept, under its
    # request's seq, until a read takes it (in completion order, or by seq: docs/abi.md)
    in_flight: set = field(default_factory=set)                  # seqs accepted, reply not read yet
    replies: OrderedDict = field(default_factory=OrderedDict)    # seq -> reply frame, completion order
    reply_added: trio.Event = field(default_factory=trio.Event)  # set at each reply, then replaced
    poll_handle: object | None = None
    waiters: list[Waiter] = field(default_factory=list)
    last_exec_ns: int = -1             # chip time of the context's last finished job (read polling)
    profiles: OrderedDict = field(default_factory=OrderedDict)   # fence -> profiling.JobProfile (GET_PROFILE)
    profile_tasks: int = 0     # task records in ``profiles`` (bounded: profiling.keep)

    memory_allocated: int = 0          # bytes of the live buffers, kept by add/remove_buffer
    queues: list = field(default_factory=list)   # its user queues (user_queues.UserQueue) until given back
    ledger: UserLedger = field(default_factory=UserLedger)   # its user's (Device.open_context shares it)

    def add_buffer(self, bo: BufferObject) -> None:
        self.buffers[bo.handle] = bo
        self.memory_allocated += bo.size
        self.stats.memory_peak = max(self.stats.memory_peak, self.memory_allocated)

    def remove_buffer(self, bo: BufferObject) -> None:
        del self.buffers[bo.handle]
        self.memory_allocated -= bo.size

    def fence_status(self, fence: int) -> tuple[int, int]:
        """(NPU_FENCE_PENDING / 0 / -errno, device time) of a fence this context issued."""
        if fence in self.pending:
            return 1, 0
        return self.results.get(fence) or self.failures.get(fence) or (0, 0)

    def signal_fence(self, job: Job) -> None:
        """Signal ``job``'s fence: the job leaves the pending set and its status and device
        time are remembered for WAIT (successes and failures each bounded, and per user by
        the ledger); a closed context only counts it.  ``jobs.finish`` calls it, then answers
        the waiters (``jobs.settle``)."""
        self.pending.pop(job.fence, None)
        if job.status == 0:
            self.stats.jobs_completed += 1
        else:
            self.stats.jobs_failed += 1
        if self.closed:
            return                             # nobody can ask any more
        held = len(self.results) + len(self.failures)
        self.results[job.fence] = (job.status, job.device_time_ns)
        while len(self.results) > RESULTS_KEPT:
            self.results.popitem(last=False)   # forgotten successes read as signalled OK
        if job.status:
            self.failures[job.fence] = (job.status, job.device_time_ns)
            while len(self.failures) > RESULTS_KEPT:
                self.failures.popitem(last=False)
        self.ledger.results += len(self.results) + len(self.failures) - held
        self.ledger.bound()

    def forget_results(self) -> None:
        """The context closed: its remembered results go (and out of its user's count)."""
        self.ledger.results -= len(self.results) + len(self.failures)
        self.ledger.contexts.discard(self)
        self.results.clear()
        self.failures.clear()

    @property
    def outstanding(self) -> int:
        """Requests accepted whose replies have not been read."""
        return len(self.in_flight)

    def set_reply(self, frame: bytes) -> None:
        """Hold a request's reply frame until it is read; at most one per request."""
        seq = uapi.header_fields(frame)[2]
        if seq not in self.in_flight or seq in self.replies:
            # A driver bug, never the client's doing: the frame cannot be given to anyone.
            log.error("context %d: a reply for seq %d, which %s: dropped", self.context_id, seq,
                      "is answered already" if seq in self.replies else "is not in flight")
            return
        self.replies[seq] = frame
        event, self.reply_added = self.reply_added, trio.Event()
        event.set()
        handle, self.poll_handle = self.poll_handle, None
        if handle is not None:
            try:
                handle.notify()
            except OSError:
                pass   # the poller went away

    def ready_reply(self, seq: int | None) -> bytes | None:
        """The reply to ``seq`` (None: the first one completed) if it is ready."""
        if seq is None:
            return next(iter(self.replies.values()), None)
        return self.replies.get(seq)

    def take_reply(self, seq: int | None) -> bytes:
        """Remove and return a ready reply (``ready_reply``'s): its request is no longer in flight."""
        if seq is None:
            seq = next(iter(self.replies))
        frame = self.replies.pop(seq)
        self.in_flight.discard(seq)
        return frame


def check_fence(ctx: Context, fence: int) -> None:
    if not 1 <= fence <= ctx.last_fence:
        raise KmdError(errno.EINVAL, f"fence {fence} was never issued by this context")
