"""Shared user-queue service (firmware_sim.queue_service): one polling core serves every
queue while it keeps up, a second core joins on a backlog. Observed through each job's
completion record, which names the core that ran it."""
from __future__ import annotations

import time

import pytest

from libnpu.user_queue import QueueFence
from tests.kmd_fuse.test_user_queues import MIB, nop, slow_job, write_entry
from tests.support.device import WAIT_S, completion_core

pytestmark = pytest.mark.recovery

ROUND = 40          # NOP jobs a round
DEADLINE_S = 60     # generous: on a loaded host a helper may join now and then (the lead preempted)


def queues_of_both_cores(device):
    """Two queues the driver gave different cores (Q_CORE): before shared service each core
    served its own queues alone."""
    made = [device.create_queue(), device.create_queue()]
    while len({q.core for q in made}) < 2:
        made.append(device.create_queue())
    return next(q for q in made if q.core == 0), next(q for q in made if q.core == 1)


def test_small_jobs_of_two_cores_queues_run_on_one_polling_core(device):
    if device.info()["num_cores"] < 2:
        pytest.skip("a chip of one core")
    first, second = queues_of_both_cores(device)
    commands = nop(device)
    deadline, cores = time.monotonic() + DEADLINE_S, set()
    while time.monotonic() < deadline:
        cores = set()
        for _ in range(ROUND // 2):          # one job in flight at a time: no backlog
            for queue in (first, second):
                fence = device.queue_submit(queue, commands).wait(WAIT_S)
                cores.add(completion_core(queue, fence.id))
        if cores == {0}:                     # the lead alone, the second core asleep
            break
    assert cores == {0}, f"NOP rounds of two queues ran on cores {sorted(cores)} until the deadline"


def test_long_jobs_of_two_queues_run_on_both_cores_at_once(device):
    if device.info()["num_cores"] < 2:
        pytest.skip("a chip of one core")
    first, second = device.create_queue(), device.create_queue()
    src, dst = device.alloc_mem(4 * MIB), device.alloc_mem(4 * MIB)
    other = device.alloc_mem(4 * MIB)
    jobs = [slow_job(device, src, dst, 8), slow_job(device, src, other, 8)]
    deadline, cores = time.monotonic() + DEADLINE_S, []
    while time.monotonic() < deadline:
        seqs = []
        for queue, commands in zip((first, second), jobs):
            seq = queue.tail + 1
            write_entry(queue, seq, commands.address, commands.used)   # both waiting before either rings
            seqs.append(seq)
        for queue in (first, second):
            queue.ring()
        for queue, seq in zip((first, second), seqs):
            QueueFence(queue, seq).wait(WAIT_S)
        cores = sorted(completion_core(queue, seq) for queue, seq in zip((first, second), seqs))
        if cores == [0, 1]:
            break
    assert cores == [0, 1], f"two queues' long jobs ran on cores {cores} until the deadline"


def test_a_queue_flooded_with_long_jobs_holds_one_core_and_starves_no_one(device):
    """A client that fills its queue with long jobs and never waits keeps one core busy (one job
    of a queue at a time, whatever core runs it): another queue's NOP is served while the
    flood is still far from done."""
    flooded, other = device.create_queue(), device.create_queue()
    src, dst = device.alloc_mem(MIB), device.alloc_mem(MIB)
    long_job = slow_job(device, src, dst, 4)
    commands = nop(device)
    write_entry(other, 1, commands.address, commands.used)    # waiting before the flood comes
    for seq in range(1, flooded.entries + 1):
        write_entry(flooded, seq, long_job.address, long_job.used)
    other.ring()
    flooded.ring()
    QueueFence(other, 1).wait(WAIT_S)
    assert flooded.done() < flooded.entries // 2, "the NOP waited for half the flood"
    flooded.close(cancel=True, timeout=WAIT_S)
