"""The chip's hardware profiles: the few named configurations the emulated NPU comes in.

A profile is the timing model's parameters (see firmware_sim/timing.py) plus the facts a
datasheet gives: the clock, int8 MACs per cycle per core, the DMA engine's bytes per
cycle (memory bandwidth) and the on-chip SRAM.  The driver picks one at start-up
(``npu-kmd start --profile NAME``) and hands its name to the chip, which reports the
numbers in its register file; tools read them back through GET_PARAM and the attributes.

The numbers are of the classes they are named after, not of any one product: ``edge`` a
microcontroller-class NPU (the smallest Ethos-U55-sized MAC array, 32 MACs, at
100 MHz: ResNet-8 takes ~4 ms, more than the emulator needs, so pacing shows the model), ``standard``
the chip's historical default (ResNet-8 in ~26 us), ``large`` a mobile/PC-class NPU.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """One named hardware configuration."""

    id: int                      # what the PROFILE_ID register holds
    name: str
    description: str
    clock_mhz: int
    macs_per_cycle: int          # int8 MACs per cycle, per core
    dma_bytes_per_cycle: int     # DMA bandwidth: bytes per cycle (x clock = bytes/s)
    sram_bytes: int              # on-chip SRAM per core
    task_overhead_cycles: int    # fixed cost of fetching and starting one task descriptor

    @property
    def gops_int8(self) -> float:
        """Peak int8 giga-operations per second of one core (a MAC is two operations)."""
        return 2 * self.macs_per_cycle * self.clock_mhz / 1000

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return self.dma_bytes_per_cycle * self.clock_mhz * 1_000_000


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile(0, "standard", "the emulator's default NPU", clock_mhz=1000, macs_per_cycle=512,
            dma_bytes_per_cycle=64, sram_bytes=2 << 20, task_overhead_cycles=32),
    Profile(1, "edge", "a small microcontroller-class edge NPU", clock_mhz=100, macs_per_cycle=32,
            dma_bytes_per_cycle=4, sram_bytes=256 << 10, task_overhead_cycles=64),
    Profile(2, "large", "a large mobile/PC-class NPU", clock_mhz=1400, macs_per_cycle=2048,
            dma_bytes_per_cycle=256, sram_bytes=8 << 20, task_overhead_cycles=32),
)}
DEFAULT_PROFILE = "standard"
BY_ID: dict[int, Profile] = {p.id: p for p in PROFILES.values()}


def profile(name: str) -> Profile:
    """The profile called ``name``; ValueError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"no hardware profile {name!r}; known: {', '.join(PROFILES)}") from None
