"""Replies reach the request that asked (docs/abi.md, Transport): each is kept under its
request's seq until read, by seq (pread at NPU_REPLY_BY_SEQ + seq) or in completion order,
whatever order they complete in; and a client that lies about its reads or seqs gets a
precise errno and disturbs no other request and no other client."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import libnpu
from kmd_fuse import uapi
from libnpu import NpuError
from tests.support.device import REPO

MIB = 1 << 20


# ---- raw frames, no libnpu in between ----

def send(fd: int, cmd: int, seq: int, payload=None) -> None:
    os.pwrite(fd, uapi.pack_frame(cmd, seq, payload if payload is not None else uapi.new_payload(cmd)), 0)


def read_by_seq(fd: int, seq: int, size: int = uapi.NPU_MAX_FRAME, *, nowait: bool = False) -> bytes:
    offset = uapi.NPU_REPLY_BY_SEQ + seq + (uapi.NPU_REPLY_NOWAIT if nowait else 0)
    while True:
        try:
            return os.pread(fd, size, offset)
        except BlockingIOError:
            if nowait:
                raise


def parse(frame: bytes):
    """(cmd, seq, result, payload or None) of a reply frame whose header agrees with its length."""
    magic, cmd, seq, size, result, reserved = uapi.header_fields(frame)
    assert magic == uapi.NPU_FRAME_MAGIC and reserved == 0 and size == len(frame) - uapi.HDR_SIZE
    return cmd, seq, result, uapi.unpack_payload(cmd, frame, uapi.HDR_SIZE) if size else None


def errno_of(call) -> int:
    with pytest.raises(OSError) as exc:
        call()
    return exc.value.errno


def alloc_payload(size: int):
    req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
    req.size = size
    return req


@pytest.fixture
def node(npu):
    fd = os.open(npu.node, os.O_RDWR)
    yield fd
    os.close(fd)


# ---- reading by seq ----

def test_each_reply_is_read_by_its_own_seq_in_any_order(node):
    send(node, uapi.NPU_CMD_GET_INFO, 1)
    send(node, uapi.NPU_CMD_GET_STATS, 2)
    send(node, uapi.NPU_CMD_MEM_ALLOC, 3, alloc_payload(5000))
    cmd, seq, result, alloc = parse(read_by_seq(node, 3))
    assert (cmd, seq, result) == (uapi.NPU_CMD_MEM_ALLOC, 3, 0) and alloc.alloc_size == 8192
    cmd, seq, result, info = parse(read_by_seq(node, 1))
    assert (cmd, seq, result) == (uapi.NPU_CMD_GET_INFO, 1, 0)
    cmd, seq, result, stats = parse(read_by_seq(node, 2))
    assert (cmd, seq, result) == (uapi.NPU_CMD_GET_STATS, 2, 0) and stats.context_id == info.context_id
    assert stats.buffers == 0                        # each request is carried out when written
    free = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
    free.handle = alloc.handle
    send(node, uapi.NPU_CMD_MEM_FREE, 4, free)
    assert parse(read_by_seq(node, 4))[1:3] == (4, 0)
    assert errno_of(lambda: read_by_seq(node, 1)) == errno.ENOMSG        # read already
    assert errno_of(lambda: os.pread(node, uapi.NPU_MAX_FRAME, 0)) == errno.ENOMSG


def test_a_read_by_seq_leaves_the_other_replies_to_their_readers(node):
    for seq in range(10, 20):
        send(node, uapi.NPU_CMD_GET_PARAM, seq, _param(uapi.CONSTANTS["NPU_PARAM_NUM_CORES"]))
    assert parse(read_by_seq(node, 15))[1] == 15
    rest = [parse(os.pread(node, uapi.NPU_MAX_FRAME, 0)) for _ in range(9)]   # completion order
    assert sorted(seq for _, seq, _, _ in rest) == [10, 11, 12, 13, 14, 16, 17, 18, 19]
    assert all(result == 0 and reply.value >= 1 for _, _, result, reply in rest)


def _param(param: int):
    req = uapi.new_payload(uapi.NPU_CMD_GET_PARAM)
    req.param = param
    return req


def test_threads_sharing_one_file_each_read_their_own_reply(node):
    """Eight threads, one descriptor: every reply read by seq is the one its thread asked for."""
    errors: list[str] = []
    counts = [0] * 8

    def work(index: int) -> None:
        try:
            for round_ in range(60):
                seq = index * 1000 + round_ + 1
                size = (index + 1) * 4096 + round_
                send(node, uapi.NPU_CMD_MEM_ALLOC, seq, alloc_payload(size))
                cmd, got, result, alloc = parse(read_by_seq(node, seq))
                assert (cmd, got, result) == (uapi.NPU_CMD_MEM_ALLOC, seq, 0), (cmd, got, result)
                assert alloc.alloc_size == -(-size // 4096) * 4096
                free = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
                free.handle = alloc.handle
                send(node, uapi.NPU_CMD_MEM_FREE, seq + 500, free)
                cmd, got, result, freed = parse(read_by_seq(node, seq + 500))
                assert (cmd, got, result, freed.handle) == (uapi.NPU_CMD_MEM_FREE, seq + 500, 0, alloc.handle)
                counts[index] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {index}: {exc!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and counts == [60] * 8
    send(node, uapi.NPU_CMD_GET_STATS, 1)
    assert parse(read_by_seq(node, 1))[3].buffers == 0


# ---- lies ----

def test_a_seq_in_flight_twice_is_eexist_and_the_first_is_answered(node):
    send(node, uapi.NPU_CMD_GET_INFO, 9)
    assert errno_of(lambda: send(node, uapi.NPU_CMD_GET_STATS, 9)) == errno.EEXIST
    assert parse(read_by_seq(node, 9))[:3] == (uapi.NPU_CMD_GET_INFO, 9, 0)
    send(node, uapi.NPU_CMD_GET_STATS, 9)                              # read: the seq is free again
    assert parse(read_by_seq(node, 9))[:3] == (uapi.NPU_CMD_GET_STATS, 9, 0)
    assert errno_of(lambda: os.pread(node, uapi.NPU_MAX_FRAME, 0)) == errno.ENOMSG


def test_a_read_too_small_is_eoverflow_and_keeps_the_reply(node):
    send(node, uapi.NPU_CMD_GET_INFO, 3)
    assert errno_of(lambda: read_by_seq(node, 3, size=uapi.HDR_SIZE)) == errno.EOVERFLOW
    assert errno_of(lambda: os.pread(node, 16, 0)) == errno.EOVERFLOW
    assert parse(read_by_seq(node, 3))[:3] == (uapi.NPU_CMD_GET_INFO, 3, 0)


def test_a_read_for_a_seq_not_in_flight_is_enomsg_and_takes_nothing(node):
    send(node, uapi.NPU_CMD_GET_INFO, 5)
    assert errno_of(lambda: read_by_seq(node, 6)) == errno.ENOMSG
    assert errno_of(lambda: read_by_seq(node, 6, nowait=True)) == errno.ENOMSG
    assert parse(read_by_seq(node, 5))[1] == 5


def test_offsets_that_name_no_seq_are_einval(node):
    send(node, uapi.NPU_CMD_GET_INFO, 1)
    for offset in (uapi.NPU_REPLY_BY_SEQ + (1 << 32), uapi.NPU_REPLY_BY_SEQ * 2, (1 << 62) + 1):
        assert errno_of(lambda: os.pread(node, uapi.NPU_MAX_FRAME, offset)) == errno.EINVAL
    assert parse(read_by_seq(node, 1))[1] == 1


def test_a_reply_not_ready_is_eagain_at_once_with_nowait(npu, node):
    """A WAIT whose fence is a long job: NOWAIT says EAGAIN and the reply stays for its reader."""
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
        commands = device.command_buffer(capacity=64 * 200)
        for _ in range(200):
            commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
        fence = device.submit(commands, [src, dst])                   # tens of ms at least
        wait = uapi.new_payload(uapi.NPU_CMD_WAIT)
        wait.count, wait.fences[0], wait.timeout_ns = 1, fence.id, 200_000_000
        send(device.file.fd, uapi.NPU_CMD_WAIT, 1 << 31, wait)        # libnpu's seqs are far below
        assert errno_of(lambda: read_by_seq(device.file.fd, 1 << 31, nowait=True)) == errno.EAGAIN
        cmd, seq, result, done = parse(read_by_seq(device.file.fd, 1 << 31))
        assert (cmd, seq) == (uapi.NPU_CMD_WAIT, 1 << 31)
        assert (result, done.status[0]) in ((0, 0), (-errno.ETIMEDOUT, uapi.NPU_FENCE_PENDING))
        assert device.info()["context_id"] > 0                        # libnpu's own requests still work


def test_a_client_that_never_reads_or_closes_mid_request_disturbs_no_one(npu, node):
    with libnpu.initialize(npu.devroot) as session:
        bystander = session.open(0)
        for seq in range(64):                                         # never read
            send(node, uapi.NPU_CMD_MEM_ALLOC, seq, alloc_payload(4096))
        assert errno_of(lambda: send(node, uapi.NPU_CMD_GET_INFO, 99)) == errno.EBUSY
        closing = os.open(npu.node, os.O_RDWR)
        send(closing, uapi.NPU_CMD_MEM_ALLOC, 1, alloc_payload(MIB))
        send(closing, uapi.NPU_CMD_GET_INFO, 2)
        os.close(closing)                                             # replies never read
        memory = bystander.alloc_mem(8192)
        memory.view[:] = 7
        assert bystander.stats()["buffers"] == 1 and bytes(memory.view[:4]) == b"\x07" * 4
        bystander.free_mem(memory)
        with pytest.raises(NpuError) as exc:
            bystander.free_mem(memory)
        assert exc.value.errno == errno.ENOENT


SHARER = textwrap.dedent("""
    import errno, os, sys
    from kmd_fuse import uapi
    fd, rounds = int(sys.argv[1]), int(sys.argv[2])
    seq, taken = 0, 0
    for round_ in range(rounds):
        req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
        req.size = 4096 * (1 + round_ % 7)
        while True:                     # the seqs are the parent's too: skip those in flight
            seq = seq % 40 + 1
            try:
                os.pwrite(fd, uapi.pack_frame(uapi.NPU_CMD_MEM_ALLOC, seq, req), 0)
                break
            except OSError as exc:
                assert exc.errno == errno.EEXIST, exc
                taken += 1
        while True:
            try:
                frame = os.pread(fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + seq)
                break
            except BlockingIOError:
                pass
        magic, cmd, got, size, result, _ = uapi.header_fields(frame)
        assert (cmd, got, result, size) == (uapi.NPU_CMD_MEM_ALLOC, seq, 0, len(frame) - uapi.HDR_SIZE), frame
        alloc = uapi.unpack_payload(uapi.NPU_CMD_MEM_ALLOC, frame, uapi.HDR_SIZE)
        assert alloc.alloc_size == req.size, (alloc.alloc_size, req.size)
        free = uapi.new_payload(uapi.NPU_CMD_MEM_FREE)
        free.handle = alloc.handle
        os.pwrite(fd, uapi.pack_frame(uapi.NPU_CMD_MEM_FREE, seq, free), 0)   # its seq is free again
        while True:
            try:
                frame = os.pread(fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + seq)
                break
            except BlockingIOError:
                pass
        assert uapi.header_fields(frame)[1:5:3] == (uapi.NPU_CMD_MEM_FREE, 0), frame
        assert uapi.unpack_payload(uapi.NPU_CMD_MEM_FREE, frame, uapi.HDR_SIZE).handle == alloc.handle
    print(rounds, taken, flush=True)
""")


def test_two_processes_sharing_one_file_never_read_each_others_replies(npu):
    """A child given the parent's descriptor (as after fork) uses the same small seqs as the
    parent's libnpu: a seq in flight is EEXIST for the other, and each reads only its own
    replies, so neither ever sees the other's."""
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        fd = device.file.fd
        child = subprocess.Popen([sys.executable, "-c", SHARER, str(fd), "300"], pass_fds=(fd,),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        try:
            rounds = 0
            while child.poll() is None and rounds < 2000:
                memory = device.alloc_mem(4096 * (1 + rounds % 5))
                assert memory.size == 4096 * (1 + rounds % 5)
                assert device.param("NUM_CORES") >= 1
                device.free_mem(memory)
                rounds += 1
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert (child.returncode, out.split()[0]) == (0, "300"), err
        assert device.stats()["buffers"] == 0 and rounds > 0
