"""User-mode submission queues (issue 15, item 3): QUEUE_CREATE, jobs that go client ->
core -> client on a real mount, and what a hostile client can do to them: every failure
stays in its own queue, the driver keeps teardown, memory, reset, stats and limits."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths, uapi
from libnpu.portability import JobError
from libnpu.tools.profile import trace_file
from libnpu.user_queue import QueueFence
from npu_hw import queues, regs
from tests.support.device import REPO, WAIT_S, core_registers, open_to_others, wait_for, wait_until
from tests.support.other_user import python_for_others

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

NOBODY = 65534
MIB = 1 << 20


# ---- helpers ----

def nop(device):
    commands = device.command_buffer()
    commands.add("NOP")
    return commands


def dma_copy(device, src: int, dst: int, length: int):
    commands = device.command_buffer()
    commands.add("DMA_COPY", src=src, dst=dst, length=length)
    return commands


def slow_job(device, src, dst, copies: int):
    """A command buffer of ``copies`` whole-buffer DMA copies (tens of ms on these VMs)."""
    commands = device.command_buffer(capacity=64 * copies + 64)
    for _ in range(copies):
        commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    return commands


def raw_queue_create(device, entries: int = 0, priority: int = 1, flags: int = 0):
    req = uapi.new_payload(uapi.NPU_CMD_QUEUE_CREATE)
    req.entries, req.priority, req.flags = entries, priority, flags
    return device.file.request(uapi.NPU_CMD_QUEUE_CREATE, req)


def write_entry(queue, seq: int, cmd_iova: int = 0, cmd_size: int = 0, timeout_ms: int = 0, flags: int = 0,
                written_seq: int | None = None) -> None:
    """Put an entry in the queue memory by hand (as any client may), tail included."""
    at = queues.entries_offset() + (seq & (queue.entries - 1)) * queues.ENTRY_STRUCT.size
    queues.ENTRY_STRUCT.pack_into(queue.mem, at, seq if written_seq is None else written_seq, cmd_iova, cmd_size,
                                  timeout_ms, flags, 0)
    queue.header.write64(queues.HDR_TAIL, seq)
    queue.tail = seq


def used_memory(session) -> int:
    with session.open(0) as probe:
        return probe.info()["memory_used"]


# ---- the job path ----

def test_jobs_run_through_a_user_queue_in_order_and_are_counted(device):
    queue = device.create_queue()
    assert queue.entries == uapi.NPU_QUEUE_DEFAULT_ENTRIES and queue.core in range(device.info()["num_cores"])
    src, dst = device.alloc_mem(65536), device.alloc_mem(65536)
    pattern = np.random.default_rng(1).integers(0, 256, 65536, dtype=np.uint8)
    src.view[:] = pattern
    device.queue_submit(queue, dma_copy(device, src.address, dst.address, 65536)).wait(10)
    assert np.array_equal(dst.view, pattern)
    before = device.stats()
    # More jobs than entries without waiting: submit waits for room, every fence signals.
    fences = [device.queue_submit(queue, nop(device)) for _ in range(3 * queue.entries)]
    assert [f.id for f in fences] == list(range(2, 2 + 3 * queue.entries))
    for fence in fences:
        fence.wait(10)
        assert fence.status == 0
    after = device.stats()
    assert after["jobs_completed"] - before["jobs_completed"] == 3 * queue.entries
    assert after["jobs_submitted"] - before["jobs_submitted"] == 3 * queue.entries
    assert after["busy_time_ns"] > before["busy_time_ns"]


def test_a_queue_and_the_ioctl_path_serve_one_context_together(device):
    queue = device.create_queue(priority=libnpu.portability.PRIO_HIGH)
    mem = device.alloc_mem(4096)
    for _ in range(20):
        device.run(nop(device))
        device.queue_submit(queue, nop(device)).wait(10)
    device.queue_submit(queue, None).wait(10)          # an empty job
    assert mem.view.size == 4096


def test_the_device_trace_records_user_queue_jobs(npu, device):
    queue = device.create_queue()
    commands = device.command_buffer()
    for _ in range(3):
        commands.add("NOP")
    path = trace_file(npu.devroot)
    path.write_text("1\n")
    try:
        fences = [device.queue_submit(queue, commands) for _ in range(5)]
        fences[-1].wait(10)
        context = device.info()["context_id"]

        def traced() -> list[dict]:
            events = [json.loads(line) for line in path.read_text().splitlines()[1:]]
            return [e for e in events if e["type"] == "job" and e["context"] == context]
        assert wait_until(lambda: len(traced()) == 5)      # drained by the housekeeping poll
        jobs = traced()
        assert [e["fence"] for e in jobs] == [f.id for f in fences]
        assert all(e["tasks"] == 3 and e["status"] == 0 and e["core"] == queue.core for e in jobs)
    finally:
        path.write_text("0\n")


# ---- hostile entries: each fails in its own queue only ----

def test_an_unmapped_address_faults_only_that_job(session, device):
    queue = device.create_queue()
    dst = device.alloc_mem(4096)
    with pytest.raises(JobError) as failure:
        device.queue_submit(queue, dma_copy(device, 0x10, dst.address, 16)).wait(10)
    assert failure.value.errno == errno.EFAULT
    with session.open(0) as other:                       # another client, both paths
        other.run(nop(other))
        other_queue = other.create_queue()
        other.queue_submit(other_queue, nop(other)).wait(10)
    device.queue_submit(queue, nop(device)).wait(10)   # the queue goes on


def test_an_entry_cannot_reach_another_contexts_memory(session, device):
    queue = device.create_queue()
    mine = device.alloc_mem(4096)
    with session.open(0) as victim:
        # The victim's third buffer sits at an address that is nothing in our context.
        held = [victim.alloc_mem(1 << 20) for _ in range(3)]
        held[2].view[:] = 42
        target = held[2].address + 4096
        assert not any(m.address <= target < m.address + m.size for m in device.buffers.values())
        for commands in (dma_copy(device, target, mine.address, 64), dma_copy(device, mine.address, target, 64)):
            with pytest.raises(JobError) as failure:
                device.queue_submit(queue, commands).wait(10)
            assert failure.value.errno == errno.EFAULT
        assert (held[2].view == 42).all() and not mine.view.any()
        victim.run(nop(victim))


def test_a_garbage_tail_stops_only_that_queue(session, device):
    for bad_tail in (1 << 60, 2 ** 64 - 1):
        with session.open(0) as client:
            queue = client.create_queue()
            client.queue_submit(queue, nop(client)).wait(10)
            queue.header.write64(queues.HDR_TAIL, bad_tail)
            queue.ring()
            assert wait_until(lambda q=queue: q.error() == -errno.EINVAL)
            with pytest.raises(libnpu.NpuError) as stopped:
                client.queue_submit(queue, nop(client))
            assert stopped.value.errno == errno.EINVAL
            second = client.create_queue()                 # the context's other queue still works
            client.queue_submit(second, nop(client)).wait(10)
    healthy = device.create_queue()
    device.queue_submit(healthy, nop(device)).wait(10)


def test_a_stale_entry_or_unknown_flags_fail_that_job_with_einval(device):
    queue = device.create_queue()
    commands = nop(device)
    for seq, kwargs in ((1, {"written_seq": 77}), (2, {"flags": 0x80})):
        write_entry(queue, seq, commands.address, commands.used, **kwargs)
        queue.ring()
        fence = QueueFence(queue, seq)
        with pytest.raises(JobError) as failure:
            fence.wait(10)
        assert failure.value.errno == errno.EINVAL
    device.queue_submit(queue, nop(device)).wait(10)


def test_command_sizes_past_the_mapping_unaligned_or_huge_fail_only_that_job(device):
    queue = device.create_queue()
    commands, buffer = nop(device), device.alloc_mem(1 * MIB)
    hostile = [(commands.address, 7, errno.EINVAL), (commands.address, commands.used + 3, errno.EINVAL),
               (commands.address, 0xFFFFFFF8, errno.EFAULT), (buffer.address, 1 * MIB + 4096, errno.EFAULT)]
    for seq, (address, size, expected) in enumerate(hostile, 1):
        write_entry(queue, seq, address, size)
        queue.ring()
        with pytest.raises(JobError) as failed:
            QueueFence(queue, seq).wait(10)
        assert failed.value.errno == expected, (address, size)
    device.queue_submit(queue, commands).wait(10)


def test_header_fields_the_chip_owns_are_never_trusted(device):
    """A client that forges done, polling and error in its header fools only itself: the
    core reads none of them (it keeps its own count of what it completed) and runs on."""
    queue = device.create_queue()
    commands = nop(device)
    device.queue_submit(queue, commands).wait(10)
    queue.header.write64(queues.HDR_DONE, 1_000_000)
    queue.header.set_error(-errno.EIO)
    queue.header.write32(queues.HDR_POLLING, 1)
    write_entry(queue, 2, commands.address, commands.used)
    queue.ring()
    assert wait_until(lambda: queue.header.read64(queues.HDR_DONE) == 2)
    at = queues.completions_offset(queue.entries) + (2 & (queue.entries - 1)) * queues.COMPLETION_STRUCT.size
    assert queues.COMPLETION_STRUCT.unpack_from(queue.mem, at)[:2] == (2, 0)


def test_a_client_that_never_rings_still_gets_its_job_done(device):
    queue = device.create_queue()
    commands = nop(device)
    device.queue_submit(queue, commands).wait(WAIT_S)     # the core served the queue, then polled it
    wait_for(lambda: not queue.header.read32(queues.HDR_POLLING), "the serving core asleep (no longer polling)")
    write_entry(queue, 2, commands.address, commands.used)
    QueueFence(queue, 2).wait(WAIT_S)                     # found by the core's safety-net look, unrung


def test_no_wake_up_is_lost_at_the_edge_of_sleep(device, monkeypatch):
    """Jobs submitted while the core is going to sleep, waited on without spinning: every
    one is signalled (the safety-net timeout never finds a job done), whichever side
    publishes last."""
    from libnpu import user_queue
    monkeypatch.setattr(user_queue, "SPIN_S", 0.0)
    monkeypatch.setattr(user_queue, "_SPIN", user_queue.SpinWindow())
    queue = device.create_queue()
    commands = nop(device)
    for i in range(300):
        time.sleep((i % 30) * 20e-6)                     # not a wait: 0-600 us, across the core's idle poll and sleep
        device.queue_submit(queue, commands).wait(10)
    assert queue.late_wakeups == 0


def test_a_million_doorbells_do_not_hold_up_other_clients(session, device):
    queue = device.create_queue()
    stop = threading.Event()
    rung = []

    def ring() -> None:
        count = 0
        while count < 1_000_000 and not stop.is_set():
            queue.ring()                                 # a full pipe is not an error
            count += 1
        rung.append(count)

    ringer = threading.Thread(target=ring)
    ringer.start()
    try:
        with session.open(0) as other:
            other_queue = other.create_queue()
            for _ in range(100):
                other.queue_submit(other_queue, nop(other)).wait(10)
                other.run(nop(other))
    finally:
        stop.set()
        ringer.join()
    assert rung[0] > 0
    device.queue_submit(queue, nop(device)).wait(10)


def test_lines_made_blocking_and_filled_by_their_client_never_stall_the_chip(session, device):
    queue = device.create_queue()
    with pytest.raises(BlockingIOError):
        while True:                                      # fill the doorbell pipe
            os.write(queue.doorbell_fd, b"x" * 4096)
    for fd in (queue.doorbell_fd, queue.completion_fd):  # and make both ends blocking
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    queue.header.write32(queues.HDR_WAITING, 1)          # a completion signal for every job, never read
    commands = nop(device)
    for seq in range(1, 301):
        write_entry(queue, seq, commands.address, commands.used)
        os.write(queue.doorbell_fd, b"x")                # blocking now; the core drained the pipe when it woke
        QueueFence(queue, seq).wait(10)
    with session.open(0) as other:                       # the core and the driver serve everyone on
        other_queue = other.create_queue()
        for _ in range(20):
            other.queue_submit(other_queue, nop(other)).wait(10)
            other.run(nop(other))


def test_a_former_holder_of_a_slot_cannot_reach_its_next_queues_lines(fresh_npu):
    """A client that kept the doorbell and completion ends of a queue it had cannot ring
    or steal the wake-ups of the next queue in that slot: every queue has lines of its own."""
    with libnpu.initialize(fresh_npu.devroot) as session:
        former = session.open(0)
        old = former.create_queue()
        kept = [os.dup(old.doorbell_fd), os.dup(old.completion_fd)]
        try:
            former.close()
            bus = paths.bus_dir(fresh_npu.devroot, 0)
            assert wait_until(lambda: not [name for name in os.listdir(bus) if name.endswith((".db", ".cq"))])
            try:
                while os.read(kept[1], 64):              # the close's own wake-up, then the end
                    pass
            except BlockingIOError:                      # (a line still written to: the test fails below)
                pass
            with session.open(0) as holder:
                queue = holder.create_queue()
                assert queue.id == old.id                # the same slot
                with pytest.raises(BrokenPipeError):     # the old doorbell reaches no core
                    os.write(kept[0], b"\x01")
                queue.header.write32(queues.HDR_WAITING, 1)   # every completion signals the line
                commands = nop(holder)
                for seq in range(1, 21):                 # no waiter of ours drains the line
                    write_entry(queue, seq, commands.address, commands.used)
                    queue.ring()
                    assert wait_until(lambda: queue.done() >= seq)
                assert os.read(kept[1], 64) == b""       # the old line: no writer, no wake-up in it
                assert os.read(queue.completion_fd, 64)  # they all went to the holder's own line
        finally:
            for fd in kept:
                os.close(fd)


def test_a_job_past_its_timeout_fails_in_its_own_queue(session, device):
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    commands = slow_job(device, src, dst, 400)
    with pytest.raises(JobError) as failure:
        device.queue_submit(queue, commands, timeout_ms=30).wait(30)
    assert failure.value.errno == errno.ETIMEDOUT
    device.queue_submit(queue, nop(device)).wait(10)   # the restarted core serves the queue on
    with session.open(0) as other:
        other.run(nop(other))


def test_mem_free_of_a_buffer_a_queued_job_uses_is_safe(session, device):
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    src.view[:] = 5
    commands, late = slow_job(device, src, dst, 100), dma_copy(device, src.address, dst.address, 4096)
    with_src = used_memory(session)
    fence = device.queue_submit(queue, commands)
    device.free_mem(src)                                 # while the job runs (or waits)
    try:
        fence.wait(30)
    except JobError as failure:                          # it ran into the unmapped pages
        assert failure.errno == errno.EFAULT
    with pytest.raises(JobError) as failure:             # later entries never reach the pages
        device.queue_submit(queue, late).wait(10)
    assert failure.value.errno == errno.EFAULT
    assert wait_until(lambda: used_memory(session) == with_src - 16 * MIB)


def test_another_uid_cannot_take_a_queues_descriptors(npu, device):
    reply = raw_queue_create(device)
    socket_path = uapi.c_string(reply.socket_path)
    tokens = [reply.memory_token, reply.doorbell_token, reply.completion_token]
    open_to_others(npu.devroot)
    script = textwrap.dedent("""
        import socket, sys, array
        from kmd_fuse import uapi
        for token in map(int, sys.argv[2:]):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.connect(sys.argv[1])
            sock.send(uapi.pack_handover_request(token))
            reply, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
            print(uapi.unpack_handover_reply(reply)[0], len(ancillary))
        """)
    # a member of the node's group (anyone else is refused at connect: test_handover_admission.py)
    python, env = python_for_others()
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", f"--groups={os.stat(npu.node).st_gid}",
                           python, "-c", script, socket_path, *map(str, tokens)],
                          capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [f"{-errno.EPERM} 0"] * 3
    fds = [device.buffer_socket.receive(socket_path, token)[0] for token in tokens]   # still its owner's
    try:
        assert os.fstat(fds[0]).st_size == reply.size
    finally:
        for fd in fds:
            os.close(fd)


def test_bad_queue_create_requests_are_einval(device):
    for kwargs in ({"entries": 3}, {"entries": 1}, {"entries": 4096}, {"priority": 9}, {"flags": 1}):
        with pytest.raises(libnpu.NpuError) as refused:
            raw_queue_create(device, **kwargs)
        assert refused.value.errno == errno.EINVAL


# ---- the driver keeps limits, teardown and reset ----

def test_queue_limits_per_context_per_user_and_per_chip(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        devices = [session.open(0) for _ in range(queues.QUEUE_SLOTS // 2 + 1)]
        first = devices[0]
        assert first.param("MAX_QUEUES_PER_CONTEXT") == 2 and first.param("QUEUE_SLOTS") == queues.QUEUE_SLOTS
        first.create_queue(), first.create_queue()
        with pytest.raises(libnpu.NpuError) as refused:
            first.create_queue()
        assert refused.value.errno == errno.EMFILE
        for device in devices[1:-1]:
            device.create_queue(), device.create_queue()
        with pytest.raises(libnpu.NpuError) as full:
            devices[-1].create_queue()
        assert full.value.errno == errno.ENOSPC
        devices[1].close()                               # its slots come back once the cores let go
        assert wait_until(lambda: _created(devices[-1]))
        devices[-1].queue_submit(devices[-1].queues[0], nop(devices[-1])).wait(10)
    open_to_others(fresh_npu.devroot)
    script = textwrap.dedent("""
        import errno, sys
        import libnpu
        with libnpu.initialize(sys.argv[1]) as session:
            made = 0
            try:
                for _ in range(3):
                    device = session.open(0)
                    device.create_queue(); made += 1
                    device.create_queue(); made += 1
            except libnpu.NpuError as exc:
                print(made, errno.errorcode[exc.errno])
        """)
    python, env = python_for_others()
    done = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           f"--groups={os.stat(fresh_npu.node).st_gid}", python, "-c", script,
                           str(fresh_npu.devroot)], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert done.stdout.strip() == "4 EMFILE", done.stderr


def _created(device) -> bool:
    try:
        device.create_queue()
    except libnpu.NpuError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return False
    return True


def test_a_client_killed_mid_job_leaves_nothing_behind(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        probe = session.open(0)          # one context for the checks: its page table is in the baseline
        baseline = probe.info()["memory_used"]
        bus = paths.bus_dir(fresh_npu.devroot, 0)
        links = set(os.listdir(bus))
        client = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import sys, libnpu
            with libnpu.initialize(sys.argv[1]) as session:
                device = session.open(0)
                queue = device.create_queue()
                src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
                commands = device.command_buffer(capacity=64 * 2000)
                for _ in range(2000):
                    commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
                device.queue_submit(queue, commands)
                print("submitted", flush=True)
                device.queue_submit(queue, commands).wait()
            """), str(fresh_npu.devroot)], stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        try:
            assert client.stdout.readline().strip() == "submitted"
            wait_for(lambda: any(core_registers(fresh_npu.devroot, regs.UQ_SLOT)), "the client's job on a core")
        finally:
            client.send_signal(signal.SIGKILL)
            client.wait()
        assert wait_until(lambda: probe.info()["memory_used"] == baseline and set(os.listdir(bus)) == links), \
            (probe.info()["memory_used"], baseline, set(os.listdir(bus)) ^ links)
        with session.open(0) as device:                  # the daemon and the chip serve on
            queue = device.create_queue()
            device.queue_submit(queue, nop(device)).wait(10)
            device.run(nop(device))


def _open_fds(pids: list[int]) -> int:
    count = 0
    for pid in pids:
        try:
            count += len(os.listdir(f"/proc/{pid}/fd"))
        except FileNotFoundError:
            pass
    return count


def _driver_and_chip(devroot, bus) -> list[int]:
    """The driver's pid and those of the chip serving ``bus`` (its main process and cores)."""
    pids = [int(paths.pid_file(devroot, 0).read_text())]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"firmware_sim" in cmdline and str(bus).encode() in cmdline:
            pids.append(int(pid))
    return pids


def test_queues_churned_leave_no_descriptor_slot_memory_or_line_behind(steady_npu):
    with libnpu.initialize(steady_npu.devroot) as session:
        probe = session.open(0)
        bus = paths.bus_dir(steady_npu.devroot, 0)
        with session.open(0) as warm:                    # first queue: whatever is made once is made
            warm.queue_submit(warm.create_queue(), nop(warm)).wait(10)
        assert len(_driver_and_chip(steady_npu.devroot, bus)) >= 3

        def settled() -> tuple:
            table = np.fromfile(paths.bus_dir(steady_npu.devroot, 0) / "qtab", np.uint32)
            enabled = [table[(slot * queues.QTAB_SLOT_SIZE + queues.Q_CONTROL) // 4] for slot in
                       range(queues.QUEUE_SLOTS)]
            # the processes asked for each time, as test_queue_destroy's churn test does: a core the
            # chip's watchdog restarted under load is another process (seen once in a full run at
            # load 4-8: 22 descriptors fewer, a core's pid gone)
            return (_open_fds(_driver_and_chip(steady_npu.devroot, bus)), sorted(os.listdir(bus)),
                    probe.info()["memory_used"], sum(enabled))

        def idle() -> bool:    # the warm context's queue, lines and buffers given back (a close is asynchronous)
            state = settled()
            return state[3] == 0 and not any(name.startswith("bo") or name.endswith((".db", ".cq"))
                                             for name in state[1])

        assert wait_until(idle)
        baseline = settled()
        for _ in range(40):
            with session.open(0) as device:
                for queue in (device.create_queue(), device.create_queue()):
                    device.queue_submit(queue, nop(device)).wait(10)
        assert wait_until(lambda: settled() == baseline), (settled(), baseline)


def test_a_reset_stops_live_queues_with_a_clear_error(fresh_npu):
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        commands = nop(device)
        baseline = device.info()["memory_used"]
        queue = device.create_queue()
        device.queue_submit(queue, commands).wait(10)
        device.reset()
        with pytest.raises(libnpu.NpuError) as stopped:
            device.queue_submit(queue, commands).wait(10)
        assert stopped.value.errno == errno.ECANCELED and "reset" in str(stopped.value)
        assert wait_until(lambda: device.info()["memory_used"] == baseline)
        fresh = device.create_queue()                    # a new queue works at once
        device.queue_submit(fresh, commands).wait(10)
        device.run(commands)


def test_a_context_at_its_queue_limit_makes_new_queues_right_after_a_reset(fresh_npu):
    """The queues a reset stopped no longer count against the context's limit once the
    reset is answered: before, they did until the new cores acknowledged their disabled
    slots, and QUEUE_CREATE failed EMFILE (jobs went to SUBMIT) for that while."""
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
        busy = [device.create_queue(), device.create_queue()]       # the context's limit
        for queue in busy:                               # a core in a job acknowledges no disable
            device.queue_submit(queue, slow_job(device, src, dst, 400))
        device.reset()
        fresh = [device.create_queue(), device.create_queue()]
        for queue in fresh:
            device.queue_submit(queue, nop(device)).wait(60)


def test_a_waiter_learns_that_the_driver_stopped(fresh_npu):
    session = libnpu.initialize(fresh_npu.devroot)
    device = session.open(0)
    queue = device.create_queue()
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    fence = device.queue_submit(queue, slow_job(device, src, dst, 2000))
    stopping = threading.Thread(target=fresh_npu.kmd, args=("stop",), kwargs={"check": False})
    stopping.start()
    try:
        with pytest.raises(libnpu.NpuError) as gone:
            fence.wait(60)
        assert gone.value.errno in (errno.ENODEV, errno.ECANCELED)
    finally:
        stopping.join()
        try:
            session.destroy()
        except OSError:                                  # the node is gone with its driver
            pass
