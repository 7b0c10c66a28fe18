"""A core that has grown retires once its last context is gone; the chip starts a fresh one.

Requests in flight at once leave a core a few hundred kB larger than idle after their
model is unloaded (issue 15): nothing is kept, but CPython's small-object arenas keep the
pages of every pool the peak touched (an arena is given back only when all of it is free)
and glibc's heap keeps its fragmented pages. Neither allocator can be made to give them
back (``PYTHONMALLOC=malloc`` with ``malloc_trim`` was measured: it kept more). A process
can: a core whose resident memory grew by ``growth_kb`` or more since it started, and
which holds nothing any more (no ASID's page table or buffer mapped, no user queue
served), asks to be succeeded. The chip's main process forks a successor from its own
clean state (``firmware_sim.chip``); the successor warms up and runs its self-test (50-120
ms) while the old core goes on serving, then says it is ready and wakes the old core,
which exits with :data:`RETIRED` at its next sleep; the main process reaps it and only
then lets the successor start on the ring. A job arriving meanwhile does not wait for a
cold core.

Why no job is lost or run twice: the old core exits only at the point where it would
block on its doorbells, after it has seen its ring empty and its queues' polling flags
cleared (``Core.run_forever``). Anything the driver or a client queues from then on rings
a doorbell: the kernel doorbell is an eventfd the chip's main process holds, whose count
the successor consumes after draining the ring; a queue's doorbell is a FIFO the driver
also holds open, read by the successor once it takes the queue from the queue table.
The successor touches no register before the main process, having reaped the old core
(and recovered its job, had it died instead), tells it to go. The price: about 30 ms of
CPU per recycled core, spent only after a context's close has left a grown core empty.

``growth_kb`` comes from the chip's ``--core-recycle-kb`` option (default from the
``NPU_CORE_RECYCLE_KB`` environment variable, else :data:`DEFAULT_GROWTH_KB`); a
negative value turns recycling off.
"""
from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable

__all__ = ["RETIRED", "DEFAULT_GROWTH_KB", "default_growth_kb", "resident_kb", "Recycling", "Succession"]

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
    """This process's resident anonymous memory (kB): its heap, arenas and written data.
    Not the library pages it touched: a core forked from a warmed main process faults
    those in at its first jobs, shared with every other process, and they are no growth
    a fresh core would undo."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


class Recycling:
    """One core's side: when to ask for a successor (after a context's close, see
    :meth:`context_closed`, at its next sleep, if it holds nothing and grew by
    ``growth_kb`` since :meth:`started`), and when to exit (its successor is ready)."""

    def __init__(self, growth_kb: int, core: int = 0, succession: Succession | None = None):
        self.growth_kb, self.core, self.succession = growth_kb, core, succession
        self.baseline_kb = self.grown_kb = 0
        self._closed = self._requested = False

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

    def may_sleep_unasked(self) -> bool:
        """Whether the core may sleep without calling :meth:`at_sleep` first (its C idle path):
        nothing is pending here, no close to measure, no successor asked for or ready."""
        return self.succession is None or not (self._closed or self._requested
                                               or self.succession.successor_ready(self.core))

    def at_sleep(self, holds_anything: Callable[[], bool]) -> bool:
        """Asked where the core would sleep: True if it must exit now (:data:`RETIRED`: its
        successor is ready); else asks for a successor if one is due."""
        if self.succession is None:
            return False
        if self.succession.successor_ready(self.core):
            return True
        if not self._requested and self.due(holds_anything()):
            self._requested = True
            print(f"chip: core {self.core} grew {self.grown_kb} kB since it started and holds nothing: "
                  "handing it over to a fresh core", file=sys.stderr, flush=True)
            self.succession.request(self.core)
        return False

    def due(self, holds_anything: bool) -> bool:
        """Whether to retire now (asked where the core would sleep); measures only once a
        context's close has left the core empty. While it still holds something (another
        context, or the closed one's user queue not yet let go: its teardown can end after
        the invalidation) the close stays pending and the next sleep point looks again."""
        if not self._closed or holds_anything:
            return False
        self._closed = False
        self.grown_kb = max(0, resident_kb() - self.baseline_kb)   # shrunk: no growth (0 kB retires all the same)
        return self.grown_kb >= self.growth_kb


class Succession:
    """What a core, its successor and the chip's main process share to hand a core over.

    Made by the main process before it forks any core, so that every core and successor
    inherits it: a pipe on which cores ask to be succeeded (one byte: the core's index) and
    a shared page with one "successor ready" byte per core."""

    def __init__(self, cores: int):
        self._requests_r, self._requests_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._ready = mmap.mmap(-1, max(cores, 1))

    # ---- a core ----
    def request(self, core: int) -> None:
        """Ask the main process for a successor (a core asks at most once)."""
        os.write(self._requests_w, bytes([core]))

    def successor_ready(self, core: int) -> bool:
        return bool(self._ready[core])

    # ---- a successor ----
    def announce(self, core: int, doorbell_fd: int) -> None:
        """Ready: the old core exits at its next sleep, woken now by its own doorbell."""
        self._ready[core] = 1
        os.eventfd_write(doorbell_fd, 1)

    # ---- the main process ----
    @property
    def fd(self) -> int:
        """Readable when a core asked for a successor (the main process sleeps on it)."""
        return self._requests_r

    def requests(self) -> set[int]:
        """The cores that asked for a successor since the last call."""
        try:
            return set(os.read(self._requests_r, 256))
        except BlockingIOError:
            return set()

    def clear(self, core: int) -> None:
        self._ready[core] = 0
