"""Attacks on user queues by a client that lies, beyond those of test_user_queues.py and
test_queue_destroy.py: a queue the chip stopped must stay stopped whatever restarts its
core; command buffers the chip keeps decoded cannot grow a core without bound."""
from __future__ import annotations

import errno
import time

import pytest

import libnpu
from kmd_fuse import paths
from libnpu.portability import JobError
from npu_hw import queues
from tests.kmd_fuse.test_queue_destroy import refused
from tests.kmd_fuse.test_user_queues import MIB, _driver_and_chip, dma_copy, nop, slow_job, write_entry
from tests.support.device import wait_until

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)


def queue_on_core(session, core: int):
    """(device, queue) of a new context whose queue the driver put on ``core`` (the
    driver puts a queue on the core serving fewest: the others stay open meanwhile)."""
    for _ in range(4):
        device = session.open(0)
        queue = device.create_queue()
        if queue.core == core:
            return device, queue
    pytest.fail(f"no queue landed on core {core}")


def test_a_queue_stopped_for_a_bad_tail_stays_stopped_after_its_core_restarts(fresh_npu):
    """The chip stopped a queue (EINVAL: a garbage tail); a job past its timeout then
    restarts the serving core. The new core process must not serve the stopped queue again,
    though the client put its tail back before the restart and writes another entry."""
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        commands = nop(device)
        device.queue_submit(queue, commands).wait(10)
        queue.header.write64(queues.HDR_TAIL, 1 << 60)
        queue.ring()
        assert wait_until(lambda: queue.error() == -errno.EINVAL)
        queue.header.write64(queues.HDR_TAIL, 1)              # the client "repairs" its tail at once

        other, other_queue = queue_on_core(session, queue.core)
        src, dst = other.alloc_mem(16 * MIB), other.alloc_mem(16 * MIB)
        resets = device.info()["reset_count"]
        with pytest.raises(JobError) as timed_out:
            other.queue_submit(other_queue, slow_job(other, src, dst, 400), timeout_ms=30).wait(30)
        assert timed_out.value.errno == errno.ETIMEDOUT
        assert device.info()["reset_count"] > resets          # the serving core was restarted

        write_entry(queue, 2, commands.address, commands.used)
        queue.ring()
        other.queue_submit(other_queue, nop(other)).wait(10)  # the new core serves the other queue on
        time.sleep(1.2)   # not a wait: past the core's longest sleep (1 s), a chance for entry 2 to run wrongly
        assert queue.header.read64(queues.HDR_DONE) == 1      # entry 2 never ran
        assert queue.error() == -errno.EINVAL


def _chip_rss_kb(devroot) -> int:
    """Resident memory of the chip's processes (main process and cores), in kB."""
    total = 0
    for pid in _driver_and_chip(devroot, paths.bus_dir(devroot, 0))[1:]:
        with open(f"/proc/{pid}/status") as status:
            total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return total


def test_huge_command_buffers_cannot_grow_a_core_without_bound(fresh_npu):
    """A core keeps decoded jobs (job plans) to replay them; a client that submits one huge
    command buffer of 200,000 NOPs again and again, one byte shorter each time (a new plan
    each), must not make the core keep them all: about 25 MB each, which took the core's
    memory up to its address-space limit, where other users' jobs fail for lack of memory."""
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        tasks = 200_000
        commands = device.command_buffer(capacity=8 * tasks + 64)
        for _ in range(tasks):
            commands.add("NOP")
        queue.submit(commands.address, 8 * 1000, 0, 0).wait(30)      # the core's own start-up growth
        before = _chip_rss_kb(fresh_npu.devroot)
        for shorter in range(6):
            queue.submit(commands.address, commands.used - 8 * shorter, 0, 0).wait(30)
        grown_mb = (_chip_rss_kb(fresh_npu.devroot) - before) // 1024
        assert grown_mb < 90, f"the chip grew {grown_mb} MB"
        victim = session.open(0)
        src, dst = victim.alloc_mem(MIB), victim.alloc_mem(MIB)
        src.view[:] = 7
        victim.run(dma_copy(victim, src.address, dst.address, MIB))
        assert (dst.view == 7).all()


def test_an_error_forged_in_the_header_does_not_let_a_destroy_skip_its_jobs_in_flight(session):
    """QUEUE_DESTROY without CANCEL is EBUSY while jobs are in flight; the driver must tell
    "the chip stopped the queue" from its own registers, not from the header's error,
    which the client writes as it pleases."""
    device = session.open(0)
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    fence = device.queue_submit(queue, slow_job(device, src, dst, 40))
    device.queue_submit(queue, nop(device))
    for forged in (-errno.EINVAL, -errno.ECANCELED, 1):
        queue.header.set_error(forged)
        assert refused(device, queue.id) == errno.EBUSY
    queue.header.set_error(0)
    fence.wait(60)
    queue.close()
    device.close()
