"""What wakes the chip's main process: it sleeps until something needs its watchdog.

An idle chip costs no CPU: the main process blocks in ``poll`` on
- each core's and each warming successor's pidfd (readable when that process exits: a
  core that died, hung and was killed, or retired),
- the succession pipe (a core asks for a successor, ``firmware_sim.recycling``),
- the control eventfd the driver writes after RESET_REQ (``--control-fd``),
- the signal wake-up pipe (SIGTERM: power off),
- the watchdog's arming line (:class:`WatchdogArm`): a core that starts a job while the
  watchdog is disarmed writes it.
Only while a job runs does it wake every ``WATCHDOG_PERIOD_S`` to time it (and to see a
running user-queue job whose queue the driver disabled).
"""
from __future__ import annotations

import mmap
import os
import select

from npu_hw import queues

__all__ = ["WatchdogArm", "Wakeups"]


class WatchdogArm:
    """Whether the chip's watchdog is timing jobs, shared by the main process and its cores
    (made before any core is forked).

    The main process disarms it when it finds no job running, and the core that starts the
    next job arms it again by writing the eventfd, so the main process never sleeps through
    a running job. The two sides order their store and load with a fence (Dekker's
    pattern): the core stores CURRENT_JOB then loads the flag, the main process stores the
    flag then loads CURRENT_JOB; at least one of them sees the other's store."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._armed = mmap.mmap(-1, 1)
        self._armed[0] = 1

    @property
    def flag(self) -> mmap.mmap:
        """The armed flag (one shared byte), for a core's C service loop (``queue_service``)."""
        return self._armed

    # ---- a core ----
    def job_started(self) -> None:
        """Called by a core after it wrote CURRENT_JOB: wake the watchdog if it sleeps."""
        queues.store_load_fence()
        if not self._armed[0]:
            self._armed[0] = 1
            os.eventfd_write(self.fd, 1)

    # ---- the main process ----
    def disarm(self) -> None:
        """Before the main process looks whether a job runs (and sleeps if none does)."""
        self._armed[0] = 0
        queues.store_load_fence()

    def arm(self) -> None:
        self._armed[0] = 1

    def consume(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass


class Wakeups:
    """The main process's poll set: fixed descriptors plus one pidfd per live child."""

    def __init__(self, fds: list[int]) -> None:
        self._poller = select.poll()
        self._fixed = [fd for fd in fds if fd >= 0]
        for fd in self._fixed:
            self._poller.register(fd, select.POLLIN)
        self._pidfds: dict[int, int] = {}       # pid -> pidfd

    def follow(self, pids: set[int]) -> None:
        """Watch exactly these children (unreaped: a pidfd of a zombie is readable at once)."""
        for pid in set(self._pidfds) - pids:
            fd = self._pidfds.pop(pid)
            self._poller.unregister(fd)
            os.close(fd)
        for pid in pids - set(self._pidfds):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:     # reaped by someone else already: nothing to wait for
                continue
            self._pidfds[pid] = fd
            self._poller.register(fd, select.POLLIN)

    def wait(self, timeout_s: float | None) -> list[int]:
        """The fixed descriptors that became readable (their data is the caller's to consume);
        returns early too when a watched child exits."""
        events = self._poller.poll(None if timeout_s is None else timeout_s * 1000)
        return [fd for fd, _ in events if fd in self._fixed]

    def close(self) -> None:
        self.follow(set())
