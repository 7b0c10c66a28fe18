"""Request/reply frames over an open device node (the user side of the uapi).

Like ioctls on one file descriptor, requests from several threads may be in
flight at once (pread/pwrite, not read/write: the kernel serializes read() and
write() of threads sharing a file on its position lock, so a read held in the
driver would stall the others' writes): each is one write() of a frame tagged
with a sequence number, and each thread reads the reply to its own sequence
number, and no other (pread at NPU_REPLY_BY_SEQ + seq), whatever order the
replies complete in.  A reply that is
not ready at once (WAIT, SUBMIT with NPU_SUBMIT_WAIT, RESET) is read in a loop:
the driver holds a read() at most ~50 ms and then fails it with EAGAIN, so a
signal or a SIGKILL always gets through quickly.  (poll() works too; it costs
one more trip through FUSE.)

Buffers' memory does not cross the node (FUSE carries no descriptors): ``BufferSocket``
trades MEM_MAP's token for the buffer's sealed memfd on the device's hand-over socket.
"""
from __future__ import annotations

import array
import errno
import itertools
import os
import socket
import struct
import threading

from kmd_fuse import uapi
from kmd_fuse.uapi import NpuError


class DriverGone(NpuError):
    """A system call on the node failed because its driver is gone (stopped or died:
    ``uapi.DRIVER_GONE``); ``filename`` is the node.  Whatever the context held went
    with the driver, so giving it back (MEM_FREE, QUEUE_DESTROY, close) has nothing to do."""


def _failed_call(path: str, exc: OSError, command: str, detail: str) -> NpuError:
    """The error for a request whose system call on the node ``path`` failed."""
    code = exc.errno or errno.EIO
    if code in uapi.DRIVER_GONE:
        return DriverGone(code, command, "the device's driver is gone (stopped or died)", node=path)
    return NpuError(code, command, detail, node=path)


def _devices_beside(path: str) -> str:
    """What a program that named a missing node may have meant: the nodes in its directory."""
    try:
        nodes = sorted(name for name in os.listdir(os.path.dirname(path) or ".")
                       if name.startswith("npu") and name[3:].isdigit())
    except OSError:
        return "no such directory"
    return f"devices there: {', '.join(nodes)}" if nodes else "no device there: is its driver started?"


class DeviceFile:
    """An open /dev/npuN: one driver context, safe to share between threads."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            code = exc.errno or errno.EIO
            if code == errno.ENOENT:
                raise FileNotFoundError(code, f"no such device ({_devices_beside(self.path)})", self.path) from None
            if ("OPEN", code) not in uapi.LIMIT_HINTS:
                raise
            raise NpuError(code, "OPEN", f"{self.path}: {uapi.LIMIT_HINTS['OPEN', code]}") from None
        self._seq = itertools.count(1)
        self._lock = threading.Lock()           # guards fd, _users, _closing, _abandoned
        self._users = 0                         # threads inside a system call on fd
        self._closing = False
        self._abandoned: set[int] = set()       # seqs whose requester stopped waiting (interrupted)

    def close(self) -> None:
        """Close the file; a request still running in another thread fails with EBADF. The
        descriptor is closed once no thread is inside a system call on it, so its number is
        never reused (by another open) under a thread that still means this file."""
        with self._lock:
            self._closing = True
            self._close_if_unused()

    def request(self, cmd: int, payload=None):
        """Send one request and return its reply payload (raises NpuError on -errno)."""
        if payload is None:
            payload = uapi.new_payload(cmd)
        return self.request_body(cmd, uapi.ffi.buffer(payload)[:])

    def request_body(self, cmd: int, body: bytes):
        """``request`` with the payload given as bytes (e.g. prepared once for many requests)."""
        command = uapi.COMMANDS[cmd]
        if self._abandoned:
            self._drop_abandoned()
        seq = self._send(command.name, cmd, body)
        try:
            reply = self._read_reply(seq, command.name)
        except BaseException:
            with self._lock:                    # e.g. KeyboardInterrupt: the next request drops the reply
                self._abandoned.add(seq)
            raise
        _, reply_cmd, _, size, result, _ = uapi.header_fields(reply)
        if reply_cmd != cmd or size != len(reply) - uapi.HDR_SIZE:
            raise NpuError(errno.EPROTO, command.name, f"reply to seq {seq} is {len(reply)} bytes for command "
                                                       f"{reply_cmd:#x} announcing {size} payload bytes")
        if result:
            error = NpuError(-result, command.name)
            error.payload = uapi.unpack_payload(cmd, reply, uapi.HDR_SIZE) if size else None
            raise error
        return uapi.unpack_payload(cmd, reply, uapi.HDR_SIZE)

    def _send(self, name: str, cmd: int, body: bytes) -> int:
        """Write the request under a fresh seq; the seq."""
        while True:
            seq = next(self._seq) & 0xFFFFFFFF
            fd = self._enter(name, "device is closed")
            try:
                os.pwrite(fd, uapi.pack_frame_body(cmd, seq, body), 0)
                return seq
            except OSError as exc:
                if exc.errno != errno.EEXIST:   # after 2**32 requests: an abandoned seq still in flight
                    raise _failed_call(self.path, exc, name, "request refused") from None
            finally:
                self._leave()

    def _read_reply(self, seq: int, name: str) -> bytes:
        """The reply to ``seq``, and no other: each thread reads its own (docs/abi.md, Transport)."""
        while True:
            fd = self._enter(name, "device closed while waiting for the reply")
            try:
                return os.pread(fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + seq)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise _failed_call(self.path, exc, name, f"reading the reply to seq {seq} failed") from None
            finally:
                self._leave()

    def _drop_abandoned(self) -> None:
        """Read and drop the replies interrupted requesters left, those ready now."""
        with self._lock:
            seqs = list(self._abandoned)
        for seq in seqs:
            try:
                fd = self._enter("READ", "device is closed")
            except NpuError:
                return
            try:
                os.pread(fd, uapi.NPU_MAX_FRAME, uapi.NPU_REPLY_BY_SEQ + uapi.NPU_REPLY_NOWAIT + seq)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    continue                    # not ready yet: next time
            finally:
                self._leave()
            with self._lock:
                self._abandoned.discard(seq)

    def _enter(self, name: str, why: str) -> int:
        with self._lock:
            if self._closing:
                raise NpuError(errno.EBADF, name, why)
            self._users += 1
            return self.fd

    def _leave(self) -> None:
        with self._lock:
            self._users -= 1
            self._close_if_unused()

    def _close_if_unused(self) -> None:
        if self._closing and not self._users and self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError as exc:
                # close() frees the descriptor whatever it answers (Linux); ENOTCONN or
                # ENODEV only says the driver is gone, and the context went with it.
                if exc.errno not in uapi.DRIVER_GONE:
                    raise


class BufferSocket:
    """The device's buffer hand-over socket, as one client uses it.

    MEM_MAP answers with a token and this socket's path; ``receive`` trades the
    token for the buffer's sealed memfd (SCM_RIGHTS).  One connection per open
    device, made on first use and remade once if the driver dropped it (it drops
    idle ones); thread-safe.  After anything but a clean reply the connection is
    closed (the driver closes it too after an error reply), so a late reply can never
    be taken for the next request's."""

    TIMEOUT_S = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._path = ""

    def receive(self, path: str, token: int) -> tuple[int, int]:
        """(descriptor, size) of the buffer ``token`` was issued for; NpuError on refusal."""
        with self._lock:
            fresh = self._connect(path)
            reply = self._exchange(token)
            if reply is None and not fresh:      # an old connection the driver had dropped
                self._connect(path)
                reply = self._exchange(token)
            if reply is None:
                raise NpuError(errno.ECONNRESET, "MEM_MAP", f"{path} closed the connection")
            result, size, fd = reply
            if result:
                self._disconnect()               # the driver closes the connection after an error reply
                hinted = ("MEM_MAP", -result) in uapi.LIMIT_HINTS
                raise NpuError(-result, "MEM_MAP", "" if hinted else "the driver refused the buffer hand-over")
            return fd, size

    def _connect(self, path: str) -> bool:
        """Connect unless connected to ``path``; True if a new connection was made."""
        if self._sock is not None and path == self._path:
            return False
        self._disconnect()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            # A blocking connect waits (up to SO_SNDTIMEO) while the driver's backlog is
            # full, as it is during a flood of other peers; a non-blocking one (Python's
            # timeout mode) would fail at once with EAGAIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(int(self.TIMEOUT_S), 0))
            sock.connect(path)
            sock.settimeout(self.TIMEOUT_S)
        except OSError as exc:
            sock.close()
            code = exc.errno or errno.EIO
            hint = uapi.LIMIT_HINTS.get(("MEM_MAP", code))
            raise NpuError(code, "MEM_MAP", f"connecting to {path}" + (f": {hint}" if hint else "")) from None
        self._sock, self._path = sock, path
        return True

    def _exchange(self, token: int) -> tuple[int, int, int] | None:
        """(result, size, descriptor or -1), or None if the driver had closed the connection."""
        sock = self._sock
        assert sock is not None, "_exchange follows _connect"
        try:
            sock.send(uapi.pack_handover_request(token), socket.MSG_NOSIGNAL)
        except (BrokenPipeError, ConnectionResetError):
            pass             # the driver closed the connection: a refusal it sent first (EACCES, EBUSY) is still read
        try:
            try:
                message, ancillary, flags, _ = sock.recvmsg(uapi.HANDOVER_REPLY.size, socket.CMSG_SPACE(_FD_SIZE),
                                                            socket.MSG_CMSG_CLOEXEC)
            except ConnectionResetError:     # reported before a reply still queued: read that
                message, ancillary, flags, _ = sock.recvmsg(uapi.HANDOVER_REPLY.size, socket.CMSG_SPACE(_FD_SIZE),
                                                            socket.MSG_CMSG_CLOEXEC)
        except (BrokenPipeError, ConnectionResetError):
            self._disconnect()
            return None
        except OSError as exc:                   # timeout included
            self._disconnect()
            raise NpuError(exc.errno or errno.ETIMEDOUT, "MEM_MAP", f"hand-over on {self._path}: {exc}") from None
        fds = [fd for level, kind, data in ancillary if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
               for fd in array.array("i", data[:len(data) - len(data) % _FD_SIZE])]
        fd = fds.pop() if len(fds) == 1 and not flags & socket.MSG_CTRUNC else -1
        for extra in fds:
            os.close(extra)
        try:
            if not message:
                self._disconnect()
                return None
            try:
                result, size = uapi.unpack_handover_reply(message)
            except ValueError as exc:
                self._disconnect()
                raise NpuError(errno.EPROTO, "MEM_MAP", str(exc)) from None
            if result:
                return result, size, -1
            if fd < 0:
                raise NpuError(errno.EMFILE, "MEM_MAP", "the buffer's descriptor did not arrive "
                                                        "(no descriptor free in this process?)")
            fd, kept = -1, fd
            return 0, size, kept
        finally:
            if fd >= 0:
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._disconnect()

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


_FD_SIZE = array.array("i").itemsize
_TIMEVAL = struct.Struct("ll")       # struct timeval: seconds, microseconds
