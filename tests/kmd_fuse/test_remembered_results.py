"""The fence results a context remembers for WAIT are the driver's memory: bounded per
context (RESULTS_KEPT) and, since a user may open 256 contexts, per user
(RESULTS_PER_USER): 70,000 failed jobs made one context hold 24 MB of the daemon's
memory, which 256 contexts of one user multiplied to 6 GB. Driven on the contexts'
own bookkeeping (filling them through the node takes minutes)."""
from __future__ import annotations

import errno

import pytest

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
    ctx.signal_fence(job)


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


@pytest.mark.recovery
def test_a_user_has_a_bounded_number_of_jobs_pending_across_contexts(fresh_npu):
    """4,096 pending jobs a context (EAGAIN beyond) held ~3.7 MB of the daemon's memory
    while the cores were busy; a user's 256 contexts ~950 MB. The user's contexts together
    get EAGAIN past MAX_PENDING_JOBS_PER_USER; another user's jobs are not counted."""
    import libnpu
    from npu_hw import regs
    from tests.support.device import set_fault_injection

    with libnpu.initialize(fresh_npu.devroot) as session:
        devices, queued = [], 0
        nop_of = {}
        set_fault_injection(fresh_npu.devroot, regs.FAULT_HANG)   # the cores hold their first jobs
        try:
            refused = None
            while refused is None and len(devices) < context.MAX_PENDING_JOBS_PER_USER // 4096 + 2:
                device = session.open(0)
                devices.append(device)
                commands = nop_of[device] = device.command_buffer()
                commands.add("NOP")
                for _ in range(4096 // 8):
                    try:
                        device.submit_batch([device.prepare_submit(commands, [], timeout_ms=10_000)] * 8)
                    except libnpu.NpuError as exc:
                        refused = exc.errno
                        break
                    queued += 8
            assert refused == errno.EAGAIN
            assert queued == context.MAX_PENDING_JOBS_PER_USER
        finally:
            set_fault_injection(fresh_npu.devroot, 0)
            devices[0].reset()                               # the hung jobs fail, the rest run
        last = devices[-1]
        last.run(nop_of[last])
        for device in devices:
            device.close()
