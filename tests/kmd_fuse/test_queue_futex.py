"""A user queue's waiter asleep on a futex (ABI 2.8, NPU_QUEUE_WAIT_FUTEX): woken by the core
at each completion and by the driver when it stops the queue, and nothing a client does with
the word (its header's `done`) or the flag holds up the core or anyone else."""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import random
import threading

import pytest

import libnpu
from kmd_fuse import uapi
from libnpu import user_queue
from libnpu.capi import queue_native
from npu_hw import queues
from tests.support.device import WAIT_S, wait_for

pytestmark = pytest.mark.recovery     # a reset below (benchmarks/flake_hunt.py -m recovery)

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
needs_futex = pytest.mark.skipif(_SYS_FUTEX is None, reason="no futex system call number for this machine")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def nop(device):
    commands = device.command_buffer()
    commands.add("NOP")
    return commands


def done_address(queue) -> int:
    """HDR_DONE's address in the client's mapping of the queue memory."""
    return ctypes.addressof(ctypes.c_char.from_buffer(queue.mem)) + queues.HDR_DONE


def completed_seq(queue, seq: int) -> int:
    """The seq the core wrote in job ``seq``'s completion record (the client cannot forge it
    in `done`'s place)."""
    at = queues.completions_offset(queue.entries) + (seq & (queue.entries - 1)) * queues.COMPLETION_STRUCT.size
    return queues.COMPLETION_STRUCT.unpack_from(queue.mem, at)[0]


@needs_futex
def test_the_device_offers_futex_wake_ups_and_the_c_client_takes_them(device):
    assert device.param("QUEUE_WAKEUPS") == uapi.NPU_QUEUE_WAIT_LINE | uapi.NPU_QUEUE_WAIT_FUTEX
    assert (uapi.NPU_QUEUE_WAIT_LINE, uapi.NPU_QUEUE_WAIT_FUTEX) == (queues.WAIT_LINE, queues.WAIT_FUTEX)
    queue = device.create_queue()
    assert queue.wakeup == ("futex" if queue.native else "line")


@pytest.mark.parametrize("futex", [True, False], ids=["futex", "line"])
def test_waiters_asleep_either_way_are_woken_at_each_completion(device, monkeypatch, futex):
    """Every wait goes to sleep (no spin): the core wakes it, never the safety net."""
    monkeypatch.setattr(queue_native, "FUTEX_WAKEUPS", futex)
    user_queue.set_wait_mode("sleep")
    try:
        queue = device.create_queue()
        commands = nop(device)
        for _ in range(200):
            device.queue_run(queue, commands)
        assert queue.late_wakeups == 0
        if queue.native:
            assert queue.wakeup == ("futex" if futex else "line")
            assert queue.wait_counts()["slept"] > 0
    finally:
        user_queue.set_wait_mode("adaptive")


@needs_futex
def test_a_client_playing_with_its_futex_word_holds_up_nobody(session, device):
    """Threads of the client asleep on its `done` word with any value, the word rewritten all
    the time, every HDR_WAITING bit set: the core wakes at most one sleeper per completion,
    serves the queue on, and another context's jobs complete as ever."""
    queue = device.create_queue()
    commands = nop(device)
    word, stop = done_address(queue), threading.Event()

    def sleep_on_the_word() -> None:
        slice_, value = _Timespec(0, 20_000_000), ctypes.c_uint32.from_address(word)
        while not stop.is_set():     # FUTEX_WAIT (shared) on whatever the word holds, 20 ms at most
            _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(word), 0, ctypes.c_uint(value.value), ctypes.byref(slice_),
                          None, 0)

    def scribble() -> None:
        rng = random.Random(7)
        while not stop.is_set():
            queue.header.write32(queues.HDR_DONE, rng.getrandbits(32))
            queue.header.write32(queues.HDR_WAITING, 0xFFFFFFFF)  # the futex and the line, and unknown bits
            os.sched_yield()           # not a wait: hands the GIL and the CPU to the submitting thread

    threads = [threading.Thread(target=sleep_on_the_word) for _ in range(4)]
    threads.append(threading.Thread(target=scribble))
    for thread in threads:
        thread.start()
    try:
        for seq in range(1, 101):
            at = queues.entries_offset() + (seq & (queue.entries - 1)) * queues.ENTRY_STRUCT.size
            queues.ENTRY_STRUCT.pack_into(queue.mem, at, seq, commands.address, commands.used, 0, 0, 0)
            queue.header.write64(queues.HDR_TAIL, seq)
            queue.ring()
            wait_for(lambda: completed_seq(queue, seq) == seq, f"job {seq} of the scribbling client")
        with session.open(0) as other:
            other_queue = other.create_queue()
            for _ in range(50):
                other.queue_run(other_queue, nop(other))
                other.run(nop(other))
            assert other_queue.late_wakeups == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    queue.tail = 100


@needs_futex
def test_a_waiter_asleep_on_the_futex_learns_of_a_reset_at_once(fresh_npu, monkeypatch):
    """The driver wakes the futex's sleepers when it stops a queue, as it writes the line:
    without it, the waiter slept until its safety net (a late wake-up) and learnt it then."""
    monkeypatch.setattr(user_queue, "SLEEP_SLICE_MS", 30_000)      # a safety net far past the reset
    with libnpu.initialize(fresh_npu.devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        if not queue.native:
            pytest.skip("the Python client sleeps on the line")
        src, dst = device.alloc_mem(16 << 20), device.alloc_mem(16 << 20)
        commands = device.command_buffer(capacity=64 * 2000 + 64)
        for _ in range(2000):
            commands.add("DMA_COPY", src=src.address, dst=dst.address, length=src.size)
        user_queue.set_wait_mode("sleep")
        try:
            fence = device.queue_submit(queue, commands)
            outcome: list[BaseException] = []

            def wait() -> None:
                try:
                    fence.wait(WAIT_S)
                except BaseException as exc:          # noqa: BLE001 - checked below
                    outcome.append(exc)

            waiter = threading.Thread(target=wait)
            waiter.start()
            wait_for(lambda: queue.header.read32(queues.HDR_WAITING) == queues.WAIT_FUTEX, "the waiter asleep")
            device.reset()
            waiter.join()
        finally:
            user_queue.set_wait_mode("adaptive")
        assert len(outcome) == 1 and isinstance(outcome[0], libnpu.NpuError), outcome
        assert outcome[0].errno == errno.ECANCELED and queue.late_wakeups == 0
        device.queue_run(device.create_queue(), nop(device))   # a new queue serves at once
