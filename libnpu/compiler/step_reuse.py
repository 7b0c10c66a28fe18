"""Work the steps of one escalating compile share, done once per compile instead of once per step.

The default recipe (:mod:`libnpu.compiler.escalation`) quantizes a model up to four times
(int8, int16 activations, int16 weights, bias correction). Each step used to start from
nothing, though most of what it computes is the same: the optimized and channel-equalized
float graph, the calibration ranges, GPTQ's input moments (the Hessians), the quantized
graph before bias correction, each tensor's channel peaks, and the float graph's outputs
on the held-out samples, which every measurement compares with. Inside
:func:`reusing_work` (what :func:`libnpu.compiler.escalation.quantize_to_target` opens
around its steps), :func:`once` computes each of those the first time and hands the same
value to the steps after it; outside it, :func:`once` just computes (``recipe="fast"`` and
the other recipes are unchanged).

A value is keyed on the objects it was computed from, by identity (the graph, each
calibration sample: one compile passes the same objects to every step) and on the
parameters that change it. The objects are kept alive with the value, so an identity is
never reused by another object while the scope lasts. The values are shared, never copied
unless the caller asks (:func:`once`'s ``copy``): the functions that take them read them
only. The result is the same loadable as without the scope (``tests/test_step_reuse.py``).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["reusing_work", "once", "reuse_counts"]

T = TypeVar("T")

_MEMO: ContextVar[dict[Hashable, tuple[Sequence[object], Any]] | None] = ContextVar("npu_step_reuse", default=None)
_COUNTS: ContextVar[dict[str, list[int]] | None] = ContextVar("npu_step_reuse_counts", default=None)


@contextmanager
def reusing_work() -> Iterator[dict[str, list[int]]]:
    """A scope in which :func:`once` computes each value once; yields the counts
    (:func:`reuse_counts`). Scopes nest: an inner one shares the outer one's values."""
    outer = _COUNTS.get()
    if _MEMO.get() is not None and outer is not None:
        yield outer
        return
    counts: dict[str, list[int]] = {}
    memo_token, count_token = _MEMO.set({}), _COUNTS.set(counts)
    try:
        yield counts
    finally:
        _MEMO.reset(memo_token)
        _COUNTS.reset(count_token)


def once(kind: str, sources: Sequence[object], params: Hashable, compute: Callable[[], T], *,
         copy: Callable[[T], T] | None = None) -> T:
    """``compute()``, or inside :func:`reusing_work` the value computed before for the same
    ``kind``, the same ``sources`` (by identity) and equal ``params``. ``copy``: applied to
    what is handed out (the memo keeps the original), for a caller that changes it."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    counts = _COUNTS.get()
    assert counts is not None
    key = (kind, tuple(id(s) for s in sources), params)
    tally = counts.setdefault(kind, [0, 0])
    if key in memo:
        tally[1] += 1
        value = memo[key][1]
    else:
        tally[0] += 1
        value = compute()
        memo[key] = (tuple(sources), value)     # the sources kept alive: their ids stay theirs
    return copy(value) if copy is not None else value


def reuse_counts() -> dict[str, tuple[int, int]]:
    """Inside :func:`reusing_work`: per kind, (computed, reused) so far; else empty."""
    counts = _COUNTS.get()
    return {k: (v[0], v[1]) for k, v in (counts or {}).items()}
