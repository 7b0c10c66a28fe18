"""Request/reply frames over an open device node (the user side of the uapi).

Like ioctls on one file descriptor, requests from several threads may be in
flight at once (pread/pwrite, not read/write: the kernel serializes read() and
write() of threads sharing a file on its position lock, so a read held in the
driver would stall the others' writes; the driver ignores offsets): each is one
write() of a frame tagged with a sequence number, and replies come back in
completion order.  One thread at a time reads; it
routes each reply to the thread that owns its sequence number.  A reply that is
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
import threading

from kmd_fuse import uapi
from kmd_fuse.uapi import NpuError


class DeviceFile:
    """An open /dev/npuN: one driver context, safe to share between threads."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            code = exc.errno or errno.EIO
            if ("OPEN", code) not in uapi.LIMIT_HINTS:
                raise
            raise NpuError(code, "OPEN", f"{self.path}: {uapi.LIMIT_HINTS['OPEN', code]}") from None
        self._seq = itertools.count(1)
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, bytes] = {}   # seq -> frame read by another thread
        self._reading = False
        self._abandoned: set[int] = set()     # seqs whose requester stopped waiting (interrupted)

    def close(self) -> None:
        with self._write_lock, self._cond:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self._cond.notify_all()

    def request(self, cmd: int, payload=None):
        """Send one request and return its reply payload (raises NpuError on -errno)."""
        if payload is None:
            payload = uapi.new_payload(cmd)
        return self.request_body(cmd, uapi.ffi.buffer(payload)[:])

    def request_body(self, cmd: int, body: bytes):
        """``request`` with the payload given as bytes (e.g. prepared once for many requests)."""
        command = uapi.COMMANDS[cmd]
        seq = next(self._seq) & 0xFFFFFFFF
        frame = uapi.pack_frame_body(cmd, seq, body)
        with self._write_lock:
            if self.fd < 0:
                raise NpuError(errno.EBADF, command.name, "device is closed")
            try:
                os.pwrite(self.fd, frame, 0)
            except OSError as exc:
                raise NpuError(exc.errno or errno.EIO, command.name, "request refused") from None
        try:
            reply = self._await_reply(seq, command.name)
        except BaseException:
            with self._cond:                    # e.g. KeyboardInterrupt: drop the reply when it comes
                self._abandoned.add(seq)
            raise
        _, reply_cmd, _, _, result, _ = uapi.header_fields(reply)
        if reply_cmd != cmd:
            raise NpuError(errno.EPROTO, command.name, f"reply for command {reply_cmd:#x} with our seq {seq}")
        if result:
            error = NpuError(-result, command.name)
            error.payload = uapi.unpack_payload(cmd, reply, uapi.HDR_SIZE) if len(reply) > uapi.HDR_SIZE else None
            raise error
        return uapi.unpack_payload(cmd, reply, uapi.HDR_SIZE)

    def _await_reply(self, seq: int, name: str) -> bytes:
        with self._cond:
            while seq not in self._replies:
                if self.fd < 0:
                    raise NpuError(errno.EBADF, name, "device closed while waiting for the reply")
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading = True            # our turn to read for everyone
                self._cond.release()
                try:
                    frame = self._read_frame(name)
                finally:
                    self._cond.acquire()
                    self._reading = False
                    self._cond.notify_all()
                got = uapi.header_fields(frame)[2]
                if got in self._abandoned:
                    self._abandoned.discard(got)
                else:
                    self._replies[got] = frame
            return self._replies.pop(seq)

    def _read_frame(self, name: str) -> bytes:
        while True:
            try:
                return os.pread(self.fd, uapi.NPU_MAX_FRAME, 0)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise NpuError(exc.errno or errno.EIO, name, "reading the reply failed") from None


class BufferSocket:
    """The device's buffer hand-over socket, as one client uses it.

    MEM_MAP answers with a token and this socket's path; ``receive`` trades the
    token for the buffer's sealed memfd (SCM_RIGHTS).  One connection per open
    device, made on first use and remade once if the driver dropped it (it drops
    idle ones); thread-safe.  After anything but a clean reply the connection is
    closed, so a late reply can never be taken for the next request's."""

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
                if result == -errno.EBUSY:       # the driver closes it after this reply
                    self._disconnect()
                raise NpuError(-result, "MEM_MAP", "the driver refused the buffer hand-over")
            return fd, size

    def _connect(self, path: str) -> bool:
        """Connect unless connected to ``path``; True if a new connection was made."""
        if self._sock is not None and path == self._path:
            return False
        self._disconnect()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        sock.settimeout(self.TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise NpuError(exc.errno or errno.EIO, "MEM_MAP", f"connecting to {path}") from None
        self._sock, self._path = sock, path
        return True

    def _exchange(self, token: int) -> tuple[int, int, int] | None:
        """(result, size, descriptor or -1), or None if the driver had closed the connection."""
        sock = self._sock
        assert sock is not None, "_exchange follows _connect"
        try:
            sock.send(uapi.pack_handover_request(token), socket.MSG_NOSIGNAL)
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
