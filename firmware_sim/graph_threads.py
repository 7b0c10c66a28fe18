"""When a graph job's replay runs on two threads of the core's process, and when on one.

A graph job placed on several cores (``task_graph``) whose every task replays in C can run on
the core's thread alone, in its run order, or on it and a helper thread (``graph_steps.c``).
Two threads pay a hand-off each time one of them waits for the other (waking the helper, a
layer's bands waiting for each other) and need a CPU nobody else wants: on this 2-vCPU
machine, with the client, the driver and the other core's process on the same CPUs, they were
slower for small models even on a quiet machine (docs/hardware.md, *Task graphs*). So each
plan chooses, from what it costs here:

- the job's size first: once its first ``SAMPLES`` one-thread replays are timed, a job whose
  one-thread median times its modeled saving (1 - critical path / the sum of its tasks'
  cycles) is below ``HANDOFF_NS`` per level of its graph (the tasks of its longest chain of
  dependencies: where the two threads meet) never tries two threads, and the plan replays
  as the one-core job does, one C call with no choice to make (``settled``). Measured
  (quiet, load average 0.6): two threads forced made ResNet-8's wall p50 0.97x one thread's
  and VWW's 1.17x, where the model promised 0.54x and 0.59x: 5-6 us lost per level;
- nor while no CPU is free for the helper: as many other tasks runnable as the machine has
  CPUs less one (/proc/loadavg, read through ``idle_poll.RunQueueProbe`` at most every
  ``LOAD_CHECK_NS``): the helper would only take a CPU from the client, the driver or
  another job;
- otherwise it measures: the wall time of its last ``SAMPLES`` replays of each kind (one
  thread first, then two), and runs two threads while their median is below ``MARGIN`` times
  one thread's. The kind not chosen runs again after ``EXPLORE`` jobs, then after twice as
  many each time the choice holds, up to ``EXPLORE_MAX`` (back to ``EXPLORE`` when it
  changes): the choice follows the machine's load without paying for the slower kind every
  few jobs. A median, not a mean: a replay preempted for a time slice is noise; a margin,
  because two threads cost more CPU for the same work, which a machine without a free CPU
  pays for (measured at load average 11-14: two threads chosen on medians alone made VWW's
  p50 1.10-1.12x one core's, one thread 0.98-1.05x).

A one-thread replay runs a layer's bands joined back into one call (``band_joins``), so it
costs what the layer's one-core job does.

``NPU_GRAPH_THREADS`` in the chip's environment: ``auto`` (the default) as above, ``1`` always
two threads, ``0`` always one (settled from the start).
"""
from __future__ import annotations

import os
import time

from firmware_sim.idle_poll import LOAD_CHECK_NS, RunQueueProbe

__all__ = ["MODE", "HANDOFF_NS", "SAMPLES", "EXPLORE", "EXPLORE_MAX", "MARGIN", "ThreadChoice", "graph_levels"]

MODE = os.environ.get("NPU_GRAPH_THREADS", "auto")
HANDOFF_NS = 10_000     # a meeting of the two threads (measured 5-6 us quiet), with room for a busier machine
SAMPLES = 9             # replays of each kind whose median is compared
MARGIN = 0.9            # two threads only while their median is below this share of one thread's
EXPLORE = 16            # jobs before the kind not chosen runs again (and is measured again) ...
EXPLORE_MAX = 1024      # ... doubling each time the choice holds, up to this


def graph_levels(deps: list[list[int]], order: list[int]) -> int:
    """The tasks on the longest chain of dependencies of a graph (``order``: its tasks in a
    topological order): how many times, at most, two threads running it must meet."""
    level: dict[int, int] = {}
    for task in order:
        level[task] = 1 + max((level[d] for d in deps[task]), default=0)
    return max(level.values(), default=0)


class ThreadChoice:
    """One plan's choice between one and two threads (see the module doc)."""

    __slots__ = ("every", "jobs", "levels", "looking", "saving", "settled", "two", "walls")

    def __init__(self, critical_cycles: int, serial_cycles: int, levels: int = 1):
        self.saving = 1 - critical_cycles / serial_cycles if serial_cycles > 0 else 0.0
        self.levels = max(1, levels)
        self.walls: tuple[list[int], list[int]] = ([], [])    # ns of recent replays: one thread, two
        self.two = False            # the kind chosen, once both are measured
        self.jobs = 0               # jobs since the kind not chosen last ran
        self.every = EXPLORE        # ... how many before it runs again
        self.looking = False        # the replay under way is that kind's, run again
        self.settled = MODE == "0"  # one thread for good: the plan replays as a one-core job

    def two_threads(self) -> bool:
        """Whether the next replay runs on two threads."""
        if MODE != "auto":
            return MODE == "1"
        one, two = self.walls
        if len(one) < SAMPLES:
            return False                    # one thread first: its time is what two must beat
        if not two and _median(one) * self.saving < HANDOFF_NS * self.levels:
            self.settled = True             # too small to gain what the threads' meetings cost
            return False
        if not _cpu_free():
            return False
        if len(two) < SAMPLES:
            return True
        self.jobs += 1
        if self.jobs < self.every:
            return self.two
        self.jobs, self.looking = 0, True
        return not self.two                 # the other kind, measured again

    def record(self, two: bool, wall_ns: int) -> None:
        """A replay of the kind ``two`` took ``wall_ns``; the choice follows the medians."""
        walls = self.walls[two]
        walls.append(wall_ns)
        if len(walls) > SAMPLES:
            del walls[0]
        looked, self.looking = self.looking, False
        one, both = self.walls
        if len(both) < SAMPLES or len(one) < SAMPLES:
            return
        better = _median(both) < MARGIN * _median(one)
        if better != self.two:
            self.two, self.every, self.jobs = better, EXPLORE, 0
        elif looked:
            self.every = min(EXPLORE_MAX, 2 * self.every)     # the other kind looked at, no better


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
