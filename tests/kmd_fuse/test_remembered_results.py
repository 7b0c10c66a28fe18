"""The fence results a context remembers for WAIT are the driver's memory: bounded per
context (RESULTS_KEPT) and, since a user may open 256 contexts, per user
(RESULTS_PER_USER): 70,000 failed jobs made one context hold 24 MB of the daemon's
memory, which 256 contexts of one user multiplied to 6 GB. Driven on the contexts'
own bookkeeping (filling them through the node takes minutes)."""
from __future__ import annotations

import errno

from kmd_fuse import context
from kmd_fuse.context import Context, Job, UserLedger


def _contexts(count: int, uid: int, ledger: UserLedger) -> list[Context]:
    made = []
    for i in range(count):
        ctx = Context(i, 100 + i, uid, uid, "client", space=None, ledger=ledger)  # type: ignore[arg-type]
        ledger.contexts.add(ctx)
        made.append(ctx)
    return made


def _finish(ctx: Context, fence: int, status: int) -> None:
    job = Job(fence, ctx, fence, [], 0, 0, 1, 0, status=status)
    ctx.pending[fence] = job
    ctx.record_result(job)


def test_a_users_contexts_together_remember_a_bounded_number_of_results():
    ledger = UserLedger()
    contexts = _contexts(4, 1000, ledger)
    per_context = context.RESULTS_PER_USER // 4 + 5000       # failed jobs: two entries each
    for ctx in contexts:
        for fence in range(1, per_context + 1):
            _finish(ctx, fence, -errno.EFAULT)
    held = sum(len(c.results) + len(c.failures) for c in contexts)
    assert held == ledger.results <= context.RESULTS_PER_USER
    newest = contexts[-1]
    assert newest.fence_status(per_context) == (-errno.EFAULT, 0)   # the newest failures are remembered
    assert not any(c.pending for c in contexts)


def test_another_user_is_not_charged_and_a_closed_context_gives_its_share_back():
    mine, theirs = UserLedger(), UserLedger()
    (ctx,), (other,) = _contexts(1, 1000, mine), _contexts(1, 1001, theirs)
    for fence in range(1, 1001):
        _finish(ctx, fence, 0 if fence % 2 else -errno.EIO)
    _finish(other, 1, -errno.EIO)
    assert mine.results == 1500 and theirs.results == 2
    ctx.forget_results()
    assert mine.results == 0 and not mine.contexts
    ctx.closed = True
    _finish(ctx, 1001, -errno.EIO)                          # a job that ends after the close
    assert mine.results == 0 and ctx.stats.jobs_failed == 501
