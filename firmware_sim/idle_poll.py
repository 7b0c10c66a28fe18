"""How long an idle core polls its ring before it sleeps on its doorbell.

Polling saves a back-to-back job the wake-up (tens of microseconds across the two vCPUs)
but burns a CPU the clients and the driver may want: a fixed 300 us yielding poll was
21% of a core's samples on ResNet-8 (py-spy, 2-vCPU VM). The window adapts the way
KVM's halt-polling does (``halt_poll_ns`` grow/shrink), from what the core measures:

- the next job came within the window: the poll paid off, keep it;
- it came after the window but within ``max_ns``: a longer poll would have caught it:
  grow (double, from ``GROW_START_NS``);
- it came after ``max_ns`` (or never): polling was wasted: shrink (halve, to zero);
- and a short poll only (``CONTENDED_NS`` at most) while other processes want the CPU:
  more runnable tasks than CPUs in /proc/loadavg, or this core was preempted during its
  last poll (its involuntary context switches grew), since then a long poll delays them.
  (Not none: with four clients on two vCPUs the CPUs are always contended, and an A/B
  run without any poll was no better: 4-process NOP p50 1200-1240 us against 880-1270 us
  with the fixed 300 us poll, load average 2-5, within the noise.)

The load is looked at once per ``LOAD_CHECK_NS`` at most, through a descriptor of
/proc/loadavg kept open: opening the file each time the core went idle cost 11 us (nine
system calls, Python's ``open`` checks for a terminal), half of a core's CPU per NOP job on
a user queue (measured 2026-11-24: 23 us per job; a ``pread`` of the kept descriptor is
1.2 us, ``getrusage`` 0.85 us).
"""
from __future__ import annotations

import os
import resource
import time

__all__ = ["IdlePoll", "RunQueueProbe", "preemptions", "GROW_START_NS", "CONTENDED_NS", "LOAD_CHECK_NS"]

GROW_START_NS = 10_000
CONTENDED_NS = 20_000
LOAD_CHECK_NS = 2_000_000    # how often the window looks at the machine's load (and its own preemptions)


class RunQueueProbe:
    """Runnable tasks on the machine besides the caller (/proc/loadavg's 4th field), read
    through a descriptor kept open (one ``pread``, not an open/read/close each time)."""

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = -1

    @property
    def fd(self) -> int:
        """The descriptor kept open (-1 without /proc/loadavg), for the C loop's idle poll."""
        return self._fd

    def others(self) -> int:
        if self._fd < 0:
            return 0
        try:
            return int(os.pread(self._fd, 128, 0).split()[3].split(b"/")[0]) - 1
        except (OSError, IndexError, ValueError):
            return 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def preemptions() -> int:
    """This process's involuntary context switches so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


class IdlePoll:
    """The adaptive poll window of one core (nanoseconds)."""

    def __init__(self, max_ns: int, cpus: int | None = None):
        self.max_ns = max(0, int(max_ns))
        self.window_ns = min(self.max_ns, GROW_START_NS)
        self.cpus = cpus or os.cpu_count() or 1
        self._preempted_at = preemptions()
        self._run_queue = RunQueueProbe()
        self._checked_ns = -LOAD_CHECK_NS
        self.contended = False
        self.load_checks = 0      # how often the load was looked at (a figure for tests and profiles)

    def window(self) -> int:
        """How long to poll now: short when the CPU is contended (this core was preempted, or
        more tasks want to run than there are CPUs, as last seen at most LOAD_CHECK_NS ago),
        0 when polling stopped paying."""
        if self.window_ns == 0:
            return 0
        now = time.monotonic_ns()
        if now - self._checked_ns >= LOAD_CHECK_NS:
            self._checked_ns = now
            self.load_checks += 1
            preempted = preemptions()
            self.contended = preempted != self._preempted_at or self._run_queue.others() >= self.cpus
            self._preempted_at = preempted
        return min(self.window_ns, CONTENDED_NS) if self.contended else self.window_ns

    def close(self) -> None:
        self._run_queue.close()

    def record(self, idle_ns: int, polled_ns: int) -> None:
        """A job arrived ``idle_ns`` after the core went idle, having polled ``polled_ns``."""
        if idle_ns <= polled_ns:
            return                                       # caught by the poll
        if idle_ns <= self.max_ns:
            self.window_ns = min(self.max_ns, max(GROW_START_NS, self.window_ns * 2))
        else:
            self.window_ns //= 2
            if self.window_ns < GROW_START_NS:
                self.window_ns = 0
