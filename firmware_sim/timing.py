"""Timing model: a simulated cycle count for each task.

Cycles come from the work a task does (int8 MACs at MACS_PER_CYCLE) and the
bytes it moves (at DMA_BYTES_PER_CYCLE), whichever bounds it, plus a fixed
per-task overhead; device time is cycles at the profile's clock.  The numbers
come from one of the named profiles of ``npu_hw.profiles``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npu_hw import profiles, tasks

_DEFAULT = profiles.PROFILES[profiles.DEFAULT_PROFILE]


@dataclass(frozen=True)
class HardwareProfile:
    """The simulated chip's speed (defaults: the standard profile)."""

    clock_mhz: int = _DEFAULT.clock_mhz
    macs_per_cycle: int = _DEFAULT.macs_per_cycle
    dma_bytes_per_cycle: int = _DEFAULT.dma_bytes_per_cycle
    task_overhead_cycles: int = _DEFAULT.task_overhead_cycles
    idle_poll_ns: int = 300_000   # host-side: the longest idle ring poll (adaptive: idle_poll.py)
    name: str = _DEFAULT.name
    sram_bytes: int = _DEFAULT.sram_bytes

    @classmethod
    def named(cls, name: str, idle_poll_ns: int = 300_000) -> HardwareProfile:
        """The timing model of profile ``name`` (ValueError for an unknown one)."""
        spec = profiles.profile(name)
        return cls(clock_mhz=spec.clock_mhz, macs_per_cycle=spec.macs_per_cycle,
                   dma_bytes_per_cycle=spec.dma_bytes_per_cycle, task_overhead_cycles=spec.task_overhead_cycles,
                   idle_poll_ns=idle_poll_ns, name=spec.name, sram_bytes=spec.sram_bytes)

    @property
    def profile_id(self) -> int:
        return profiles.PROFILES[self.name].id

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
