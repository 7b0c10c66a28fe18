"""Buffers handed over as sealed memfds on the device's hand-over socket (issue 11,
findings 4 and 8): nobody can resize or link a buffer, the socket gives a buffer
only to its context's uid with a live token, and what the device accounts is what
the daemon's memfds hold."""
from __future__ import annotations

import array
import ctypes
import errno
import json
import mmap
import os
import resource
import secrets
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

import libnpu
from kmd_fuse import handover, memory, paths, uapi
from tests.support.device import MountedNpu, open_to_others, start_npu, stop_npu, wait_until
from tests.support.other_user import python_for_others

NOBODY = 65534
AT_EMPTY_PATH, AT_FDCWD = 0x1000, -100


# ---- helpers ----

def mem_map(device, handle: int):
    """A raw MEM_MAP reply: (token, socket path, size)."""
    req = uapi.new_payload(uapi.NPU_CMD_MEM_MAP)
    req.handle = handle
    reply = device.file.request(uapi.NPU_CMD_MEM_MAP, req)
    return reply.token, uapi.c_string(reply.socket_path), reply.size


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def exchange(sock: socket.socket, message: bytes) -> tuple[int, int, int]:
    """Send one message; (result, size, fd or -1) of the reply."""
    sock.send(message)
    reply, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
    fds = [fd for _, _, data in ancillary for fd in array.array("i", data)]
    result, size = uapi.unpack_handover_reply(reply)
    assert len(fds) == (1 if result == 0 else 0)
    return result, size, fds[0] if fds else -1


def redeem(path: str, token: int) -> tuple[int, int, int]:
    with connect(path) as sock:
        return exchange(sock, uapi.pack_handover_request(token))


def daemon_pid(npu) -> int:
    return int(paths.pid_file(npu.devroot, 0).read_text())


def daemon_fds(npu) -> list[str]:
    fd_dir = Path(f"/proc/{daemon_pid(npu)}/fd")
    targets = []
    for entry in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(fd_dir / entry))
        except FileNotFoundError:
            pass
    return targets


def bo_links(npu) -> set[str]:
    return {name for name in os.listdir(paths.bus_dir(npu.devroot, 0)) if name.startswith("bo")}


def run_as_nobody(script: str, npu, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A Python script as uid/gid 65534, in the node's group (it may open the node)."""
    open_to_others(npu.devroot)
    group = os.stat(npu.node).st_gid
    python, env = python_for_others()
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", f"--groups={group}",
                           python, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd="/", env=env)


def dma_copy(device, src, dst, length: int) -> None:
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=length)
    device.run(cmds, [src, dst])


# ---- nobody can resize or link a buffer (findings 4 and 8) ----

def test_a_buffer_fd_cannot_be_resized_and_the_chip_still_computes_on_it(device):
    src, dst = device.alloc_mem(16384), device.alloc_mem(16384)
    fd, size = device.buffer_fd(src.handle)
    try:
        assert size == 16384
        for new_size in (0, 4096, 256 << 20):       # shrink (SIGBUS in the chip), grow (unaccounted memory)
            with pytest.raises(OSError) as err:
                os.ftruncate(fd, new_size)
            assert err.value.errno == errno.EPERM
        with pytest.raises(OSError) as err:          # fallocate past the end is growing too
            os.posix_fallocate(fd, 0, 1 << 20)
        assert err.value.errno == errno.EPERM
        assert os.fstat(fd).st_size == 16384
        pattern = np.random.default_rng(4).integers(0, 256, 16384, dtype=np.uint8)
        src.view[:] = pattern
        dma_copy(device, src, dst, 16384)
        assert np.array_equal(dst.view, pattern)
        # punching holes is allowed (the pages read as zeros again), and no page vanishes
        memory.punch_hole(fd, 16384)
        dma_copy(device, src, dst, 16384)
        assert not dst.view.any() and not src.view.any()
    finally:
        os.close(fd)


def test_a_buffer_fd_cannot_be_linked_anywhere(device):
    mem = device.alloc_mem(4096)
    fd, _ = device.buffer_fd(mem.handle)
    target = f"/dev/shm/npu-test-{uuid.uuid4().hex}"
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        with pytest.raises(OSError):                 # through procfs, as any user could try
            os.link(f"/proc/self/fd/{fd}", target, follow_symlinks=True)
        # linkat(fd, "", ..., AT_EMPTY_PATH): root's way to name an open file; a memfd lives on
        # the kernel's internal mount (EXDEV) and has no link to add to (ENOENT)
        assert libc.linkat(fd, b"", AT_FDCWD, target.encode(), AT_EMPTY_PATH) == -1
        assert ctypes.get_errno() in (errno.EXDEV, errno.ENOENT)
        assert not os.path.lexists(target)
    finally:
        os.close(fd)
        if os.path.lexists(target):
            os.unlink(target)


def test_a_non_root_client_gets_a_sealed_buffer_and_root_cannot_take_it(npu):
    """The whole path as an ordinary user: node, MEM_MAP, hand-over, mmap; its token is
    refused (EPERM) to a root peer - no exceptions - and then still works for its owner."""
    open_to_others(npu.devroot)                      # before the peer looks for the node
    python, env = python_for_others()
    peer = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", f"--groups={os.stat(npu.node).st_gid}",
         python, "-c", textwrap.dedent("""
            import errno, json, mmap, os, sys
            import libnpu
            from kmd_fuse import uapi
            with libnpu.initialize(sys.argv[1]) as session:
                device = session.open(0)
                mem = device.alloc_mem(8192)
                mem.view[:] = 9
                req = uapi.new_payload(uapi.NPU_CMD_MEM_MAP)
                req.handle = mem.handle
                reply = device.file.request(uapi.NPU_CMD_MEM_MAP, req)
                print(json.dumps({"token": reply.token, "socket": uapi.c_string(reply.socket_path)}), flush=True)
                sys.stdin.readline()                         # root tries the token meanwhile
                fd, size = device.buffer_socket.receive(uapi.c_string(reply.socket_path), reply.token)
                try:
                    os.ftruncate(fd, 0)
                    print("truncated")
                except OSError as exc:
                    print("ftruncate", errno.errorcode[exc.errno])
                with mmap.mmap(fd, size) as m:
                    print("sees", m[0], m[size - 1], "size", size)
                os.close(fd)
            """), str(npu.devroot)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/", env=env)
    try:
        first = peer.stdout.readline()
        assert first, peer.stderr.read()
        grant = json.loads(first)
        assert redeem(grant["socket"], grant["token"])[0] == -errno.EPERM
        peer.stdin.write("\n")
        peer.stdin.flush()
        out, err = peer.communicate(timeout=60)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    assert peer.returncode == 0, err
    assert out.split("\n")[:2] == ["ftruncate EPERM", "sees 9 9 size 8192"]


def test_a_root_token_presented_by_another_user_is_eperm(npu, device):
    mem = device.alloc_mem(4096)
    token, path, _ = mem_map(device, mem.handle)
    done = run_as_nobody("""
        import socket, sys
        from kmd_fuse import uapi
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(sys.argv[1])
        sock.send(uapi.pack_handover_request(int(sys.argv[2])))
        reply, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
        print(uapi.unpack_handover_reply(reply)[0], len(ancillary))
        """, npu, path, str(token))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(-errno.EPERM), "0"]
    result, size, fd = redeem(path, token)          # the owner's token was not spent by the refusal
    assert (result, size) == (0, 4096)
    os.close(fd)


def test_the_chip_path_to_a_buffer_is_closed_to_other_users(npu, device):
    mem = device.alloc_mem(4096)
    mem.view[:4] = [1, 2, 3, 4]
    bus = paths.bus_dir(npu.devroot, 0)
    link = bus / max(bo_links(npu), key=lambda name: int(name[2:]))
    assert os.readlink(link).startswith(f"/proc/{daemon_pid(npu)}/fd/")
    with open(link, "rb") as f:                      # the daemon's user (the chip's) can follow it
        assert f.read(4) == b"\x01\x02\x03\x04"
    done = run_as_nobody("""
        import os, sys
        for flags in (os.O_RDONLY, os.O_RDWR):
            try:
                os.close(os.open(sys.argv[1], flags))
                print("opened")
            except OSError as exc:
                print(exc.errno)
        """, npu, str(link))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(errno.EACCES)] * 2


# ---- tokens ----

def test_used_freed_unknown_and_closed_tokens_are_enoent(npu, session, device):
    mem = device.alloc_mem(4096)
    token, path, _ = mem_map(device, mem.handle)
    result, _, fd = redeem(path, token)
    assert result == 0
    os.close(fd)
    assert redeem(path, token)[0] == -errno.ENOENT                 # used
    assert redeem(path, secrets.randbits(64))[0] == -errno.ENOENT  # never issued
    freed = device.alloc_mem(4096)
    token, _, _ = mem_map(device, freed.handle)
    device.free_mem(freed)
    assert redeem(path, token)[0] == -errno.ENOENT                 # its buffer was freed
    contexts = device.info()["num_contexts"]
    other = session.open(0)
    token, _, _ = mem_map(other, other.alloc_mem(4096).handle)
    session.close(other)                                            # the driver hears of it a moment later
    assert wait_until(lambda: device.info()["num_contexts"] == contexts)
    assert redeem(path, token)[0] == -errno.ENOENT                 # its context was closed


def test_a_context_keeps_only_its_newest_tokens(device):
    mem = device.alloc_mem(4096)
    grants = [mem_map(device, mem.handle) for _ in range(handover.TOKENS_PER_CONTEXT + 1)]
    path = grants[0][1]
    assert redeem(path, grants[0][0])[0] == -errno.ENOENT          # the oldest was dropped
    result, _, fd = redeem(path, grants[-1][0])
    assert result == 0
    os.close(fd)


# ---- a hostile peer only ever hurts its own connection ----

def test_garbage_on_the_socket_leaves_the_daemon_serving(npu, device):
    mem = device.alloc_mem(4096)
    token, path, _ = mem_map(device, mem.handle)
    baseline = len(daemon_fds(npu))
    good = uapi.pack_handover_request(token)
    for message in (good[:7], good + b"\0", b"\xff" * 16, uapi.pack_handover_request(token, magic=1),
                    good[:4] + b"\1\0\0\0" + good[8:], os.urandom(4096)):
        with connect(path) as sock:
            assert exchange(sock, message)[0] == -errno.EINVAL
            assert sock.recv(64) == b""                              # and the connection is closed
    with connect(path) as sock:
        # descriptors sent *to* the daemon are dropped by the kernel, never installed there
        sock.sendmsg([b"\0" * 16], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        assert uapi.unpack_handover_reply(sock.recv(64))[0] == -errno.EINVAL
    with connect(path) as sock:                                      # the real request still works
        result, _, fd = exchange(sock, good)
        assert result == 0
        os.close(fd)
    with connect(path) as sock:                                      # an empty message ends the connection
        sock.send(b"")
        assert sock.recv(64) == b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stream:   # wrong socket type
        with pytest.raises(OSError):
            stream.connect(path)
    with connect(path) as sock:                                      # half a request, then hang up
        sock.send(good[:3])
    assert wait_until(lambda: len(daemon_fds(npu)) <= baseline)
    device.free_mem(device.alloc_mem(4096))                          # still serving, allocations too


def test_a_peer_that_never_reads_its_replies_stalls_only_itself(npu, device):
    """Requests flooded without reading a reply: the daemon's reply blocks on that peer's
    full socket, everyone else is served meanwhile, and the peer is dropped after
    SEND_TIMEOUT_S."""
    mem = device.alloc_mem(4096)
    token, path, _ = mem_map(device, mem.handle)
    with connect(path) as flooder:
        flooder.setblocking(False)
        sent = 0
        try:
            while sent < 100_000:
                flooder.send(uapi.pack_handover_request(0))
                sent += 1
        except BlockingIOError:
            pass                                     # both directions are full now
        except (BrokenPipeError, ConnectionResetError):
            pass                                     # a loaded machine: the flooder lost the CPU
        assert sent < 100_000                        # for SEND_TIMEOUT_S and is dropped already
        assert device.info()["memory_used"] >= 4096  # the node is served
        result, _, fd = redeem(path, token)          # and so is everyone else's hand-over
        assert result == 0
        os.close(fd)

        def dropped() -> bool:
            try:
                flooder.send(uapi.pack_handover_request(0))
            except BlockingIOError:
                return False
            except (BrokenPipeError, ConnectionResetError):
                return True
            return False
        assert wait_until(dropped, timeout=handover.SEND_TIMEOUT_S + 10)


def test_idle_connections_are_dropped_and_libnpu_reconnects(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_HANDOVER_IDLE_S", "0.3")
    npu = start_npu(tmp_path)
    try:
        with libnpu.initialize(npu.devroot) as session:
            device = session.open(0)
            mem = device.alloc_mem(4096)
            token, path, _ = mem_map(device, mem.handle)
            with connect(path) as idle:
                assert idle.recv(64) == b""                # closed by the daemon, nothing sent
            for _ in range(3):                             # libnpu's own connection was dropped too
                mem = device.alloc_mem(4096)               # ... and is remade transparently
                mem.view[:] = 3
                with connect(path) as probe:
                    assert probe.recv(64) == b""           # wait out one idle period
            result, _, fd = redeem(path, token)
            assert result == 0
            os.close(fd)
    finally:
        stop_npu(npu)


# ---- accounting and cleanup ----

def test_device_memory_is_what_the_memfds_hold(npu, session):
    watcher = session.open(0)
    client = session.open(0)
    for size in (4096, 5000, 1 << 20, 3 << 20):
        client.alloc_mem(size)
    used = watcher.info()["memory_used"]
    pid = daemon_pid(npu)
    held = 0
    for entry in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{entry}"
        try:
            if os.readlink(path).startswith("/memfd:npu-bo"):
                held += os.stat(path).st_size
        except FileNotFoundError:
            pass
    assert held == used
    assert client.stats()["memory_allocated"] == 4096 + 8192 + (1 << 20) + (3 << 20)


def test_closing_a_context_gives_back_every_descriptor_and_link(npu, session):
    watcher = session.open(0)
    baseline_fds, baseline_links = len(daemon_fds(npu)), bo_links(npu)
    used = watcher.info()["memory_used"]
    client = session.open(0)
    buffers = [client.alloc_mem(8192) for _ in range(20)]
    for mem in buffers[:5]:
        mem_map(client, mem.handle)                  # tokens left outstanding
    assert len(bo_links(npu) - baseline_links) == 20
    session.close(client)
    assert wait_until(lambda: len(daemon_fds(npu)) <= baseline_fds)
    assert bo_links(npu) == baseline_links
    assert watcher.info()["memory_used"] == used


def test_a_mapping_kept_after_free_reads_zeros_and_holds_no_device_memory(device):
    mem = device.alloc_mem(1 << 20)
    mem.view[:] = 0x77
    fd, size = device.buffer_fd(mem.handle)
    try:
        with mmap.mmap(fd, size) as kept:
            assert kept[:4] == b"\x77" * 4
            device.free_mem(mem)
            assert os.fstat(fd).st_blocks == 0       # the pages went back to the host at MEM_FREE
            assert kept[:4] == b"\0" * 4 and kept[size - 1] == 0
    finally:
        os.close(fd)


def test_buffers_beyond_the_descriptor_budget_are_enomem_and_the_daemon_keeps_serving(tmp_path):
    """One descriptor per buffer: the daemon keeps FDS_RESERVED for everything else."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    budget = 200
    limit = memory.FDS_RESERVED + budget
    npu = MountedNpu(tmp_path / "dev", 1)
    npu.devroot.mkdir(parents=True)
    started = subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "start", "--devroot", str(npu.devroot)],
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
                             capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        with libnpu.initialize(npu.devroot) as session:
            device = session.open(0)
            req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
            req.size = 4096
            handles = [device.file.request(uapi.NPU_CMD_MEM_ALLOC, req).handle for _ in range(budget)]
            with pytest.raises(libnpu.NpuError) as err:
                device.alloc_mem(4096)
            assert err.value.errno == errno.ENOMEM
            other = session.open(0)                  # the daemon still has descriptors of its own
            assert other.info()["memory_used"] == budget * 4096
            device._free_handle(handles.pop())
            mem = device.alloc_mem(4096)             # and hands buffers over again once one is freed
            mem.view[:] = 1
    finally:
        stop_npu(npu)
