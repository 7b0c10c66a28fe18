"""The core's user-queue service loop in C (``kernels/native/queue_service.c``): what it is
handed, and the Python path it leaves a job to.

The Python loop (``Core.serve_queues``) spent about 9 us of CPU per NOP job on bookkeeping:
reading the entry, a dozen register stores, the completion, two ``getppid`` fences. The C
loop does the same steps for a job whose every part it can run: a checked entry without
flags, a queue not traced, no fault injection or pacing, and a command buffer whose job plan
(``job_plans``) the Python path made and this module handed over (:meth:`QueueService.remember`),
its bytes unchanged. Everything else returns to Python before any of the job is done: the
first run of a command buffer, a bad entry or tail, a profiled or traced job, fault injection,
a plan with Python steps, a graph job whose choice of threads (``graph_threads``) has not
settled on one thread for good; a C step failing mid-job returns with the job still running, for Python to
complete (``executor.failed_step_result``). So a job's checks
are the Python path's, or the C loop's same-or-stricter subset of them: the IOMMU
translations a replay uses are the first run's, valid until an invalidation, which drops the
plan (``job_plans.GENERATION`` moves: the C loop uses only plans taken at the current value).

Rounds and their order are the Python loop's: queues by priority, at most JOBS_PER_TURN jobs
each, equals taking turns at going first, ring-control entries and table changes taken in
between any two jobs, the kernel ring's turn between rounds.

Shared service (``SHARED``, the default; ``NPU_SHARED_QUEUES=0`` leaves each queue to its Q_CORE
as before): every core serves every queue, one job of a queue at a time (Q_CLAIM), so one
polling core serves many clients' small jobs while the others sleep, and a second core
joins only on a backlog (docs/hardware.md, *Shared service*). Core 0 is the lead: it polls,
keeps the clients' HDR_POLLING and answers their doorbells. A helper sleeps on its kernel
doorbell and takes a job only when the lead sleeps, has been in one job for ``JOIN_NS``, or the
job has waited ``WAIT_NS`` with its queue not moving (the lead preempted: it looks every
``TICK_MS`` while the lead is awake); the lead calls it in when it starts or ends a job of
``JOIN_NS`` or more, or one for Python, while another queue waits.

Where it finds nothing to run, :meth:`QueueService.run` stays in C too: the idle poll
(``IdlePoll``'s rule), the polling flags, the fence, the sleep on the doorbells and the next
round, back in Python only for what needs it (``core.Core.run_forever``): a woken core spent
about 45 us of Python per wake-up.
"""
from __future__ import annotations

import os

import numpy as np

from firmware_sim import idle_poll, job_plans
from firmware_sim.dma import DmaEngine, IommuFault
from firmware_sim.kernels import native
from firmware_sim.timing import HardwareProfile
from firmware_sim.user_queues import JOBS_PER_TURN, ServedQueue, UserQueues
from firmware_sim.wakeups import WatchdogArm
from npu_hw import queues, regs, ring

__all__ = ["QueueService", "IDLE", "PYTHON", "FAILED", "BETWEEN", "RING", "WORK", "WOKE", "ASK", "SHARED"]

# Shared service (above); NPU_SHARED_QUEUES=0: each queue served by its Q_CORE alone (the chip before).
SHARED = os.environ.get("NPU_SHARED_QUEUES", "1") != "0"
JOIN_NS = 20_000       # a job this long on the lead is a backlog for the queues waiting
WAIT_NS = 200_000      # a queue's job waiting this long, its queue not moving, is one too
TICK_MS = 2            # how often a helper looks while the lead is awake

# The offsets the C loop was written for, each checked against its npu_hw name.
_LAYOUT = {
    "REG_FAULT_INJECT": regs.FAULT_INJECT, "REG_WATCHDOG_MS": regs.WATCHDOG_MS, "REG_PACING": regs.PACING,
    "REG_QUEUE_TABLE_GEN": regs.QUEUE_TABLE_GEN, "BANK_RING_HEAD": regs.RING_HEAD, "BANK_RING_TAIL": regs.RING_TAIL,
    "BANK_CORE_STATE": regs.CORE_STATE, "BANK_BUSY_CYCLES": regs.BUSY_CYCLES, "BANK_CURRENT_JOB": regs.CURRENT_JOB,
    "BANK_JOB_START_NS": regs.JOB_START_NS, "BANK_BUSY_NS": regs.BUSY_NS, "BANK_JOB_TIMEOUT_MS": regs.JOB_TIMEOUT_MS,
    "BANK_UQ_SLOT": regs.UQ_SLOT, "BANK_UQ_SEQ": regs.UQ_SEQ, "CORE_IDLE": regs.CORE_IDLE,
    "BANK_UQ_AWAKE": regs.UQ_AWAKE, "AWAKE": regs.UQ_AWAKE_ON, "ASLEEP_TICKING": regs.UQ_ASLEEP_TICKING,
    "QTAB_SLOT_SIZE": queues.QTAB_SLOT_SIZE, "Q_CLAIM": queues.Q_CLAIM, "Q_ERROR": queues.Q_ERROR,
    "JOIN_NS": JOIN_NS, "WAIT_NS": WAIT_NS, "TICK_MS": TICK_MS,
    "CORE_BUSY": regs.CORE_BUSY, "PACING_ON": regs.PACING_ON, "RING_ENTRY_SIZE": ring.RING_ENTRY_STRUCT.size,
    "RING_OP_JOB": ring.OP_JOB, "Q_CONTROL": queues.Q_CONTROL, "Q_TRACE": queues.Q_TRACE, "Q_DONE": queues.Q_DONE,
    "Q_BUSY_NS": queues.Q_BUSY_NS, "Q_DEVICE_NS": queues.Q_DEVICE_NS, "Q_CYCLES": queues.Q_CYCLES,
    "HDR_TAIL": queues.HDR_TAIL, "HDR_DONE": queues.HDR_DONE, "HDR_WAITING": queues.HDR_WAITING,
    "HDR_POLLING": queues.HDR_POLLING, "WAIT_FUTEX": queues.WAIT_FUTEX,
    "HEADER_SIZE": queues.HEADER_SIZE, "ENTRY_SIZE": queues.ENTRY_STRUCT.size,
    "COMPLETION_SIZE": queues.COMPLETION_STRUCT.size, "JOBS_PER_TURN": JOBS_PER_TURN,
    "USER_JOB_BIT": queues.USER_JOB_BIT, "SEQ_MASK": queues.USER_JOB_SEQ_MASK,
    "GROW_START_NS": idle_poll.GROW_START_NS, "CONTENDED_NS": idle_poll.CONTENDED_NS,
    "LOAD_CHECK_NS": idle_poll.LOAD_CHECK_NS,
}

# Why ``serve`` returned (queue_service.h).
IDLE, PYTHON, FAILED, BETWEEN, RING = 0, 1, 2, 3, 4
# Why npu_uq_rest returned (queue_service.h); ``run`` returns ASKS when it asks.
WORK, WOKE, ASK = 0, 1, 2
ASKS = ASK + 16
_ffi = native.ffi


def _check_layout(lib) -> None:
    wrong = [name for name, value in _LAYOUT.items() if getattr(lib, f"NPU_UQ_{name}") != value]
    wrong += [name for name, value in (("IDLE", IDLE), ("PYTHON", PYTHON), ("FAILED", FAILED), ("BETWEEN", BETWEEN),
                                       ("RING", RING), ("WORK", WORK), ("WOKE", WOKE), ("ASK", ASK),
                                       ("ASKS", ASKS))
              if getattr(lib, f"NPU_UQ_{name}") != value]
    # The C loop reads an entry's and writes a completion's fields at these formats' offsets.
    if queues.ENTRY_STRUCT.format != "<QQIIII" or queues.COMPLETION_STRUCT.format != "<QiIQQQQ":
        wrong.append("the entry or completion format")
    if wrong:
        raise ImportError(f"queue_service.h disagrees with npu_hw on {', '.join(wrong)}")


def _address(buffer) -> object:
    return _ffi.from_buffer("uint8_t[]", buffer, require_writable=True)


class QueueService:
    """The C loop's state for one core (``struct npu_uq_core``) and the Python objects its
    pointers point into, which it keeps alive: the queues' memory, the plans it remembers."""

    def __init__(self, lib, regs_map, bank: int, ring_map, ring_entries: int, table_map, core: int,
                 dma: DmaEngine, profile: HardwareProfile, watch: WatchdogArm | None,
                 peers: list[int] | None = None, shared: bool = SHARED):
        _check_layout(lib)
        self._lib, self.dma, self.profile = lib, dma, profile
        self._regs = regs.RegisterView(regs_map)
        c = self.c = _ffi.new("struct npu_uq_core *")
        self._keep = [_address(regs_map), _address(ring_map), _address(table_map)]
        c.regs, c.ring, c.table = self._keep
        c.bank, c.ring_entries, c.core = bank, ring_entries, core
        c.generation = job_plans.GENERATION
        self._share(shared, core, peers)
        if watch is not None:
            self._keep.append(armed := _address(watch.flag))
            c.armed, c.watchdog_fd = armed, watch.fd
        else:
            c.armed, c.watchdog_fd = _ffi.NULL, -1
        self._changes = -1                  # UserQueues.changes the C loop's queues reflect
        self._queue_array = None
        self._plans: list[tuple | None] = [None] * lib.NPU_UQ_PLANS   # what each remembered plan points into
        self._next_plan = 0
        self._serve, self._has_work, self._poll = lib.npu_uq_serve, lib.npu_uq_has_work, lib.npu_uq_poll
        self._run = lib.npu_uq_run
        # The idle poll of ``run`` (IdlePoll's rule in C), its /proc/loadavg kept open by a probe.
        self._probe = idle_poll.RunQueueProbe()
        idle = c.idle
        idle.max_ns = max(0, int(profile.idle_poll_ns))
        idle.window_ns = min(idle.max_ns, idle_poll.GROW_START_NS)
        idle.checked_ns = -idle_poll.LOAD_CHECK_NS
        idle.preempted_at = idle_poll.preemptions()
        idle.cpus, idle.loadavg_fd = os.cpu_count() or 1, self._probe.fd

    def _share(self, shared: bool, core: int, peers: list[int] | None) -> None:
        """Shared service's roles: core 0 the lead, which calls the others in through ``peers``
        (every core's kernel doorbell, by core; None: a core alone in its process, no call-in)."""
        c = self.c
        c.shared, c.lead = int(shared), int(core == 0)
        c.lead_bank, c.helper_count = regs.core_bank(0), 0
        if peers is not None and shared and core == 0:
            helpers = list(range(1, min(len(peers), self._lib.NPU_UQ_MAX_HELPERS + 1)))
            for i, helper in enumerate(helpers):
                c.helper_banks[i], c.helper_fds[i] = regs.core_bank(helper), peers[helper]
            c.helper_count = len(helpers)

    @property
    def shared(self) -> bool:
        return bool(self.c.shared)

    @property
    def joins(self) -> int:
        """How often the lead called a helper in."""
        return int(self.c.joins)

    def release(self, q: ServedQueue) -> None:
        """Let go of ``q`` after the Python path ended the job the C loop left it (shared service)."""
        self._lib.npu_uq_release(self.c, q.state)

    @classmethod
    def start(cls, core) -> QueueService | None:
        """The service of ``core`` (a ``firmware_sim.core.Core``), or None without the C
        library or a queue table: its queues then take the Python loop alone."""
        lib = native.library()
        if lib is None or core.queues.table is None:
            return None
        return cls(lib, core._regs_map, core.bank, core.ring, core.entries, core.queues._map, core.core,
                   core.dma, core.profile, core.watch, core.peers)

    # ---- the served queues ----
    def take_in(self, user_queues: UserQueues) -> None:
        """Point the C loop at the queues served now (a new list after every table change: the
        old one's lines are closed), from the start of a round. Every entry point calls it. The
        service keeps no reference to a queue: one the core let go of is freed at once."""
        c = self.c
        if user_queues.changes != self._changes:
            self._changes = user_queues.changes
            served = user_queues.served
            self._queue_array = _ffi.new("struct npu_uq *[]", max(1, len(served)))
            for i, q in enumerate(served):
                state = q.state
                state.mem = _ffi.from_buffer("uint8_t[]", q.mem, require_writable=True)   # q.mem keeps it mapped
                state.slot = c.table + queues.slot_offset(q.slot)
                state.entries, state.slot_index, state.asid = q.entries, q.slot, q.asid
                state.priority, state.completion_fd, state.doorbell_fd = q.priority, q.completion_fd, q.doorbell_fd
                state.seen_ns = 0
                self._timeouts(q)
                self._queue_array[i] = state
            c.queues, c.count = self._queue_array, len(served)
            c.at = c.turn = c.round_ran = 0
        c.table_gen = user_queues.table_gen

    def _timeouts(self, q: ServedQueue) -> None:
        """The queue's job timeouts at today's WATCHDOG_MS, by ``regs.job_timeout_ms``: a job
        asking none gets the first, one asking a timeout has it clamped to the second."""
        watchdog = self._regs.read32(regs.WATCHDOG_MS)
        state = q.state
        state.watchdog_ms = watchdog
        state.timeout_default_ms = regs.job_timeout_ms(0, watchdog, q.timeout_cap_ms)
        state.timeout_cap_ms = regs.job_timeout_ms(0xFFFFFFFF, watchdog, q.timeout_cap_ms)

    # ---- running ----
    def serve(self, user_queues: UserQueues) -> int:
        """Run what the C loop can, from the round's position; why it stopped (IDLE ...)."""
        self.take_in(user_queues)
        return self._serve(self.c)

    @property
    def ran(self) -> int:
        return self.c.ran

    def current(self, user_queues: UserQueues) -> ServedQueue:
        """The queue at the round's position (the C loop turns each priority's queues round)."""
        slot = self.c.queues[self.c.at].slot_index
        return next(q for q in user_queues.served if q.slot == slot)

    def next_turn(self) -> None:
        """The current queue ran one more job (from Python)."""
        self.c.turn += 1
        self.c.round_ran += 1

    def next_queue(self) -> None:
        """The current queue has nothing more to run this round."""
        self.c.at += 1
        self.c.turn = 0

    def has_work(self, user_queues: UserQueues) -> bool:
        """Whether the kernel ring or a queue not stopped holds work."""
        self.take_in(user_queues)
        return bool(self._has_work(self.c))

    def poll(self, user_queues: UserQueues, deadline_ns: int) -> bool:
        """Watch the kernel ring and the queues until work comes or ``deadline_ns``."""
        self.take_in(user_queues)
        return bool(self._poll(self.c, deadline_ns))

    def run(self, user_queues: UserQueues, kernel_doorbell: int, may_sleep: bool, sleep_ms: int) -> int:
        """The core's loop while nothing needs Python (``npu_uq_run``): serve; when idle, poll
        (IdlePoll's window), clear the polling flags, fence, look again, sleep on the doorbells;
        serve again. Returns PYTHON, FAILED or BETWEEN as ``serve`` does; RING when the kernel
        ring holds an entry, the table changed or the kernel doorbell rang; ASKS when the core
        would sleep but Python must put it to sleep (recycling, no queue, a table change: its
        polling flags cleared, nothing found after the fence)."""
        self.take_in(user_queues)
        return int(self._run(self.c, kernel_doorbell, may_sleep, sleep_ms))

    def close(self) -> None:
        self._probe.close()

    def failed_job(self) -> tuple[int, int, int, int, int]:
        """(seq, started ns, timeout ms, C status, task index) of the job NPU_UQ_FAILED left running."""
        c = self.c
        kept = self._plans[c.failed_plan]
        assert kept is not None
        index = kept[0].task_index(c.failed_step)
        return c.failed_seq, c.failed_started_ns, c.failed_timeout_ms, c.failed_status, index

    def remember(self, q: ServedQueue, cmd_iova: int, cmd_size: int) -> None:
        """After the Python path ran a job of ``q``: its timeouts again (WATCHDOG_MS may have
        moved), and its command buffer's plan if the C loop can replay it (again)."""
        self._timeouts(q)
        self.release_stale()
        if not cmd_size:
            return
        generation = job_plans.GENERATION[0]
        for at, p in enumerate(self.c.plans):
            if p.live != _ffi.NULL and p.cmd_iova == cmd_iova and p.cmd_size == cmd_size and p.asid == q.asid:
                p.live = _ffi.NULL        # taken again below if it still may be
                self._plans[at] = None
        found = job_plans.replayable(self.dma, q.asid, cmd_iova, cmd_size)
        if found is None:
            return
        plan, steps, count, indexer = found
        dma = self.dma
        try:
            dma.bind(q.asid)
            if len(dma.translate(cmd_iova, cmd_size, write=False)) != 1:
                return                    # gathered from several objects: no view to compare with
            live = dma.read_array(cmd_iova, np.uint8, (cmd_size,))
        except IommuFault:
            return
        copy = _ffi.from_buffer("uint8_t[]", plan.command)
        live_ptr = _ffi.from_buffer("uint8_t[]", live)
        at = self._next_plan
        self._next_plan = (at + 1) % len(self._plans)
        slot = self.c.plans[at]
        slot.live = _ffi.NULL             # not used while it changes
        slot.generation, slot.cmd_iova, slot.cmd_size, slot.asid = generation, cmd_iova, cmd_size, q.asid
        slot.copy, slot.steps, slot.count = copy, steps, count
        slot.cycles, slot.device_ns = plan.cycles, self.profile.nanoseconds(plan.cycles) if plan.cycles else 0
        # What the C pointers point into (not the plan: its per-task records are no concern of the C loop).
        self._plans[at] = (indexer, steps, plan.command, live, copy, live_ptr)
        slot.live = live_ptr

    def release_stale(self) -> None:
        """Let go of the plans job_plans dropped since they were taken (the C loop no longer
        uses them): their memory, and the views and mappings of freed buffers they hold."""
        generation = job_plans.GENERATION[0]
        for at, slot in enumerate(self.c.plans):
            if self._plans[at] is not None and slot.generation != generation:
                slot.live = _ffi.NULL
                self._plans[at] = None
