"""One compute core: consumes its command ring, runs jobs, posts completions.

The core sleeps on its doorbell line (an eventfd the KMD writes after moving
RING_TAIL), runs every entry between RING_HEAD and RING_TAIL, writes a
completion for each job to its completion queue, advances RING_HEAD and raises
the interrupt line (an eventfd shared by all cores).
"""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from firmware_sim.dma import DmaEngine
from firmware_sim.executor import JobResult, run_job
from firmware_sim.spec import memory, regs, ring
from firmware_sim.spec.memory import map_file
from firmware_sim.timing import HardwareProfile


class Core:
    """The state of one core, as seen from inside it."""

    def __init__(self, bus: Path, core: int, doorbell_fd: int, irq_fd: int, profile: HardwareProfile):
        self.core, self.doorbell_fd, self.irq_fd, self.profile = core, doorbell_fd, irq_fd, profile
        self._regs_map = map_file(memory.regs_path(bus))
        self.regs = regs.RegisterView(self._regs_map)
        self.bank = regs.core_bank(core)
        self.entries = self.regs.read32(regs.RING_ENTRIES)
        self.ring = map_file(memory.ring_path(bus, core))
        self.cq = map_file(memory.cq_path(bus, core))
        self.dma = DmaEngine(bus)

    def reg(self, offset: int) -> int:
        return self.regs.read32(self.bank + offset)

    def set_reg(self, offset: int, value: int) -> None:
        self.regs.write32(self.bank + offset, value)

    def run_forever(self) -> None:
        self.set_reg(regs.CORE_STATE, regs.CORE_IDLE)
        tail_reg = self.bank + regs.RING_TAIL
        while True:
            os.read(self.doorbell_fd, 8)   # sleep until the KMD rings the doorbell
            self.drain_ring()
            # Hybrid polling: watch the tail register for a short while before
            # sleeping again, so back-to-back jobs skip the wake-up latency.
            deadline = time.monotonic_ns() + self.profile.idle_poll_ns
            while time.monotonic_ns() < deadline:
                if self.regs.read32(tail_reg) != self.reg(regs.RING_HEAD):
                    self.drain_ring()
                    deadline = time.monotonic_ns() + self.profile.idle_poll_ns
                os.sched_yield()   # any runnable host process (the KMD, a client) goes first

    def drain_ring(self) -> None:
        head = self.reg(regs.RING_HEAD)
        while head != self.reg(regs.RING_TAIL):
            opcode, asid, job_id, cmd_iova, cmd_size, timeout_ms, bo_id, _ = \
                ring.RING_ENTRY_STRUCT.unpack_from(self.ring, head * ring.RING_ENTRY_STRUCT.size)
            if opcode == ring.OP_JOB:
                self.post(self.execute(job_id, asid, cmd_iova, cmd_size), job_id)
            elif opcode == ring.OP_INVALIDATE:
                self.dma.invalidate(asid, bo_id)
            head = ring.ring_next(head, self.entries)
            self.set_reg(regs.RING_HEAD, head)

    def execute(self, job_id: int, asid: int, cmd_iova: int, cmd_size: int) -> JobResult:
        bank = self.bank
        started = time.monotonic_ns()
        self.regs.write64(bank + regs.JOB_START_NS, started)
        self.regs.write64(bank + regs.CURRENT_JOB, job_id)
        self.set_reg(regs.CORE_STATE, regs.CORE_BUSY)
        faults = self.regs.read32(regs.FAULT_INJECT)
        if faults & regs.FAULT_HANG:
            while True:              # a hung core: only the watchdog's reset ends this
                time.sleep(1)
        self.dma.inject_bus_error = bool(faults & regs.FAULT_DMA_ERROR)
        result = run_job(self.dma, asid, cmd_iova, cmd_size, self.profile)
        result.exec_ns = time.monotonic_ns() - started
        if faults & regs.FAULT_BIT_FLIP and result.status == 0:
            self.dma.flip_last_written_bit()
        # Clear CURRENT_JOB before adding to BUSY_NS: a reader in between sees the job
        # neither running nor counted (short, and the KMD never reports less than before)
        # rather than both (counted twice).
        self.regs.write64(bank + regs.CURRENT_JOB, 0)
        self.regs.write64(bank + regs.BUSY_NS, self.regs.read64(bank + regs.BUSY_NS) + result.exec_ns)
        self.regs.write64(bank + regs.BUSY_CYCLES, self.regs.read64(bank + regs.BUSY_CYCLES) + result.cycles)
        self.set_reg(regs.CORE_STATE, regs.CORE_IDLE)
        return result

    def post(self, result: JobResult, job_id: int) -> None:
        """Write the completion and raise the interrupt."""
        while ring.ring_full(self.reg(regs.CQ_HEAD), self.reg(regs.CQ_TAIL), self.entries):
            time.sleep(0.0002)  # the KMD keeps fewer jobs in flight than CQ slots; defensive only
        tail = self.reg(regs.CQ_TAIL)
        write_completion(self.cq, tail, job_id, self.core, result, self.profile)
        self.set_reg(regs.CQ_TAIL, ring.ring_next(tail, self.entries))
        self.regs.write64(self.bank + regs.JOBS_DONE, self.regs.read64(self.bank + regs.JOBS_DONE) + 1)
        cause = regs.IRQ_JOB_DONE if result.status == 0 else (
            regs.IRQ_MMU_FAULT if result.status == -errno.EFAULT else regs.IRQ_JOB_ERROR)
        raise_irq(self.regs, self.bank, self.irq_fd, cause)


def write_completion(cq, slot: int, job_id: int, core: int, result: JobResult, profile: HardwareProfile) -> None:
    ring.COMPLETION_STRUCT.pack_into(cq, slot * ring.COMPLETION_STRUCT.size, job_id, result.status, core,
                                     result.cycles, profile.nanoseconds(result.cycles), result.fault_iova,
                                     result.task_index, 0, result.exec_ns)


def raise_irq(view: regs.RegisterView, bank: int, irq_fd: int, cause: int) -> None:
    view.write32(bank + regs.IRQ_STATUS, cause)
    view.write32(bank + regs.IRQ_COUNT, view.read32(bank + regs.IRQ_COUNT) + 1)
    if not view.read32(regs.FAULT_INJECT) & regs.FAULT_LOST_IRQ:
        os.eventfd_write(irq_fd, 1)
