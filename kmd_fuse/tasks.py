"""Background tasks of one device: the work a request starts but cannot finish at once.

A request handler runs synchronously (it must not block the FUSE loop), yet some
requests start something that waits - a WAIT's timer, a RESET, pumping ring-control
entries, restarting a dead chip.  They hand it to the device's ``BackgroundTasks``,
which the daemon passes to the Device when it builds it and runs in its nursery.
Work spawned before the nursery runs is started as soon as it does, so no caller
ever finds "no nursery yet"; an exception a task raises is logged, never allowed to
end the daemon (and with it every other context)."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("kmd_fuse.tasks")

TaskFn = Callable[..., Awaitable[Any]]


class BackgroundTasks:
    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._early: list[tuple[TaskFn, tuple]] = []   # spawned before run() started

    def spawn(self, fn: TaskFn, *args: Any) -> None:
        """Run ``fn(*args)`` in the background (from now, or from when ``run`` starts)."""
        if self._nursery is None:
            self._early.append((fn, args))
        else:
            self._nursery.start_soon(self._contained, fn, args)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve spawned tasks until cancelled (the daemon runs this in its nursery)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                early, self._early = self._early, []
                for fn, args in early:
                    nursery.start_soon(self._contained, fn, args)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    @staticmethod
    async def _contained(fn: TaskFn, args: tuple) -> None:
        try:
            await fn(*args)
        except Exception:
            log.exception("%s failed", getattr(fn, "__name__", fn))
