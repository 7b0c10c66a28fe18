"""MEM_FREE in a context with a live user queue: the reply waits until the buffer is given
back (kmd_fuse/user_queues.py, DeferredFree), and every other reply of the file keeps
reaching the request that asked meanwhile (the "MEM_FREE got a 304-byte reply" report).
Then the deferred path as a hostile local user attacks it: a buffer freed twice, freed
under a running job, a file closed or a process killed with frees pending, a reset with
frees pending. The daemon serves everyone else throughout and nothing leaks: device
memory, buffer objects and IOMMU mappings come back to where they were."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths, uapi
from libnpu import NpuError
from libnpu.portability import JobError
from npu_hw import iommu, regs
from tests.support.device import REPO, set_fault_injection, start_npu, stop_npu, wait_until

pytestmark = pytest.mark.recovery     # reset, queues, recovery (benchmarks/flake_hunt.py -m recovery)

MIB = 1 << 20
PAGE = 4096


# ---- what the driver holds, seen from outside ----

def census(devroot: Path) -> tuple[int, int, int]:
    """(device memory used, buffer objects, IOMMU pages mapped) of the whole device."""
    bus = paths.bus_dir(devroot, 0)
    names = os.listdir(bus)
    objects = sum(1 for name in names if name.startswith("bo") and name[2:].isdigit())
    mapped = 0
    for name in names:
        if name.startswith("pt") and name[2:].isdigit():
            try:
                mapped += int(np.count_nonzero(np.fromfile(bus / name, dtype=iommu.PTE_DTYPE)))
            except FileNotFoundError:
                pass     # its context went away meanwhile
    fd = os.open(devroot / "npu0", os.O_RDWR)
    try:
        os.pwrite(fd, uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO)), 0)
        info = uapi.unpack_payload(uapi.NPU_CMD_GET_INFO, read_by_seq(fd, 1), uapi.HDR_SIZE)
    finally:
        os.close(fd)
    return info.memory_used, objects, mapped


def settled_to(devroot: Path, baseline: tuple[int, int, int]) -> bool:
    return wait_until(lambda: census(devroot) == baseline)


# ---- raw frames ----

def read_by_seq(fd: int, seq: int) -> bytes:
    while True:
        try:
            return os.pread(fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + seq)
        except BlockingIOError:
            pass


def send_free(fd: int, seq: int, handle: int) -> None:
    req = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
    req.handle = handle
    os.pwrite(fd, uapi.pack_frame(uapi.NPU_CMD_MEM_FREE, seq, req), 0)


def free_reply(fd: int, seq: int) -> tuple[int, int]:
    """(result, handle echoed) of a MEM_FREE's reply, its header checked against the request."""
    frame = read_by_seq(fd, seq)
    magic, cmd, got, size, result, _ = uapi.header_fields(frame)
    assert (magic, cmd, got) == (uapi.NPU_FRAME_MAGIC, uapi.NPU_CMD_MEM_FREE, seq)
    assert size == len(frame) - uapi.HDR_SIZE and size in (0, uapi.COMMANDS[uapi.NPU_CMD_MEM_FREE].payload_size)
    return result, (uapi.unpack_payload(uapi.NPU_CMD_MEM_FREE, frame, uapi.HDR_SIZE).handle if size else 0)


RAW_SEQ = 1 << 30      # raw frames written on a libnpu device's file: far from libnpu's own seqs


# ---- every reply reaches its request while frees are deferred ----

CLIENT = textwrap.dedent("""
    import json, os, sys, threading
    import libnpu
    from kmd_fuse import uapi

    def churn(device, rounds, tag, errors):
        '''Allocate, map, fill, check, query and free buffers; every reply checked.'''
        context_id = device.info()["context_id"]
        try:
            for round_ in range(rounds):
                sizes = [4096 * (1 + (round_ + i) % 5) + 17 * i for i in range(6)]
                held = [device.alloc_mem(size) for size in sizes]
                for i, (size, memory) in enumerate(zip(sizes, held)):
                    assert memory.size == -(-size // 4096) * 4096, (size, memory.size)
                    memory.view[:] = (tag * 31 + round_ * 7 + i) % 251
                    fd, handed = device.buffer_fd(memory.handle)            # MEM_MAP + hand-over again
                    try:
                        assert handed == memory.size
                        with open(fd, "rb", closefd=False) as again:
                            assert again.read(64) == bytes([(tag * 31 + round_ * 7 + i) % 251]) * 64
                    finally:
                        os.close(fd)
                info, stats = device.info(), device.stats()
                assert info["context_id"] == context_id and stats["context_id"] == context_id
                assert stats["buffers"] >= len(held)
                for memory in held:
                    req = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
                    req.handle = memory.handle
                    assert device.file.request(uapi.NPU_CMD_MEM_FREE, req).handle == memory.handle
                    memory.freed = True
                    device.buffers.pop(memory.handle, None)
                    memory._unmap()
        except Exception as exc:
            errors.append(f"{tag}: {exc!r}")

    def queue_jobs(device, queue, rounds, errors):
        '''DMA copies through the user queue (so frees of this context are deferred).'''
        try:
            src, dst = device.alloc_mem(65536), device.alloc_mem(65536)
            commands = device.command_buffer()
            commands.add("DMA_COPY", src=src.address, dst=dst.address, length=65536)
            for round_ in range(rounds):
                src.view[:] = round_ % 251
                device.queue_submit(queue, commands).wait(30)
                assert dst.view[0] == dst.view[-1] == round_ % 251
            for memory in (src, dst, commands.memory):
                device.free_mem(memory)
        except Exception as exc:
            errors.append(f"queue: {exc!r}")

    def main(devroot, rounds):
        errors = []
        with libnpu.initialize(devroot) as session:
            shared, other = session.open(0), session.open(0)
            queue = shared.create_queue()
            threads = [threading.Thread(target=churn, args=(shared, rounds, tag, errors)) for tag in range(3)]
            threads.append(threading.Thread(target=churn, args=(other, rounds, 3, errors)))
            threads.append(threading.Thread(target=queue_jobs, args=(shared, queue, rounds * 4, errors)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            left = [shared.stats()["buffers"], other.stats()["buffers"]]
        print(json.dumps({"errors": errors, "left": left}), flush=True)

    main(sys.argv[1], int(sys.argv[2]))
""")


def test_every_reply_reaches_its_request_while_frees_are_deferred(fresh_npu):
    """Threads of one Device (with a live user queue: its MEM_FREEs are deferred) and of a
    second Device of the same process allocate, map, fill, query and free buffers while a
    queue runs jobs; a second process does the same. Every reply's kind, seq, size and
    contents are checked (the transport checks kind, seq and size; the threads the rest)."""
    baseline = census(fresh_npu.devroot)
    rounds = 12
    other = subprocess.Popen([sys.executable, "-c", CLIENT, str(fresh_npu.devroot), str(rounds)],
                             stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        here = subprocess.run([sys.executable, "-c", CLIENT, str(fresh_npu.devroot), str(rounds)],
                              capture_output=True, text=True, cwd=str(REPO), timeout=300)
        out, _ = other.communicate(timeout=300)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    for result in (json.loads(here.stdout), json.loads(out)):
        assert result == {"errors": [], "left": [0, 0]}
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


# ---- the deferred path under attack ----

@pytest.fixture
def queued(fresh_npu):
    """(session, device with a live user queue, census baseline before it)."""
    baseline = census(fresh_npu.devroot)
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        device.create_queue()
        yield session, device, baseline


def test_a_buffer_freed_twice_while_its_first_free_is_deferred(fresh_npu, queued):
    session, device, baseline = queued
    memory = device.alloc_mem(3 * PAGE)
    fd = device.file.fd
    send_free(fd, RAW_SEQ, memory.handle)          # deferred: the queue's core must drop its view
    send_free(fd, RAW_SEQ + 1, memory.handle)      # the handle is gone at once
    assert free_reply(fd, RAW_SEQ + 1) == (-errno.ENOENT, 0)
    assert free_reply(fd, RAW_SEQ) == (0, memory.handle)
    send_free(fd, RAW_SEQ + 2, memory.handle)
    assert free_reply(fd, RAW_SEQ + 2) == (-errno.ENOENT, 0)
    assert device.stats()["buffers"] == 0
    device.buffers.pop(memory.handle)
    memory._unmap()
    device.close()
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


def test_a_buffer_freed_under_a_running_queue_job(fresh_npu, queued):
    """The free's reply comes once the job can no longer reach the pages; the job either
    finished before the unmap or faults (EFAULT), and the memory comes back."""
    session, device, baseline = queued
    queue = device.queues[0]
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    src.view[:] = 9
    commands = device.command_buffer(capacity=64 * 100)
    for _ in range(100):
        commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    fence = device.queue_submit(queue, commands)
    send_free(device.file.fd, RAW_SEQ, src.handle)
    assert free_reply(device.file.fd, RAW_SEQ) == (0, src.handle)
    try:
        fence.wait(60)
    except JobError as failure:
        assert failure.errno == errno.EFAULT
    device.buffers.pop(src.handle)
    src._unmap()
    assert device.stats()["buffers"] == 2                        # dst and the command buffer
    device.close()
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


def test_a_file_closed_with_frees_pending_leaves_nothing(fresh_npu, queued):
    session, device, baseline = queued
    held = [device.alloc_mem(PAGE * (1 + i % 3)) for i in range(32)]
    for i, memory in enumerate(held):
        send_free(device.file.fd, RAW_SEQ + i, memory.handle)    # replies never read
    for memory in held:
        memory._unmap()
    device.buffers.clear()
    session.close(device)
    with session.open(0) as bystander:
        memory = bystander.alloc_mem(PAGE)
        memory.view[:] = 3
        bystander.free_mem(memory)
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


KILLED = textwrap.dedent("""
    import os, sys, time
    import libnpu
    from kmd_fuse import uapi
    with libnpu.initialize(sys.argv[1]) as session:
        device = session.open(0)
        device.create_queue()
        held = [device.alloc_mem(4096 * (1 + i % 4)) for i in range(64)]
        for i, memory in enumerate(held):
            req = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
            req.handle = memory.handle
            os.pwrite(device.file.fd, uapi.pack_frame(uapi.NPU_CMD_MEM_FREE, (1 << 30) + i, req), 0)
        print("freeing", flush=True)
        time.sleep(60)     # not a wait of the test: the client idles until it is killed
""")


def test_a_process_killed_mid_free_leaves_nothing(fresh_npu):
    baseline = census(fresh_npu.devroot)
    client = subprocess.Popen([sys.executable, "-c", KILLED, str(fresh_npu.devroot)], stdout=subprocess.PIPE,
                              text=True, cwd=str(REPO))
    try:
        assert client.stdout.readline().strip() == "freeing"
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
        client.stdout.close()
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)
    with libnpu.initialize(fresh_npu.devroot) as session, session.open(0) as device:
        queue = device.create_queue()
        commands = device.command_buffer()
        commands.add("NOP")
        device.queue_submit(queue, commands).wait(10)


def test_a_reset_with_frees_pending_answers_each_of_them(fresh_npu, queued):
    """Frees deferred when a reset comes are answered (the restarted cores hold no view) and
    the memory comes back; the device serves on."""
    session, device, baseline = queued
    held = [device.alloc_mem(PAGE * (1 + i % 3)) for i in range(32)]
    fd = device.file.fd
    for i, memory in enumerate(held):
        send_free(fd, RAW_SEQ + i, memory.handle)
    with session.open(0) as admin:
        admin.reset()
    assert [free_reply(fd, RAW_SEQ + i) for i in range(32)] == [(0, memory.handle) for memory in held]
    for memory in held:
        memory._unmap()
    device.buffers.clear()
    assert device.stats()["buffers"] == 0
    with pytest.raises(NpuError):                                  # the reset stopped the queue
        device.queue_submit(device.queues[0], None).wait(10)
    nop = device.command_buffer()
    nop.add("NOP")
    device.run(nop)                                               # the ioctl path serves on
    session.close(device)
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


@pytest.fixture
def hanging_npu(tmp_path):
    """A device whose watchdog ends a hung job after 300 ms (the chip restarts its core)."""
    mounted = start_npu(tmp_path, extra=("--watchdog-ms", "300"))
    yield mounted
    stop_npu(mounted)


def test_frees_deferred_behind_a_hung_core_are_answered_once_it_restarts(hanging_npu):
    """A user-queue job hangs its core (another user's, say): the frees of the queue's context
    wait for that core's invalidation; the watchdog restarts the core, the frees are answered
    and the memory comes back."""
    baseline = census(hanging_npu.devroot)
    with libnpu.initialize(hanging_npu.devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        held = [device.alloc_mem(PAGE * (1 + i % 3)) for i in range(8)]
        nop = device.command_buffer()
        nop.add("NOP")
        set_fault_injection(hanging_npu.devroot, regs.FAULT_HANG)
        try:
            hung = device.queue_submit(queue, nop)
            for i, memory in enumerate(held):
                send_free(device.file.fd, RAW_SEQ + i, memory.handle)
            assert [free_reply(device.file.fd, RAW_SEQ + i) for i in range(8)] == \
                [(0, memory.handle) for memory in held]
        finally:
            set_fault_injection(hanging_npu.devroot, 0)
        with pytest.raises((JobError, NpuError)):
            hung.wait(30)
        for memory in held:
            memory._unmap()
        device.buffers.clear()
        device.run(nop)
        session.close(device)
    assert settled_to(hanging_npu.devroot, baseline), (census(hanging_npu.devroot), baseline)


def test_a_freed_buffer_cannot_be_mapped_or_bought_while_its_free_is_deferred(fresh_npu, queued):
    """Neither MEM_MAP of the handle nor a hand-over token issued before the free reaches
    the buffer's memory once MEM_FREE is written, deferred or not."""
    session, device, baseline = queued
    memory = device.alloc_mem(PAGE)
    req = uapi.new_payload(uapi.NPU_CMD_MEM_MAP)
    req.handle = memory.handle
    mapping = device.file.request(uapi.NPU_CMD_MEM_MAP, req)
    send_free(device.file.fd, RAW_SEQ, memory.handle)
    with pytest.raises(NpuError) as refused:
        device.file.request(uapi.NPU_CMD_MEM_MAP, req)
    assert refused.value.errno == errno.ENOENT
    with pytest.raises(NpuError) as refused:
        device.buffer_socket.receive(uapi.c_string(mapping.socket_path), mapping.token)
    assert refused.value.errno == errno.ENOENT
    assert free_reply(device.file.fd, RAW_SEQ) == (0, memory.handle)
    device.buffers.pop(memory.handle)
    memory._unmap()
    session.close(device)
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)


def read_any(fd: int) -> bytes:
    """The first reply completed (plain read(): completion order)."""
    while True:
        try:
            return os.read(fd, uapi.NPU_MAX_FRAME)
        except BlockingIOError:
            pass


def test_frees_among_running_queue_jobs_are_answered_in_the_order_they_came(fresh_npu, queued):
    """Hundreds of MEM_FREEs deferred while the context's queue runs DMA jobs (each free waits
    for its own invalidation count on the serving core): every one is answered, in the order
    the frees were written (plain read() takes replies in the order they were completed),
    the jobs all succeed, and the memory comes back."""
    session, device, baseline = queued
    queue = device.queues[0]
    src, dst = device.alloc_mem(MIB), device.alloc_mem(MIB)
    copy = device.command_buffer()
    copy.add("DMA_COPY", src=src.address, dst=dst.address, length=MIB)
    held = [device.alloc_mem(PAGE * (1 + i % 3)) for i in range(400)]
    fd = device.file.fd
    fences, replies = [], []
    for batch in range(0, len(held), 40):                        # 64 requests in flight at most per file
        for i in range(batch, batch + 40):
            if i % 8 == 0:
                fences.append(device.queue_submit(queue, copy))
            send_free(fd, RAW_SEQ + i, held[i].handle)
        for _ in range(40):
            frame = read_any(fd)
            magic, cmd, seq, size, result, _ = uapi.header_fields(frame)
            assert cmd == uapi.NPU_CMD_MEM_FREE and size, frame[:24]
            replies.append((seq, result, uapi.unpack_payload(uapi.NPU_CMD_MEM_FREE, frame, uapi.HDR_SIZE).handle))
    assert replies == [(RAW_SEQ + i, 0, memory.handle) for i, memory in enumerate(held)]
    assert [fence.wait(30).status for fence in fences] == [0] * len(fences)
    for memory in held:
        memory._unmap()
        device.buffers.pop(memory.handle)
    assert device.stats()["buffers"] == 3                        # src, dst and the command buffer
    device.close()
    assert settled_to(fresh_npu.devroot, baseline), (census(fresh_npu.devroot), baseline)
