"""GET_PROFILE of user-queue jobs (ABI 2.6): an entry with NPU_QUEUE_ENTRY_PROFILE is timed
task by task like a SUBMIT with NPU_SUBMIT_PROFILE, and its profile is asked for with the
job's queue fence. Other contexts' queue fences, jobs not profiled, not done or never
written, and queues given back are answered with precise errnos."""
from __future__ import annotations

import errno

import pytest

import libnpu
from kmd_fuse import uapi
from npu_hw import queues
from tests.kmd_fuse.test_user_queues import slow_job

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

MIB = 1 << 20


def three_nops(device):
    commands = device.command_buffer()
    for _ in range(3):
        commands.add("NOP")
    return commands


def profile_errno(device, fence_id: int) -> int:
    with pytest.raises(libnpu.NpuError) as refused:
        device.get_profile(fence_id)
    return refused.value.errno


def test_a_profiled_queue_job_has_its_tasks_timed_like_a_submit(device):
    queue = device.create_queue()
    commands = three_nops(device)
    fence = device.queue_submit(queue, commands, profile=True).wait(10)
    timing = device.get_profile(fence)
    assert timing.fence == queues.user_job_id(queue.id, fence.id)
    assert timing.fence & uapi.NPU_QUEUE_FENCE_BIT and timing.fence >> uapi.NPU_QUEUE_FENCE_SHIFT & 0x7FFF == queue.id
    assert timing.status == 0 and timing.core == queue.core and timing.complete
    assert [t.index for t in timing.tasks] == [0, 1, 2]
    assert all(t.start_ns <= t.end_ns for t in timing.tasks)
    assert timing.start_ns <= timing.tasks[0].start_ns and timing.tasks[-1].end_ns <= timing.end_ns
    assert timing.submit_ns == timing.start_ns                    # no SUBMIT: taken when the core took it
    assert timing.end_ns <= timing.signal_ns                      # the completion posted (after any pacing)
    assert timing.via_queue
    assert timing.cycles > 0
    prepared = device.prepare_submit(commands, profile=True, wait=True)
    submitted = device.get_profile(device.submit_prepared(prepared))
    assert [t.opcode for t in submitted.tasks] == [t.opcode for t in timing.tasks]
    assert submitted.cycles == timing.cycles
    # A failed job's profile carries its errno (an address this context never mapped).
    bad = queue.submit(0x7FFF0000, 64, flags=queues.ENTRY_PROFILE)
    with pytest.raises(libnpu.JobError):
        bad.wait(10)
    assert device.get_profile(bad).status == -errno.EFAULT
    queue.close()


def test_queue_fence_errnos(session):
    device, other = session.open(0), session.open(0)
    queue = device.create_queue()
    plain = device.queue_submit(queue, three_nops(device)).wait(10)
    assert profile_errno(device, queues.user_job_id(queue.id, plain.id)) == errno.ENOENT     # not profiled
    assert profile_errno(device, queues.user_job_id(queue.id, queue.tail + 5)) == errno.EINVAL   # never written
    assert profile_errno(device, queues.user_job_id(queue.id, 0)) == errno.EINVAL
    assert profile_errno(device, queues.USER_JOB_BIT | 0x7FFF << 48 | 1) == errno.EINVAL         # past the slots
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    running = device.queue_submit(queue, slow_job(device, src, dst, 60), profile=True)   # far from its timeout
    assert profile_errno(device, queues.user_job_id(queue.id, running.id)) == errno.EBUSY
    running.wait(60)
    assert len(device.get_profile(running).tasks) == 60
    # Another context asks about this queue's jobs: the queue is not its own.
    assert profile_errno(other, queues.user_job_id(queue.id, running.id)) == errno.ENOENT
    # A queue given back takes its profiles along (its slot and seqs will be reused).
    slot, seq = queue.id, running.id
    queue.close()
    assert profile_errno(device, queues.user_job_id(slot, seq)) == errno.ENOENT
    device.close(), other.close()


def test_a_queue_job_too_big_for_the_profile_queue_is_reported_incomplete(device):
    # 4,095 tasks + the job's record overflow a core's 4,096-entry profile queue: the job's
    # own record still comes (a queue job has no completion through the driver to stand
    # in for it), so GET_PROFILE answers, incomplete; the next profiled job is whole again.
    queue = device.create_queue()
    huge = device.command_buffer(8 * 4095)
    for _ in range(4095):
        huge.add("NOP")
    timing = device.get_profile(device.queue_submit(queue, huge, profile=True).wait(60))
    assert timing.tasks == [] and not timing.complete and timing.status == 0 and timing.cycles > 0
    small = device.get_profile(device.queue_submit(queue, three_nops(device), profile=True).wait(10))
    assert len(small.tasks) == 3 and small.complete
    queue.close()


def test_another_process_cannot_read_a_queue_jobs_profile(npu, device):
    import subprocess
    import sys
    import textwrap

    from tests.support.device import REPO
    queue = device.create_queue()
    fence = device.queue_submit(queue, three_nops(device), profile=True).wait(10)
    job = queues.user_job_id(queue.id, fence.id)
    script = textwrap.dedent("""
        import sys
        import libnpu
        with libnpu.initialize(sys.argv[1]) as session:
            device = session.open(0)
            try:
                device.get_profile(int(sys.argv[2]))
                print("read")
            except libnpu.NpuError as exc:
                print(exc.errno)
        """)
    done = subprocess.run([sys.executable, "-c", script, str(npu.devroot), str(job)], capture_output=True,
                          text=True, timeout=60, cwd=str(REPO))
    assert done.stdout.split() == [str(errno.ENOENT)], done.stderr
    assert len(device.get_profile(fence).tasks) == 3        # still the owner's
    queue.close()
