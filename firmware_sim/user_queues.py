"""A core's side of the user-mode submission queues (layout: npu_hw/queues.py).

A core serves the enabled queue-table slots whose Q_CORE names it, beside its kernel
ring; with shared service (the C loop, ``queue_service``) every slot, one job of a queue at a
time (Q_CLAIM), core 0 the lead that polls and the others helpers that join on a backlog.
It reads each queue's memory through the IOMMU of the queue's ASID (one view, taken when
it takes the slot in, dropped when it acknowledges a disable), and trusts
nothing in it: a tail that runs backwards or more than the queue's entries ahead stops
the queue (EINVAL in its header and in Q_ERROR), an entry whose seq is not the next one
or with unknown flags completes with EINVAL, a bad command address faults in the queue's
own ASID (EFAULT). Only that queue's client sees any of it.

Arbitration (``Core.serve_round``, and the C loop ``queue_service``): queues are visited by
priority, highest first, each giving at most JOBS_PER_TURN jobs a round, equals taking
turns at going first (``UserQueues.turn``), and the kernel ring is drained
before every user-queue job, so neither a busy queue nor the driver's ring starves the
other. Between jobs the core takes in table changes (``refresh``).
"""
from __future__ import annotations

import errno
import os

import numpy as np

from firmware_sim.dma import DmaEngine, IommuFault
from firmware_sim.kernels import native
from npu_hw import memory, queues, regs
from npu_hw.memory import map_file

JOBS_PER_TURN = 4       # jobs one queue runs before the others (and the kernel ring) get a turn

def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


class ServedQueue:
    """One enabled slot, as the serving core holds it. ``done`` and ``stopped`` live in a C
    struct (``state``), which the C service loop (``firmware_sim.queue_service``) shares."""

    def __init__(self, slot: int, generation: int, asid: int, entries: int, priority: int, timeout_cap_ms: int,
                 mem: np.ndarray, header: queues.Header, done: int, doorbell_fd: int, completion_fd: int,
                 stopped: bool = False):
        self.slot, self.generation, self.asid, self.entries = slot, generation, asid, entries
        self.priority, self.timeout_cap_ms = priority, timeout_cap_ms
        self.mem = mem                  # the queue memory, through the IOMMU (writable)
        self.header = header            # its index fields
        self.doorbell_fd, self.completion_fd = doorbell_fd, completion_fd
        self.state = native.ffi.new("struct npu_uq *")
        self.done = done                # seq of the last job completed (mirrors Q_DONE)
        self.stopped = stopped

    @property
    def done(self) -> int:
        return self.state.done

    @done.setter
    def done(self, seq: int) -> None:
        self.state.done = seq

    @property
    def stopped(self) -> bool:
        return bool(self.state.stopped)

    @stopped.setter
    def stopped(self, value: bool) -> None:
        self.state.stopped = int(value)


class UserQueues:
    """The queues one core serves."""

    def __init__(self, bus, core: int, regs_view: regs.RegisterView, dma: DmaEngine):
        self.bus, self.core, self.regs, self.dma = bus, core, regs_view, dma
        try:
            self._map = map_file(memory.queue_table_path(bus))
            self.table: regs.RegisterView | None = regs.RegisterView(self._map)
        except OSError:
            self.table = None          # a chip started without a queue table serves none
        self.served: list[ServedQueue] = []
        self.changes = 0               # how many times ``served`` was replaced (the C loop follows it)
        self.table_gen = -1
        self.shared = False            # serves every slot, by claim (set once the C loop is there)
        self._acked = [-1] * queues.QUEUE_SLOTS   # each slot's generation this core acknowledged

    @property
    def helper(self) -> bool:
        """A core of shared service that is not the lead: it leaves HDR_POLLING and the doorbells to core 0."""
        return self.shared and self.core != 0

    # ---- the table ----
    def refresh(self) -> bool:
        """Take in table changes (cheap when there are none); True if the served set changed."""
        table = self.table
        if table is None:
            return False
        generation = self.regs.words()[0][regs.QUEUE_TABLE_GEN >> 2]
        if generation == self.table_gen:
            return False
        self.table_gen = generation
        held = {q.slot: q for q in self.served}
        served, acks = [], []
        for slot in range(queues.QUEUE_SLOTS):
            base = queues.slot_offset(slot)
            slot_gen = table.read32(base + queues.Q_GENERATION)
            # Every core acknowledges every slot's change (the driver waits for all of them).
            if slot_gen != self._acked[slot]:
                acks.append((slot, slot_gen))
            if not self.shared and table.read32(base + queues.Q_CORE) != self.core:
                continue
            current = held.get(slot)
            if current is not None and current.generation == slot_gen:
                served.append(current)
                continue
            if table.read32(base + queues.Q_CONTROL) & queues.Q_ENABLED:
                taken = self._take(slot, slot_gen)
                if taken is not None:
                    served.append(taken)
        served.sort(key=lambda q: -q.priority)
        for q in self.served:
            if q not in served:
                _close_lines(q)
        self.served = served
        self.changes += 1
        # Acknowledged only now: the old views are no longer served and their lines are
        # closed, so a queue the driver gives back holds nothing in this core any more.
        for slot, slot_gen in acks:
            self.regs.write32(queues.ack_register(self.core, slot), slot_gen)
            self._acked[slot] = slot_gen
        return True

    def _take(self, slot: int, generation: int) -> ServedQueue | None:
        table = self.table
        assert table is not None
        base = queues.slot_offset(slot)
        entries = table.read32(base + queues.Q_ENTRIES)
        asid = table.read32(base + queues.Q_ASID)
        if entries <= 0 or entries & (entries - 1):
            table.write32(base + queues.Q_ERROR, -errno.EINVAL)
            return None
        try:
            mem = self.dma.map_region(asid, table.read64(base + queues.Q_IOVA), queues.memory_size(entries))
        except IommuFault:
            table.write32(base + queues.Q_ERROR, -errno.EFAULT)
            return None
        # This registration's own lines (the driver made them for it): a client that held the
        # slot before keeps only the ends of lines nobody else uses any more.
        name = table.read64(base + queues.Q_LINES)
        try:
            doorbell = os.open(memory.queue_line_path(self.bus, slot, name, "db"),
                               os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            table.write32(base + queues.Q_ERROR, -(exc.errno or errno.EIO))
            return None
        try:
            # No reader (ENXIO): the driver has already let go of the queue.
            completion = os.open(memory.queue_line_path(self.bus, slot, name, "cq"),
                                 os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            os.close(doorbell)
            table.write32(base + queues.Q_ERROR, -(exc.errno or errno.EIO))
            return None
        # A queue an earlier process of this core stopped (Q_ERROR: the core's own register, which
        # no client reaches) stays stopped: a restart or a successor core must not revive it.
        return ServedQueue(slot, generation, asid, entries, table.read32(base + queues.Q_PRIORITY),
                           table.read32(base + queues.Q_TIMEOUT_CAP_MS), mem, queues.Header(mem),
                           table.read64(base + queues.Q_DONE), doorbell, completion,
                           stopped=table.read32(base + queues.Q_ERROR) != 0)

    def traced(self, q: ServedQueue) -> bool:
        """Whether the driver's trace wants the queue's jobs timed (read per job: it toggles)."""
        assert self.table is not None
        return bool(self.table.read32(queues.slot_offset(q.slot) + queues.Q_CONTROL) & queues.Q_TRACE)

    def doorbells(self) -> list[int]:
        return [] if self.helper else [q.doorbell_fd for q in self.served]

    def release_claims(self) -> None:
        """Let go of the queues an earlier process of this core held (it died in or around a job;
        its job's completion is posted first, ``Core.finish_aborted_user_job``). Only this core
        ever sets its own number in Q_CLAIM, so the read and the store cannot race."""
        if self.table is None:
            return
        for slot in range(queues.QUEUE_SLOTS):
            at = queues.slot_offset(slot) + queues.Q_CLAIM
            if self.table.read32(at) == self.core + 1:
                self.table.write32(at, 0)

    # ---- work ----
    def has_work(self) -> bool:
        for q in self.served:
            if not q.stopped and q.header.read64(queues.HDR_TAIL) != q.done:
                return True
        return False

    def set_polling(self, polling: bool) -> None:
        """Tell the clients whether a doorbell is needed (0: the core may be asleep), and the
        other cores whether this one is awake (UQ_AWAKE). A helper's clients ring the lead."""
        if not self.helper:
            for q in self.served:
                q.header.write32(queues.HDR_POLLING, int(polling))
        self.regs.write32(regs.core_bank(self.core) + regs.UQ_AWAKE, regs.UQ_AWAKE_ON if polling else 0)

    def next_entry(self, q: ServedQueue) -> tuple[int, int, int, int, int] | None:
        """(seq, cmd_iova, cmd_size, timeout_ms, flags) of the queue's next job, or None;
        a tail the client garbled stops the queue."""
        if q.stopped:
            return None
        tail = q.header.read64(queues.HDR_TAIL)
        if tail == q.done:
            return None
        if tail < q.done or tail - q.done > q.entries:
            self.stop(q, -errno.EINVAL)
            return None
        seq = q.done + 1
        at = queues.entries_offset() + (seq & (q.entries - 1)) * queues.ENTRY_STRUCT.size
        written, cmd_iova, cmd_size, timeout_ms, flags, _ = queues.ENTRY_STRUCT.unpack_from(q.mem, at)
        if written != seq:
            flags = -1                # not this job's entry: it completes with EINVAL
        return seq, cmd_iova, cmd_size, timeout_ms, flags

    def stop(self, q: ServedQueue, status: int) -> None:
        """Stop the queue with ``status``; its sleeping waiters learn it at once (not at their
        safety-net timeout): their jobs will never complete."""
        q.stopped = True
        q.header.set_error(status)
        assert self.table is not None
        self.table.write32(queues.slot_offset(q.slot) + queues.Q_ERROR, status)
        queues.store_load_fence()     # HDR_ERROR visible before HDR_WAITING is read
        _signal(q, q.header.read32(queues.HDR_WAITING))

    def post(self, q: ServedQueue, seq: int, status: int, cycles: int, device_ns: int, fault_iova: int,
             exec_ns: int, failed_task: int = -1) -> None:
        """Write one completion, publish it (HDR_DONE), count it, and signal a sleeping client;
        ``failed_task`` (>= 0): the task the job failed in, for HDR_FAILED_TASK."""
        at = queues.completions_offset(q.entries) + (seq & (q.entries - 1)) * queues.COMPLETION_STRUCT.size
        queues.COMPLETION_STRUCT.pack_into(q.mem, at, seq, status, self.core, cycles, device_ns, fault_iova,
                                           exec_ns)
        header = q.header
        if status and failed_task >= 0:
            header.write64(queues.HDR_FAILED_TASK, queues.failed_task_word(seq, failed_task))
        header.write64(queues.HDR_DONE, seq)
        q.done = seq
        table = self.table
        assert table is not None
        _, u64 = table.words()
        base = queues.slot_offset(q.slot) >> 3
        u64[base + (queues.Q_DONE >> 3)] = seq
        if status:
            u64[base + (queues.Q_FAILED >> 3)] += 1
        u64[base + (queues.Q_BUSY_NS >> 3)] += exec_ns
        if cycles:
            u64[base + (queues.Q_DEVICE_NS >> 3)] += device_ns
            u64[base + (queues.Q_CYCLES >> 3)] += cycles
        queues.store_load_fence()     # HDR_DONE visible before HDR_WAITING is read: no lost wake-up
        _signal(q, header.read32(queues.HDR_WAITING))

    def turn(self) -> None:
        """After a round that ran a job: the queues of each priority turn by one (the first
        becomes the last), so equals take turns at going first (queue_service.c does the same)."""
        served, start = self.served, 0
        while start < len(served):
            end = start + 1
            while end < len(served) and served[end].priority == served[start].priority:
                end += 1
            served[start:end] = served[start + 1:end] + served[start:start + 1]
            start = end

    def find(self, slot: int) -> ServedQueue | None:
        return next((q for q in self.served if q.slot == slot), None)

    def drop_views(self) -> None:
        for q in self.served:
            _close_lines(q)
        self.served = []
        self.changes += 1
        self.table_gen = -1


def _signal(q: ServedQueue, waiting: int) -> None:
    """Wake the queue's sleeping client as its HDR_WAITING asks (0: nobody sleeps): FUTEX_WAKE
    on HDR_DONE, one byte on its completion line, or both. Neither can block the core."""
    if queues.wants_futex(waiting):
        q.header.wake_futex()
    if not queues.wants_line(waiting) or q.completion_fd < 0:
        return
    try:
        os.write(q.completion_fd, b"\x01")
    except BlockingIOError:   # the line is full: a wake-up is pending anyway
        pass
    except BrokenPipeError:   # no reader: the queue's client and the driver let go of it
        pass


def _close_lines(q: ServedQueue) -> None:
    for fd in (q.doorbell_fd, q.completion_fd):
        if fd >= 0:
            os.close(fd)
    q.doorbell_fd = q.completion_fd = -1


def abort_status(view: regs.RegisterView, bank: int) -> int:
    return _signed(view.read32(bank + regs.UQ_ABORT_STATUS)) or -errno.EIO
