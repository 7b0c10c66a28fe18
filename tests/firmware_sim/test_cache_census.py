"""A closed context leaves nothing in the chip's caches (issue 15: memory back to idle).

A core keeps decoded descriptors, job plans, bound C calls, weight conversions and tables
across jobs. When the driver closes a context (a model unloaded) it invalidates the
whole ASID, and after that one path every cache must be empty again. Counted by the
caches' own bookkeeping (``caches.census``), not by resident memory, so the test
neither flakes nor needs a threshold; that the context's buffers leave the core's
address space is checked on a device by tests/firmware_sim/test_freed_unmapped.py."""
from __future__ import annotations

import numpy as np

from firmware_sim import caches
from firmware_sim.executor import run_job
from firmware_sim.self_test import network
from firmware_sim.timing import HardwareProfile
from tests.support.chip_memory import ASID, BO, ChipMemory


def _run_network(mem: ChipMemory, times: int) -> None:
    command = b"".join(network(mem))
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(times):
        result = run_job(mem.dma, ASID, at, len(command), HardwareProfile())
        assert result.status == 0 and result.task_index == 10, result


def test_every_cache_counts_its_entries() -> None:
    counted = set(caches.census())
    assert counted == {c.name for c in caches.registered()} - {"iotlb"}


def test_a_closed_context_empties_every_cache_and_unmaps_its_memory(mem: ChipMemory) -> None:
    caches.clear()
    _run_network(mem, 3)            # decoded, then replayed from its job plan
    held = caches.census()
    for name in ("job_plans", "plans", "costs"):
        assert held[name] > 0, held
    caches.invalidate(mem.dma, ASID)            # what the core does when the context closes
    assert caches.census() == dict.fromkeys(held, 0)


def test_a_freed_buffer_drops_what_refers_to_it_and_keeps_the_rest(mem: ChipMemory) -> None:
    """One buffer's invalidation (a buffer freed, the context still open) drops the job
    plans and bound calls that could refer to it; tables keyed by contents stay."""
    caches.clear()
    _run_network(mem, 2)
    caches.invalidate(mem.dma, ASID, BO)
    held = caches.census()
    assert held["job_plans"] == 0 and held["plans"] > 0 and held["costs"] > 0
    _run_network(mem, 1)             # the context goes on: everything is rebuilt as needed
