"""A compile's work counted in op evaluations of the float reference: the unit of the
escalation's cap, because it is the same on every machine and under any load.

Every graph run the quantizer makes (calibration, GPTQ's moments, equalization, channel
peaks, the fidelity measurements, bias correction, the int16 search) evaluates its ops one
by one through :func:`libnpu.compiler.float_ref.evaluate`, which calls :func:`count_op`.
Inside :func:`counting_work`, :func:`work_done` says how many so far. The default recipe
(:mod:`libnpu.compiler.escalation`) caps its steps in these units, not in seconds: a
compile's result never depends on how busy the machine was (the same model and options
give the same bytes everywhere, docs/security.md). An op evaluation of a big convolution
costs more than one of an ADD, but every step runs the same graph's ops, so the ratio of two
steps' counts is the ratio of their work (GPTQ's own rounding, which runs no ops, aside).

After :func:`limit_work`, the op evaluation past the limit raises :class:`WorkCapReached`:
the escalation stops a step there (its cap holds on the running step too, not only between
steps), at the same op on every machine.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["counting_work", "count_op", "work_done", "limit_work", "WorkCapReached"]

#: The count of the innermost :func:`counting_work` scope and its limit (-1: none).
_COUNT: ContextVar[list[int] | None] = ContextVar("npu_work_count", default=None)


class WorkCapReached(Exception):
    """The work of a :func:`counting_work` scope reached the limit :func:`limit_work` set
    (raised by the op evaluation past it). Code that catches every exception to carry on
    without an optional result re-raises this one: the cap stops the work, it never
    changes what the work computes."""


@contextmanager
def counting_work() -> Iterator[None]:
    """Count op evaluations from here (a nested scope counts on in the outer one's count)."""
    if _COUNT.get() is not None:
        yield
        return
    token = _COUNT.set([0, -1])
    try:
        yield
    finally:
        _COUNT.reset(token)


def count_op() -> None:
    """One op evaluated (a no-op outside :func:`counting_work`); the one past the limit
    :func:`limit_work` set raises :class:`WorkCapReached`."""
    count = _COUNT.get()
    if count is not None:
        count[0] += 1
        if 0 <= count[1] < count[0]:
            raise WorkCapReached(f"the work cap: {count[1]} op evaluations")


def limit_work(ops: int | None) -> None:
    """Inside :func:`counting_work`: at most ``ops`` more op evaluations from here (the next
    one raises :class:`WorkCapReached`), until the scope ends or the next call; None lifts
    the limit. A no-op outside the scope."""
    count = _COUNT.get()
    if count is not None:
        count[1] = -1 if ops is None else count[0] + max(0, int(ops))


def work_done() -> int:
    """Op evaluations so far inside :func:`counting_work` (0 outside)."""
    count = _COUNT.get()
    return count[0] if count is not None else 0
