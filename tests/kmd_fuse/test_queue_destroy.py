"""QUEUE_DESTROY (ABI 2.6): a user queue given back before its context closes. Without
flags a queue with jobs in flight is refused (EBUSY); NPU_QUEUE_DESTROY_CANCEL cancels
them. The reply comes once the chip let go: the slot, the memory and the limits' counts are
back, the client's mapping reads zeros. Hostile clients: another process's queue id, a
client that keeps writing its ring while the queue goes, a destroy racing a reset."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths, uapi
from libnpu.user_queue import QueueFence
from npu_hw import queues, regs
from tests.kmd_fuse.test_user_queues import NOBODY, nop, raw_queue_create, slow_job, write_entry
from tests.support.device import REPO, WAIT_S, completion_core, core_registers, open_to_others, wait_for, wait_until
from tests.support.other_user import python_for_others

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

MIB = 1 << 20


def raw_destroy(device, queue_id: int, flags: int = 0):
    req = uapi.new_payload(uapi.NPU_CMD_QUEUE_DESTROY)
    req.queue_id, req.flags = queue_id, flags
    return device.file.request(uapi.NPU_CMD_QUEUE_DESTROY, req)


def refused(device, queue_id: int, flags: int = 0) -> int:
    with pytest.raises(libnpu.NpuError) as caught:
        raw_destroy(device, queue_id, flags)
    return caught.value.errno


def slot_enabled(devroot, slot: int) -> bool:
    table = np.fromfile(paths.bus_dir(devroot, 0) / "qtab", np.uint32)
    return bool(table[(queues.slot_offset(slot) + queues.Q_CONTROL) // 4] & queues.Q_ENABLED)


def test_destroy_gives_the_slot_memory_and_count_back_and_the_mapping_reads_zeros(npu, session):
    device = session.open(0)
    commands = nop(device)
    baseline = device.info()["memory_used"]
    first, second = device.create_queue(), device.create_queue()
    device.queue_submit(first, commands).wait(10)
    assert slot_enabled(npu.devroot, first.id)
    raw_destroy(device, first.id)
    # Answered once given back: the slot is off, the queue memory zeros, the magic gone.
    assert not slot_enabled(npu.devroot, first.id)
    assert first.header.read32(queues.HDR_MAGIC) == 0 and first.error() == -errno.ECANCELED
    with pytest.raises(libnpu.NpuError) as stopped:
        device.queue_submit(first, commands)
    assert stopped.value.errno == errno.ECANCELED
    # The context's count is down: a new queue at once (the limit is 2), and it works.
    third = device.create_queue()
    assert device.queue_submit(third, commands).wait(10).status == 0
    assert device.queue_submit(second, commands).wait(10).status == 0
    assert device.info()["memory_used"] == baseline      # queue memory is the driver's, never counted
    device.close()


def test_destroy_errnos(session):
    device, other = session.open(0), session.open(0)
    queue = device.create_queue()
    theirs = other.create_queue()
    free_slot = next(slot for slot in range(queues.QUEUE_SLOTS) if slot not in (queue.id, theirs.id))
    assert refused(device, queues.QUEUE_SLOTS) == errno.EINVAL          # past the chip's slots
    assert refused(device, 0xFFFFFFFF) == errno.EINVAL
    assert refused(device, queue.id, flags=0x2) == errno.EINVAL         # unknown flag
    assert refused(device, free_slot) == errno.ENOENT                   # no queue there
    assert refused(device, theirs.id) == errno.ENOENT                   # another context's: not told apart
    assert other.queue_submit(theirs, nop(other)).wait(10).status == 0  # ... and untouched
    # Jobs in flight: EBUSY, and the queue serves on; CANCEL destroys it anyway.
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    fence = device.queue_submit(queue, slow_job(device, src, dst, 40))
    for _ in range(3):
        device.queue_submit(queue, nop(device))
    assert refused(device, queue.id) == errno.EBUSY
    fence.wait(60)
    raw_destroy(device, queue.id, uapi.NPU_QUEUE_DESTROY_CANCEL)
    assert refused(device, queue.id) == errno.ENOENT                    # destroying twice
    nonzero = uapi.new_payload(uapi.NPU_CMD_QUEUE_DESTROY)
    nonzero.queue_id, nonzero.reserved[0] = theirs.id, 1
    with pytest.raises(libnpu.NpuError) as bad:
        device.file.request(uapi.NPU_CMD_QUEUE_DESTROY, nonzero)
    assert bad.value.errno == errno.EINVAL
    queue.release()
    device.close(), other.close()


def test_cancel_drops_entries_not_started_and_aborts_the_running_one(npu, session):
    device = session.open(0)
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    running = device.queue_submit(queue, slow_job(device, src, dst, 2000))   # seconds of copies
    for _ in range(5):
        device.queue_submit(queue, nop(device))
    wait_for(lambda: queue.id + 1 in core_registers(npu.devroot, regs.UQ_SLOT), "the copies under way on a core")
    before = device.stats()["jobs_submitted"]
    resets = device.info()["reset_count"]
    raw_destroy(device, queue.id, uapi.NPU_QUEUE_DESTROY_CANCEL)
    # The running job was aborted, not finished: its core restarted (counted as a reset).
    assert wait_until(lambda: device.info()["reset_count"] == resets + 1)
    # At most the running job was counted (aborted); the five behind it never ran.
    assert device.stats()["jobs_submitted"] - before <= 1
    with pytest.raises(libnpu.NpuError) as gone:
        running.wait(1)
    assert gone.value.errno == errno.ECANCELED
    queue.release()
    with device.create_queue() as fresh:                 # the core serves on
        assert device.queue_submit(fresh, nop(device)).wait(10).status == 0
    device.close()


def test_close_waits_for_the_jobs_in_flight_and_the_context_manager_destroys(npu, session):
    device = session.open(0)
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    src.view[:] = 7
    with device.create_queue() as queue:
        fence = device.queue_submit(queue, slow_job(device, src, dst, 20))
        slot = queue.id
    assert queue.closed and fence.status is None and not slot_enabled(npu.devroot, slot)
    assert int(dst.view[-1]) == 7                         # close waited for the job
    assert queue not in device.queues
    queue.close()                                        # twice: nothing
    with pytest.raises(libnpu.NpuError) as closed:
        device.queue_submit(queue, nop(device))
    assert closed.value.errno == errno.EBADF
    made = [device.create_queue() for _ in range(2)]     # both of the context's queues are free again
    for queue in made:
        queue.close()
    assert not device.queues
    device.close()


def test_a_destroyed_queue_comes_back_to_a_user_at_their_limit(fresh_npu):
    open_to_others(fresh_npu.devroot)
    script = textwrap.dedent("""
        import errno, sys
        import libnpu
        with libnpu.initialize(sys.argv[1]) as session:
            devices = [session.open(0), session.open(0), session.open(0)]
            made = [d.create_queue() for d in devices[:2] for _ in range(2)]
            try:
                devices[2].create_queue()
            except libnpu.NpuError as exc:
                print(errno.errorcode[exc.errno])
            made[0].close()
            queue = devices[2].create_queue()
            print(devices[2].queue_submit(queue, None).wait(10).status)
        """)
    python, env = python_for_others()
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           f"--groups={os.stat(fresh_npu.node).st_gid}", python, "-c", script,
                           str(fresh_npu.devroot)], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert done.stdout.split() == ["EMFILE", "0"], done.stderr


def test_another_process_cannot_destroy_a_queue(npu, session):
    device = session.open(0)
    queue = device.create_queue()
    script = textwrap.dedent("""
        import sys
        import libnpu
        from kmd_fuse import uapi
        with libnpu.initialize(sys.argv[1]) as session:
            device = session.open(0)
            for flags in (0, uapi.NPU_QUEUE_DESTROY_CANCEL):
                req = uapi.new_payload(uapi.NPU_CMD_QUEUE_DESTROY)
                req.queue_id, req.flags = int(sys.argv[2]), flags
                try:
                    device.file.request(uapi.NPU_CMD_QUEUE_DESTROY, req)
                    print("destroyed")
                except libnpu.NpuError as exc:
                    print(exc.errno)
        """)
    done = subprocess.run([sys.executable, "-c", script, str(npu.devroot), str(queue.id)], capture_output=True,
                          text=True, timeout=60, cwd=str(REPO))
    assert done.stdout.split() == [str(errno.ENOENT)] * 2, done.stderr
    assert device.queue_submit(queue, nop(device)).wait(10).status == 0
    device.close()


def test_a_client_writing_its_ring_while_the_queue_is_destroyed(npu, session):
    device = session.open(0)
    queue = device.create_queue(entries=8)
    commands = nop(device)
    stop = threading.Event()
    written = [0]

    def scribble() -> None:
        """Entries, tails (sane and garbage) and doorbells as fast as it can, ignoring every error."""
        rng = np.random.default_rng(3)
        seq = queue.tail
        while not stop.is_set():
            try:
                seq += 1
                write_entry(queue, seq, commands.address, commands.used)
                if rng.random() < 0.05:
                    queue.header.write64(queues.HDR_TAIL, int(rng.integers(0, 1 << 62)))
                os.write(queue.doorbell_fd, b"\x01")
            except (BlockingIOError, BrokenPipeError):
                pass
            written[0] += 1

    writer = threading.Thread(target=scribble)
    writer.start()
    try:
        assert wait_until(lambda: written[0] > 200)
        raw_destroy(device, queue.id, uapi.NPU_QUEUE_DESTROY_CANCEL)
        assert not slot_enabled(npu.devroot, queue.id)
        settled = device.stats()["jobs_submitted"]
        mark = written[0]
        assert wait_until(lambda: written[0] > mark + 200)    # it writes on, into its own pages
        assert device.stats()["jobs_submitted"] == settled        # nothing of it runs any more
        fresh = device.create_queue(entries=8)                    # possibly the same slot: new memory, new lines
        fences = [device.queue_submit(fresh, commands) for _ in range(20)]
        assert [f.wait(10).status for f in fences] == [0] * 20
        assert fences[0].id == 1
    finally:
        stop.set()
        writer.join()
    queue.release()
    device.close()


def test_destroy_racing_a_reset(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        commands = nop(device)
        baseline = device.info()["memory_used"]
        for round_ in range(6):
            made = [device.create_queue(), device.create_queue()]
            for queue in made:
                device.queue_submit(queue, commands).wait(10)
            outcomes: list = []

            def destroy(queue=made[round_ % 2]) -> None:
                try:
                    raw_destroy(device, queue.id, uapi.NPU_QUEUE_DESTROY_CANCEL)
                    outcomes.append(0)
                except libnpu.NpuError as exc:
                    outcomes.append(exc.errno)

            racer = threading.Thread(target=destroy)
            if round_ % 2:
                racer.start()
                device.reset()
            else:
                with session.open(0) as resetter:
                    racer.start()
                    resetter.reset()
            racer.join(30)
            assert not racer.is_alive() and outcomes[0] in (0, errno.ENOENT), outcomes
            for queue in made:
                queue.release()
            device.queues.clear()
            # Both of the context's queues come back whichever won.
            assert wait_until(lambda: _creates_two(device, commands))
        assert wait_until(lambda: device.info()["memory_used"] == baseline)
        device.run(commands)


def _creates_two(device, commands) -> bool:
    try:
        made = [device.create_queue(), device.create_queue()]
    except libnpu.NpuError as exc:
        if exc.errno != errno.EMFILE:
            raise
        for queue in list(device.queues):
            queue.close(cancel=True)
        return False
    ok = all(device.queue_submit(q, commands).wait(10).status == 0 for q in made)
    for queue in made:
        queue.close()
    return ok


def test_a_v24_create_request_and_an_unknown_destroy_are_answered(session):
    device = session.open(0)
    reply = raw_queue_create(device)
    raw_destroy(device, reply.queue_id)
    assert refused(device, reply.queue_id) == errno.ENOENT
    device.close()


def test_a_destroyed_queue_frees_its_slot_in_a_full_table(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        devices = [session.open(0) for _ in range(queues.QUEUE_SLOTS // 2 + 1)]
        held = [device.create_queue() for device in devices[:-1] for _ in range(2)]
        with pytest.raises(libnpu.NpuError) as full:
            devices[-1].create_queue()
        assert full.value.errno == errno.ENOSPC
        slot = held[5].id
        held[5].close()
        queue = devices[-1].create_queue()               # at once: the reply came when the slot was free
        assert queue.id == slot
        assert devices[-1].queue_submit(queue, None).wait(10).status == 0


def _files_held(pids: list[int]) -> list[str]:
    """What the driver and the chip hold open, as sorted "role: target" lines, hand-over
    connections aside (the driver closes an idle one after 10 s: not the queues' business).
    The targets, not a count: a failure then names what was left open."""
    held = []
    for role, pid in enumerate(pids):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:        # gone since it was listed: it holds nothing
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not target.startswith("socket:"):
                # the role (0 = driver, then the chip's processes in /proc order), not the
                # pid: a core the watchdog restarted is another pid in the same role
                held.append(f"{role}: {target}")
    return sorted(held)


def test_queues_destroyed_in_a_loop_leave_no_descriptor_line_or_memory_behind(steady_npu):
    from tests.kmd_fuse.test_user_queues import _driver_and_chip
    with libnpu.initialize(steady_npu.devroot) as session:
        device = session.open(0)
        commands = nop(device)
        bus = paths.bus_dir(steady_npu.devroot, 0)
        with device.create_queue() as one, device.create_queue() as two:
            # On each core what is made once is made (the command buffer's and its profile
            # queue's mappings): any core may run a queue's job (shared service), the second one
            # when two queues' jobs wait at once.
            ran_on: set[int] = set()
            deadline = time.monotonic() + WAIT_S
            while ran_on != set(range(device.info()["num_cores"])) and time.monotonic() < deadline:
                for warm in (one, two):
                    write_entry(warm, warm.tail + 1, commands.address, commands.used, flags=queues.ENTRY_PROFILE)
                for warm in (one, two):
                    warm.ring()
                    QueueFence(warm, warm.tail).wait(10)
                    ran_on.add(completion_core(warm, warm.tail))

        def settled() -> tuple:
            # the processes asked for each time: a core the chip's watchdog restarted under
            # load is another process (seen once in a full run beside a CPU hog)
            return len(_files_held(_driver_and_chip(steady_npu.devroot, bus))), sorted(os.listdir(bus)), \
                device.info()["memory_used"], \
                sum(slot_enabled(steady_npu.devroot, slot) for slot in range(queues.QUEUE_SLOTS))

        baseline, held_before = settled(), _files_held(_driver_and_chip(steady_npu.devroot, bus))
        for round_ in range(40):
            with device.create_queue() as queue:
                fence = device.queue_submit(queue, commands, profile=bool(round_ % 2))
                fence.wait(10)
                if round_ % 2:
                    assert len(device.get_profile(fence).tasks) == 1
        assert not device.queues
        assert wait_until(lambda: settled() == baseline), (
            settled(), baseline, "opened since:",
            sorted(set(_files_held(_driver_and_chip(steady_npu.devroot, bus))) - set(held_before)))
