"""One core in the test's own process, with its kernel ring, a queue table and chip memory
(no driver): the rig of the user-queue tests of the chip (tests/firmware_sim)."""
from __future__ import annotations

import os

import numpy as np

from firmware_sim import core as core_unit
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, memory, queues, regs, ring, tasks
from tests.support.chip_memory import ASID, ChipMemory

ENTRIES = 8          # of the kernel ring
QUEUE_ENTRIES = 8
BANK = regs.core_bank(0)


class Rig:
    """One core (in this process) with its kernel ring, a queue table and chip memory; its
    queues served by the C loop (``native``) or by the Python one alone."""

    def __init__(self, bus, native: bool = True, cores: int = 1):
        self.native = native
        for path, size in ((memory.regs_path(bus), regs.REGS_SIZE),
                           (memory.queue_table_path(bus), queues.QTAB_SIZE),
                           (memory.ring_path(bus, 0), ENTRIES * ring.RING_ENTRY.itemsize),
                           (memory.cq_path(bus, 0), ENTRIES * ring.COMPLETION.itemsize)):
            path.write_bytes(bytes(size))
        self.bus = bus
        self.chip = ChipMemory(bus)
        self.lines: dict[int, list[int]] = {}       # slot -> the client's completion end and doorbell end
        self.irq = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.kernel_doorbell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.regs_map = memory.map_file(memory.regs_path(bus))
        self.regs = regs.RegisterView(self.regs_map)
        self.regs.write32(regs.RING_ENTRIES, ENTRIES)
        self.regs.write32(regs.NUM_CORES, cores)      # what a graph job may be placed on
        self.table_map = memory.map_file(memory.queue_table_path(bus))
        self.table = regs.RegisterView(self.table_map)
        self.core = self.new_core()
        self.mems: dict[int, np.ndarray] = {}       # id(header) -> its queue memory
        self.nop = self.chip.put(np.frombuffer(tasks.encode_task("NOP"), np.uint8))
        self.nop_size = len(tasks.encode_task("NOP"))

    def new_core(self) -> core_unit.Core:
        made = core_unit.Core(self.bus, 0, self.kernel_doorbell, self.irq, HardwareProfile())
        assert (made.service is not None) == self.native or not self.native, "no C library to test"
        if not self.native:
            made.service = None
        return made

    def add_queue(self, slot: int, priority: int = 1) -> queues.Header:
        iova = self.chip.alloc(queues.memory_size(QUEUE_ENTRIES) + iommu.PAGE_SIZE)
        iova = -(-iova // iommu.PAGE_SIZE) * iommu.PAGE_SIZE
        base = queues.slot_offset(slot)
        t = self.table
        t.write32(base + queues.Q_ASID, ASID)
        t.write64(base + queues.Q_IOVA, iova)
        t.write32(base + queues.Q_ENTRIES, QUEUE_ENTRIES)
        t.write32(base + queues.Q_PRIORITY, priority)
        t.write32(base + queues.Q_TIMEOUT_CAP_MS, 1000)
        t.write32(base + queues.Q_CORE, 0)
        name = slot + 1                              # the driver's lines (kmd_fuse.user_queues.QueueLines)
        t.write64(base + queues.Q_LINES, name)
        if slot not in self.lines:
            doorbell, completion = (memory.queue_line_path(self.bus, slot, name, line) for line in ("db", "cq"))
            os.mkfifo(doorbell, 0o600)
            os.mkfifo(completion, 0o600)
            flags = os.O_NONBLOCK | os.O_CLOEXEC
            self.lines[slot] = [os.open(completion, os.O_RDONLY | flags), os.open(doorbell, os.O_RDONLY | flags)]
            self.lines[slot].append(os.open(doorbell, os.O_WRONLY | flags))
        t.write32(base + queues.Q_GENERATION, t.read32(base + queues.Q_GENERATION) + 1)
        t.write32(base + queues.Q_CONTROL, queues.Q_ENABLED)
        self.table_changed()
        offset = iova - iommu.IOVA_BASE
        mem = self.chip.bytes[offset:offset + queues.memory_size(QUEUE_ENTRIES)]
        header = queues.Header(mem)
        self.mems[id(header)] = mem
        return header

    def table_changed(self) -> None:
        self.regs.write32(regs.QUEUE_TABLE_GEN, self.regs.read32(regs.QUEUE_TABLE_GEN) + 1)

    def submit(self, header: queues.Header, seq: int, cmd_iova: int | None = None, cmd_size: int | None = None,
               flags: int = 0, written_seq: int | None = None, timeout_ms: int = 0) -> None:
        mem = self.mems[id(header)]
        at = queues.entries_offset() + (seq % QUEUE_ENTRIES) * queues.ENTRY_STRUCT.size
        queues.ENTRY_STRUCT.pack_into(mem, at, seq if written_seq is None else written_seq,
                                      self.nop if cmd_iova is None else cmd_iova,
                                      self.nop_size if cmd_size is None else cmd_size, timeout_ms, flags, 0)
        header.write64(queues.HDR_TAIL, seq)

    def completion(self, header: queues.Header, seq: int) -> tuple:
        at = queues.completions_offset(QUEUE_ENTRIES) + (seq % QUEUE_ENTRIES) * queues.COMPLETION_STRUCT.size
        return queues.COMPLETION_STRUCT.unpack_from(self.mems[id(header)], at)

    def kernel_jobs(self, job_ids: list[int]) -> None:
        tail = self.regs.read32(BANK + regs.RING_TAIL)
        for job_id in job_ids:
            ring.RING_ENTRY_STRUCT.pack_into(self.core.ring, tail * ring.RING_ENTRY.itemsize, ring.OP_JOB, ASID,
                                             job_id, self.nop, self.nop_size, 0, 0, 0)
            tail = ring.ring_next(tail, ENTRIES)
        self.regs.write32(BANK + regs.RING_TAIL, tail)

    def close(self) -> None:
        for fd in (*[fd for fds in self.lines.values() for fd in fds], self.irq,
                   self.kernel_doorbell):
            os.close(fd)
