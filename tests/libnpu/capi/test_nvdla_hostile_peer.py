"""libnvdla_port.so against a hand-over peer that answers garbage (docs/security.md, "The C
libraries"): the device's node is the real driver, but its hand-over socket is replaced
for the test by a peer that lies (a positive result, a short reply, a buffer smaller than
asked, several descriptors). Every allocation must fail with an NvError, the library must
neither map nor close a descriptor it was not given, nor keep the extra ones."""
from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import socket
import struct
import threading

import pytest

from kmd_fuse import paths
from kmd_fuse.uapi import CONSTANTS
from libnpu.capi import nvdla
from libnpu.nvdla import NvError

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

REPLY = struct.Struct("<IiQ")
MAGIC = CONSTANTS["NPU_HANDOVER_MAGIC"]
SIZE = 8192


class HostilePeer:
    """Listens at the device's hand-over path and answers every request with ``answer()``:
    (reply bytes, descriptors to attach)."""

    def __init__(self, path, answer):
        self.path, self.answer = str(path), answer
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            while conn.recv(64):
                reply, fds = self.answer()
                socket.send_fds(conn, [reply], fds) if fds else conn.send(reply)

    def close(self) -> None:
        self.listener.close()
        os.unlink(self.path)
        self.thread.join(timeout=5)


@pytest.fixture
def port(npu, monkeypatch):
    """The module's device with its hand-over socket set aside, put back at teardown (also
    when the test fails): the peers lie to the library only, the driver never hears them."""
    lib = ctypes.CDLL(str(nvdla.build()))
    monkeypatch.setenv("NPU_DEVROOT", str(npu.devroot))
    path = paths.handover_socket(npu.devroot, 0)
    aside = path.with_name(path.name + ".real")
    os.rename(path, aside)
    try:
        session, device = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.NvDlaInitialize(ctypes.byref(session)) == 0
        assert lib.NvDlaOpen(session, 0, ctypes.byref(device)) == 0
        peers: list[HostilePeer] = []

        def alloc(answer) -> int:
            peer = HostilePeer(path, answer)
            peers.append(peer)
            try:
                mem, data = ctypes.c_void_p(), ctypes.c_void_p()
                return lib.NvDlaAllocMem(session, device, ctypes.byref(mem), ctypes.byref(data), SIZE, 0)
            finally:
                lib.NvDlaClose(session, device)          # drops the connection to this peer
                assert lib.NvDlaOpen(session, 0, ctypes.byref(device)) == 0
                peer.close()
                peers.remove(peer)

        yield alloc
        lib.NvDlaClose(session, device)
        lib.NvDlaDestroy(session)
    finally:
        os.rename(aside, path)


def _memfd(size: int) -> int:
    fd = os.memfd_create("bystander")
    os.ftruncate(fd, size)
    return fd


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_a_positive_result_is_not_taken_for_a_descriptor(port):
    bystander = _memfd(1 << 20)        # the host program's own file, whose number the peer names
    try:
        status = port(lambda: (REPLY.pack(MAGIC, bystander, SIZE), []))
        assert status != NvError.Success.value
        os.fstat(bystander)            # still open: the library did not close it
    finally:
        os.close(bystander)


@pytest.mark.parametrize("reply", [
    REPLY.pack(MAGIC, 0, SIZE)[:12],              # short
    REPLY.pack(MAGIC, 0, SIZE // 2),              # not the buffer's size
    REPLY.pack(MAGIC ^ 1, 0, SIZE),               # not a hand-over reply
    REPLY.pack(MAGIC, 0, SIZE) + b"\0" * 8,       # long
])
def test_a_malformed_reply_fails_the_allocation_and_leaks_no_descriptor(port, reply):
    given = _memfd(SIZE)
    before = _open_fds()
    try:
        status = port(lambda: (reply, [given]))
        assert status != NvError.Success.value
    finally:
        os.close(given)
    assert _open_fds() - before <= set(), _open_fds() - before


def test_extra_descriptors_are_closed(port):
    first, second = _memfd(SIZE), _memfd(SIZE)
    before = _open_fds()
    try:
        status = port(lambda: (REPLY.pack(MAGIC, 0, SIZE), [first, second]))
        assert status != NvError.Success.value       # one reply, one descriptor: anything else is a lie
    finally:
        os.close(first)
        os.close(second)
    assert _open_fds() - before <= set(), _open_fds() - before


def _sealed_memfd(size: int) -> int:
    fd = os.memfd_create("short", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


@pytest.mark.parametrize("given", [
    lambda: _sealed_memfd(SIZE // 2),        # shorter than the buffer: SIGBUS at the first touch past its end
    lambda: _sealed_memfd(0),
    lambda: _memfd(SIZE),                    # the right size, but the peer may shrink it under the program
], ids=["half", "empty", "unsealed"])
def test_a_descriptor_that_is_not_a_sealed_buffer_of_the_size_is_not_mapped(port, given):
    fd = given()
    try:
        status = port(lambda: (REPLY.pack(MAGIC, 0, SIZE), [fd]))
    finally:
        os.close(fd)
    assert status != NvError.Success.value
