"""Timing model: a simulated cycle count for each task.

Cycles come from the work a task does (int8 MACs at MACS_PER_CYCLE) and the
bytes it moves (at DMA_BYTES_PER_CYCLE), whichever bounds it, plus a fixed
per-task overhead; device time is cycles at the profile's clock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from firmware_sim.spec import tasks


@dataclass(frozen=True)
class HardwareProfile:
    """The simulated chip's speed."""

    clock_mhz: int = 1000
    macs_per_cycle: int = 512
    dma_bytes_per_cycle: int = 64
    task_overhead_cycles: int = 32
    idle_poll_ns: int = 300_000   # host-side: the longest idle ring poll (adaptive: idle_poll.py)

    def cycles(self, macs: int, bytes_moved: int) -> int:
        compute = -(-macs // self.macs_per_cycle)
        transfer = -(-bytes_moved // self.dma_bytes_per_cycle)
        return self.task_overhead_cycles + max(compute, transfer)

    def nanoseconds(self, cycles: int) -> int:
        return cycles * 1000 // self.clock_mhz


def task_cycles(profile: HardwareProfile, task: tasks.TaskType, desc: np.void, bytes_moved: int) -> int:
    """Cycles of one task: its MACs and bytes from the per-op cost table, or, for a
    task the table does not know, the bytes the DMA engine actually moved."""
    global _task_cost
    if _task_cost is None:                       # imported on first use, then kept
        from firmware_sim.units import task_cost
        _task_cost = task_cost
    macs, nbytes = _task_cost(task.opcode, desc)
    return profile.cycles(macs, nbytes or bytes_moved)


_task_cost = None
