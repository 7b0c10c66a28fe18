"""The index of deferred frees (kmd_fuse/deferred_frees.py) on its own: a free comes out once
every core's INVAL_DONE has reached its target (32-bit counts that wrap), a closed context's
once its queues are gone, all of them after a reset; in the order they were deferred, each
exactly once. The driver's side of it runs in tests/kmd_fuse/test_deferred_frees.py."""
from __future__ import annotations

from pathlib import Path

from kmd_fuse.buffer import BufferObject
from kmd_fuse.context import Context
from kmd_fuse.deferred_frees import DeferredFree, PendingFrees

WRAP = 1 << 32


def context(number: int) -> Context:
    return Context(context_id=number, pid=0, uid=0, gid=0, comm="test", space=None)   # type: ignore[arg-type]


def free(ctx: Context, handle: int, targets: list[int] | None) -> DeferredFree:
    bo = BufferObject(bo_id=handle, handle=handle, size=4096, iova=handle << 12, fd=-1, link=Path("/"), flags=0)
    return DeferredFree(ctx, bo, targets)


def handles(frees: list[DeferredFree]) -> list[int]:
    return [deferred.bo.handle for deferred in frees]


def test_a_free_comes_out_once_every_core_reached_its_target_across_the_wrap():
    pending, ctx = PendingFrees(), context(1)
    start = [WRAP - 3, 10]
    pending.add(free(ctx, 1, [(WRAP - 1) % WRAP, 10]), start)      # core 0 must pass 2^32 - 1
    pending.add(free(ctx, 2, [2, 12]), start)                      # past the wrap on core 0, +2 on core 1
    pending.add(free(ctx, 3, [WRAP - 5, 9]), start)                # behind both counts: ready now
    assert handles(pending.take_ready(start)) == [3] and len(pending) == 2
    assert pending.take_ready([WRAP - 2, 11]) == []
    assert handles(pending.take_ready([WRAP - 1, 11])) == [1]
    assert pending.take_ready([1, 12]) == []                       # core 0 wrapped, not far enough
    assert handles(pending.take_ready([5, 12])) == [2]
    assert len(pending) == 0 and not pending.holds(ctx)


def test_frees_come_out_in_the_order_they_were_deferred_each_once():
    pending, a, b = PendingFrees(), context(1), context(2)
    counts = [100, 200]
    frees = [free(a if i % 2 else b, i, [100 + i % 7, 200 + i % 5]) for i in range(1000)]
    for deferred in frees:
        pending.add(deferred, counts)
    out: list[int] = []
    for step in range(8):             # each round: the frees whose targets were just reached, in order
        expected = [i for i in range(1000) if max(i % 7, i % 5) == step]
        assert handles(pending.take_ready([100 + step, 200 + step])) == expected
        out += expected
    assert sorted(out) == list(range(1000)) and len(pending) == 0


def test_a_closing_context_waits_for_its_queues_and_a_reset_lets_everything_go():
    pending, a, b = PendingFrees(), context(1), context(2)
    a.queues.append(object())
    counts = [0, 0]
    pending.add(free(a, 1, [5, 0]), counts)
    pending.add(free(b, 2, [5, 0]), counts)
    pending.add(free(a, 3, [0, 0]), counts)                         # safe already, then its context closes
    pending.context_closing(a)
    pending.add(free(a, 4, None), counts)                           # a closed context's own buffer
    out = pending.take_ready([5, 0])
    assert handles(out) == [2]                                      # a's wait for its queue, whatever the counts
    a.queues.clear()
    assert handles(pending.take_ready([5, 0])) == [1, 3, 4] and len(pending) == 0
    pending.add(free(b, 5, [9, 9]), [6, 6])
    pending.add(free(a, 6, None), [6, 6])
    a.queues.append(object())
    pending.reset()
    assert handles(pending.take_ready([0, 0])) == [5, 6] and not pending.holds(a) and not pending.holds(b)
    pending.add(free(b, 7, [3, 0]), [0, 0])                         # counts start again after the reset
    assert pending.take_ready([2, 0]) == [] and handles(pending.take_ready([3, 0])) == [7]
