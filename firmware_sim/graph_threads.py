"""When a graph job's replay runs on two threads of the core's process, and when on one.

A graph job placed on several cores (``task_graph``) whose every task replays in C can run on
the core's thread alone, in its run order, or on it and a helper thread (``graph_steps.c``).
Two threads pay a hand-off (waking the helper, each layer's bands waiting for each other) and
need a CPU nobody else wants: on this 2-vCPU machine, with the client, the driver and the
other core's process on the same CPUs, they were slower under load (docs/hardware.md, *Task
graphs*). So each plan chooses, from what it costs here:

- the modeled gain first: a job whose one-thread time times its modeled saving (1 - critical
  path / the sum of its tasks' cycles) is below ``HANDOFF_NS`` never tries two threads;
- nor while no CPU is free for the helper: as many other tasks runnable as the machine has
  CPUs less one (/proc/loadavg, read through ``idle_poll.RunQueueProbe`` at most every
  ``LOAD_CHECK_NS``): the helper would only take a CPU from the client, the driver or
  another job;
- otherwise it measures: the wall time of its last ``SAMPLES`` replays of each kind (one
  thread first, then two), and runs two threads only while their median is below
  ``MARGIN`` times one thread's, the kind not chosen every ``EXPLORE`` jobs so the choice
  follows the machine's load (as ``idle_poll`` follows the jobs' arrivals). A median, not a
  mean: a replay preempted for a time slice is noise; a margin, because two threads cost
  more CPU for the same work, which a machine without a free CPU pays for (measured at load
  average 11-14: two threads chosen on medians alone made VWW's p50 1.10-1.12x one core's,
  one thread 0.98-1.05x).

A one-thread replay runs a layer's bands joined back into one call (``band_joins``), so it
costs what the layer's one-core job does.

``NPU_GRAPH_THREADS`` in the chip's environment: ``auto`` (the default) as above, ``1`` always
two threads, ``0`` always one.
"""
from __future__ import annotations

import os
import time

from firmware_sim.idle_poll import LOAD_CHECK_NS, RunQueueProbe

__all__ = ["MODE", "HANDOFF_NS", "SAMPLES", "EXPLORE", "MARGIN", "ThreadChoice"]

MODE = os.environ.get("NPU_GRAPH_THREADS", "auto")
HANDOFF_NS = 20_000     # the helper's wake-up across the vCPUs and the per-layer waits, about
SAMPLES = 9             # replays of each kind whose median is compared
MARGIN = 0.9            # two threads only while their median is below this share of one thread's
EXPLORE = 16            # every this many jobs, the kind not chosen runs (and is measured again)


class ThreadChoice:
    """One plan's choice between one and two threads (see the module doc)."""

    __slots__ = ("jobs", "saving", "walls")

    def __init__(self, critical_cycles: int, serial_cycles: int):
        self.saving = 1 - critical_cycles / serial_cycles if serial_cycles > 0 else 0.0
        self.walls: tuple[list[int], list[int]] = ([], [])    # ns of recent replays: one thread, two
        self.jobs = 0

    def two_threads(self) -> bool:
        """Whether the next replay runs on two threads."""
        if MODE != "auto":
            return MODE == "1"
        one, two = self.walls
        if len(one) < SAMPLES:
            return False                    # one thread first: its time is what two must beat
        if _median(one) * self.saving < HANDOFF_NS or not _cpu_free():
            return False
        if len(two) < SAMPLES:
            return True
        self.jobs += 1
        better = _median(two) < MARGIN * _median(one)
        return better != (self.jobs % EXPLORE == 0)

    def settled_on_one(self) -> bool:
        """Whether every replay runs on one thread while the samples stand (``NPU_GRAPH_THREADS=0``,
        or a modeled gain below HANDOFF_NS: ``two_threads``' first rule), so a replay elsewhere
        (the C service loop, ``queue_service``) may run it on one thread without asking."""
        if MODE != "auto":
            return MODE == "0"
        one = self.walls[0]
        return len(one) >= SAMPLES and _median(one) * self.saving < HANDOFF_NS

    def record(self, two: bool, wall_ns: int) -> None:
        """A replay of the kind ``two`` took ``wall_ns``."""
        walls = self.walls[two]
        walls.append(wall_ns)
        if len(walls) > SAMPLES:
            del walls[0]


class _FreeCpu:
    """Whether a CPU is free for a helper thread, as last seen at most LOAD_CHECK_NS ago."""

    def __init__(self) -> None:
        self.probe: RunQueueProbe | None = None      # opened on first use (in the core's process)
        self.cpus = os.cpu_count() or 1
        self.checked_ns = -LOAD_CHECK_NS
        self.free = False

    def __call__(self) -> bool:
        now = time.monotonic_ns()
        if now - self.checked_ns >= LOAD_CHECK_NS:
            if self.probe is None:
                self.probe = RunQueueProbe()
            self.checked_ns = now
            self.free = self.probe.others() < self.cpus - 1
        return self.free


_cpu_free = _FreeCpu()


def _median(values: list[int]) -> int:
    return sorted(values)[len(values) // 2]
