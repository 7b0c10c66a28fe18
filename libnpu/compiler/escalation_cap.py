"""The escalation's cap (:mod:`libnpu.compiler.escalation`): the steps after int8 do at most
``budget`` times the int8 step's work, counted in op evaluations (:mod:`libnpu.compiler.work_count`).

No step starts past the cap (:func:`cap_reached`), and the step running when the work
reaches it stops there (:func:`limit_to_cap`: its op evaluation past the cap raises
:class:`~libnpu.compiler.work_count.WorkCapReached`; :func:`stopped` records it). Op
evaluations are the same on every machine and under any load, so where the cap stops a
compile, and the loadable it makes, never depend on how busy the machine was.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .progress import Progress
from .work_count import limit_work, work_done

__all__ = ["cap_reached", "limit_to_cap", "cap_text", "stopped"]


def cap_reached(tried: Sequence[Mapping[str, Any]], budget: float, next_step: str) -> str:
    """Why ``next_step`` does not start (the note the metadata keeps), or "" when it may: the
    steps after int8 have done more than ``budget`` times the int8 step's work. int8 always
    runs and the first escalation starts (:func:`limit_to_cap` stops a step at the cap)."""
    if not budget or len(tried) < 2:
        return ""
    base = int(tried[0]["work"])
    spent = sum(int(s["work"]) for s in tried[1:])
    if spent <= budget * base:
        return ""
    return (f"{next_step} not tried: the steps after int8 did {spent / base:.1f} times the int8 step's work, "
            f"over the cap of {budget:g}")


def limit_to_cap(tried: Sequence[Mapping[str, Any]], budget: float) -> None:
    """The work of a step after int8 limited to what the cap leaves (:func:`cap_reached`'s
    rule on the running step: the op evaluation past it raises
    :class:`~libnpu.compiler.work_count.WorkCapReached`); int8 itself is never limited."""
    if budget and tried:
        base = int(tried[0]["work"])
        limit_work(int(budget * base) - sum(int(s["work"]) for s in tried[1:]))


def cap_text(budget: float, what: str) -> str:
    """The note for ``what`` stopped by the cap (the metadata's ``capped``)."""
    return f"{what} stopped at the cap: the steps after int8 reached {budget:g} times the int8 step's work"


def stopped(tried: list[dict[str, Any]], name: str, before: int, budget: float, progress: Progress | None,
            step: str) -> str:
    """A step the cap stopped, in ``tried`` (its work, not measured); the note for the metadata."""
    tried.append({"step": name, "stopped": True, "work": work_done() - before})
    if progress is not None:
        progress(f"step {step}", 1, 1)
    return cap_text(budget, name)
