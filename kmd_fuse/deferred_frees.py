"""MEM_FREEs deferred while a user queue may still reach the buffer (kmd_fuse.user_queues),
indexed by what each waits for, so that a poll round costs what changed, not what is pending.

A free in a live context waits until every core has carried out the IOTLB invalidations
counted in its ``targets`` (one INVAL_DONE value per core). It sits in one heap at a time:
that of the first core whose count has not reached its target yet, ordered by target. A
poll round advances each core's count and pops only the frees that core has now passed;
each moves to the next core it still waits for, or is ready. With thousands pending behind
a hung core, a round looks at each core's smallest target and nothing else (it scanned every
pending free before: ~2.7 ms a round with 4,096).

A closed context's frees wait for its queues to be gone instead (``targets`` None), grouped
by context; a device reset makes every pending free ready. Ready frees come out in the order
they were deferred, so the MEM_FREEs of one context are answered in the order they came.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from kmd_fuse.buffer import BufferObject
from kmd_fuse.context import Context

COUNT_MASK = 0xFFFFFFFF     # INVAL_DONE is a 32-bit register that wraps
HALF = 1 << 31              # a target this far "ahead" of a count is behind it (already reached)


@dataclass(eq=False)
class DeferredFree:
    ctx: Context
    bo: BufferObject
    targets: list[int] | None   # per core, INVAL_DONE to reach; None: when the context's queues are gone
    reply_to: object | None = None   # the MEM_FREE / QUEUE_DESTROY (requests.Request) answered once it is back
    order: int = 0                   # when it was deferred (ready ones come out in this order)
    until: list[int] = field(default_factory=list)   # ``targets`` on the unwrapped counts


class PendingFrees:
    """The deferred frees of one device, waiting for the cores' invalidations or for their
    closed context's queues to be given back."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._heaps: list[list[tuple[int, int, DeferredFree]]] = []   # per core: (until, order, free)
        self._closing: dict[Context, list[DeferredFree]] = {}         # closed contexts' frees
        self._of_context: dict[Context, dict[DeferredFree, None]] = {}
        self._raw: list[int] | None = None      # each core's INVAL_DONE as last seen
        self._seen: list[int] = []              # the same, unwrapped
        self._ready: list[DeferredFree] = []    # safe already when deferred: out at the next take
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def holds(self, ctx: Context) -> bool:
        """Whether a free of ``ctx`` is still pending."""
        return ctx in self._of_context

    def add(self, deferred: DeferredFree, counts: list[int]) -> None:
        """Defer ``deferred``; ``counts``: each core's INVAL_DONE now."""
        deferred.order = next(self._order)
        self._of_context.setdefault(deferred.ctx, {})[deferred] = None
        self._count += 1
        if deferred.targets is None:
            self._closing.setdefault(deferred.ctx, []).append(deferred)
            return
        self._advance(counts)
        deferred.until = [seen + (delta if (delta := (target - raw) & COUNT_MASK) < HALF else 0)
                          for seen, raw, target in zip(self._seen, self._raw or counts, deferred.targets)]
        self._place(deferred, self._ready)

    def context_closing(self, ctx: Context) -> None:
        """``ctx`` closed: its pending frees wait for its queues to be given back instead."""
        closing = self._closing.setdefault(ctx, [])
        self._ready = [deferred for deferred in self._ready if deferred.ctx is not ctx]
        for deferred in self._of_context.get(ctx, ()):
            if deferred.targets is not None:
                deferred.targets = None           # its heap entry is dropped when it comes up
                closing.append(deferred)
        if not closing:
            del self._closing[ctx]

    def reset(self) -> None:
        """Every core restarted: none runs a job or holds a view any more; all are ready."""
        self._ready = [d for pending in self._of_context.values() for d in pending]
        self._heaps = [[] for _ in self._heaps]
        self._closing.clear()
        self._raw = None                         # the counts may start again from anywhere

    def take_ready(self, counts: list[int]) -> list[DeferredFree]:
        """The frees safe to give back now (``counts``: each core's INVAL_DONE), in the order
        they were deferred; they leave the index."""
        ready, self._ready = self._ready, []
        self._advance(counts)
        for core, heap in enumerate(self._heaps):
            while heap and heap[0][0] <= self._seen[core]:
                deferred = heapq.heappop(heap)[2]
                if deferred.targets is not None and deferred in self._of_context.get(deferred.ctx, ()):
                    self._place(deferred, ready)   # the next core it waits for, or ready
        for ctx in [ctx for ctx in self._closing if not ctx.queues]:
            ready.extend(self._closing.pop(ctx))
        taken = []
        for deferred in sorted(ready, key=lambda deferred: deferred.order):
            pending = self._of_context.get(deferred.ctx)
            if pending is None or deferred not in pending:
                continue                          # ready twice (safe, then its context closed)
            del pending[deferred]
            if not pending:
                del self._of_context[deferred.ctx]
            taken.append(deferred)
        self._count -= len(taken)
        return taken

    def _place(self, deferred: DeferredFree, ready: list[DeferredFree]) -> None:
        for core, until in enumerate(deferred.until):
            if until > self._seen[core]:
                heapq.heappush(self._heaps[core], (until, deferred.order, deferred))
                return
        ready.append(deferred)

    def _advance(self, counts: list[int]) -> None:
        if self._raw is None or len(self._raw) != len(counts):
            self._raw, self._seen = list(counts), [0] * len(counts)
            self._heaps = [[] for _ in counts] if len(self._heaps) != len(counts) else self._heaps
            return
        for core, (raw, count) in enumerate(zip(self._raw, counts)):
            delta = (count - raw) & COUNT_MASK
            if delta < HALF:                      # a count never goes back; ignore one that seems to
                self._seen[core] += delta
                self._raw[core] = count
