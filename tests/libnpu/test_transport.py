"""libnpu's side of the request/reply framing (libnpu/transport.py): a requester that gives
up leaves no reply behind for long, and closing the file under a waiting thread fails that
thread cleanly without its descriptor number being reused under it."""
from __future__ import annotations

import errno
import os
import signal
import threading

import pytest

from kmd_fuse import uapi
from libnpu import NpuError

MIB = 1 << 20


class GaveUp(Exception):
    pass


def long_job(device, copies: int = 200):
    """A fence of a job of ``copies`` whole-buffer 16 MiB DMA copies (tens of ms at least)."""
    src, dst = device.alloc_mem(16 * MIB), device.alloc_mem(16 * MIB)
    commands = device.command_buffer(capacity=64 * copies)
    for _ in range(copies):
        commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
    return device.submit(commands, [src, dst])


def wait_request(fence_id: int):
    req = uapi.new_payload(uapi.NPU_CMD_WAIT)
    req.count, req.fences[0], req.timeout_ns = 1, fence_id, -1
    return req


def in_flight(device, seq: int) -> bool:
    """Whether the driver still holds request ``seq`` of the device's file (read by seq, no wait)."""
    try:
        os.pread(device.file.fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + uapi.NPU_REPLY_NOWAIT + seq)
    except BlockingIOError:
        return True
    except OSError as exc:
        assert exc.errno == errno.ENOMSG
        return False
    raise AssertionError(f"the reply to seq {seq} was still there to take")


def test_an_interrupted_requests_reply_is_dropped_by_the_next_request(device):
    fence = long_job(device)
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(GaveUp()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        with pytest.raises(GaveUp):                       # as a KeyboardInterrupt would
            device.file.request(uapi.NPU_CMD_WAIT, wait_request(fence.id))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    (abandoned,) = device.file._abandoned
    fence.wait(60)                                        # its reply is ready now
    assert device.info()["context_id"] > 0                # the next request drops it first ...
    assert not device.file._abandoned and not in_flight(device, abandoned)   # ... from the driver too


def test_closing_under_a_waiting_thread_fails_it_with_ebadf(session):
    device = session.open(0)
    fence = long_job(device)
    failure: list[BaseException] = []

    def waiter() -> None:
        try:
            device.file.request(uapi.NPU_CMD_WAIT, wait_request(fence.id))
        except BaseException as exc:  # noqa: BLE001 - checked below
            failure.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        while not device.file._users and thread.is_alive():   # the waiter is writing or reading
            pass
        device.file.close()
    finally:
        thread.join(60)
    assert not thread.is_alive() and len(failure) == 1
    assert isinstance(failure[0], NpuError) and failure[0].errno == errno.EBADF
    assert device.file.fd == -1 and device.file._users == 0
    with pytest.raises(NpuError) as exc:
        device.info()
    assert exc.value.errno == errno.EBADF
    session.close(device)
