"""A core that has grown retires once its last context is gone; the chip starts a fresh one.

Requests in flight at once leave a core a few hundred kB larger than idle after their
model is unloaded (issue 15): nothing is kept, but CPython's small-object arenas keep the
pages of every pool the peak touched (an arena is given back only when all of it is free)
and glibc's heap keeps its fragmented pages. Neither allocator can be made to give them
back (``PYTHONMALLOC=malloc`` with ``malloc_trim`` was measured: it kept more). A process
can: a core whose resident memory grew by ``growth_kb`` or more since it started, and
which holds nothing any more (no ASID's page table or buffer mapped, no user queue
served), exits with :data:`RETIRED` right where it would go to sleep, and the chip's main
process forks a fresh core from its own clean state (``firmware_sim.chip``).

Why no job is lost or run twice: the core retires only at the point where it would block
on its doorbells, after it has seen its ring empty and its queues' polling flags cleared
(``Core.run_forever``). Anything the driver or a client queues from then on rings a
doorbell: the kernel doorbell is an eventfd the chip's main process holds, whose count
the fresh core consumes after draining the ring; a queue created meanwhile is taken in
by the fresh core's first look at the queue table. A job waits for the new core's
start (its warm-up and self-test, 50-120 ms) instead of running at once: the price of
the recycling, paid only after a context's close has left a grown core empty.

``growth_kb`` comes from the chip's ``--core-recycle-kb`` option (default from the
``NPU_CORE_RECYCLE_KB`` environment variable, else :data:`DEFAULT_GROWTH_KB`); a
negative value turns recycling off.
"""
from __future__ import annotations

import os

__all__ = ["RETIRED", "DEFAULT_GROWTH_KB", "default_growth_kb", "resident_kb", "Recycling"]

RETIRED = 75   # a retiring core's exit status (EX_TEMPFAIL): the chip starts a fresh core, quietly
DEFAULT_GROWTH_KB = 256
ENVIRONMENT = "NPU_CORE_RECYCLE_KB"


def default_growth_kb() -> int:
    """The growth that retires a core: ``NPU_CORE_RECYCLE_KB`` if set, else the default."""
    value = os.environ.get(ENVIRONMENT, "")
    try:
        return int(value) if value.strip() else DEFAULT_GROWTH_KB
    except ValueError:
        raise SystemExit(f"{ENVIRONMENT}={value!r}: an integer (kB; negative: never recycle) expected") from None


def resident_kb() -> int:
    """This process's resident memory (kB): its heap, arenas and written data, and the
    library pages it touched (what the device's RSS figure counts)."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1])
    return 0


class Recycling:
    """When a core should retire: after a context's close (:meth:`context_closed`), at its
    next sleep, if it holds nothing and grew by ``growth_kb`` since :meth:`started`."""

    def __init__(self, growth_kb: int):
        self.growth_kb = growth_kb
        self.baseline_kb = 0
        self._closed = False

    @property
    def enabled(self) -> bool:
        return self.growth_kb >= 0

    def started(self) -> None:
        """The core is ready (warmed up, self-tested): its memory now is the idle figure."""
        if self.enabled:
            self.baseline_kb = resident_kb()

    def context_closed(self) -> None:
        """A whole ASID was invalidated: the core may hold nothing any more."""
        self._closed = self.enabled

    def due(self, holds_anything: bool) -> bool:
        """Whether to retire now (asked where the core would sleep); measures only after a
        context's close left the core empty."""
        if not self._closed:
            return False
        self._closed = False
        return not holds_anything and resident_kb() - self.baseline_kb >= self.growth_kb
