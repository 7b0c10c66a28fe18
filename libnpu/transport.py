"""Request/reply frames over an open device node (the user side of the uapi).

One request is outstanding per open file; ``DeviceFile.request`` holds a lock
from write to read, so threads sharing a device take turns.  A reply that is not
ready at once (WAIT, RESET) is read in a loop: the driver holds each read()
for at most ~50 ms, then fails it with EAGAIN, so a signal or a SIGKILL
always gets through quickly.  (poll() works too; it costs one more trip.)
"""
from __future__ import annotations

import errno
import itertools
import os
import threading

from kmd_fuse import uapi
from kmd_fuse.uapi import NpuError


class DeviceFile:
    """An open /dev/npuN: one driver context."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._owed = False

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def request(self, cmd: int, payload=None):
        """Send one request and return its reply payload (raises NpuError on -errno)."""
        command = uapi.COMMANDS[cmd]
        if payload is None:
            payload = uapi.new_payload(cmd)
        seq = next(self._seq) & 0xFFFFFFFF
        frame = uapi.pack_frame(cmd, seq, payload)
        with self._lock:
            if self.fd < 0:
                raise NpuError(errno.EBADF, command.name, "device is closed")
            if self._owed:                 # an interrupted request's reply is still due
                self._read_reply(command.name)
                self._owed = False
            try:
                os.write(self.fd, frame)
            except OSError as exc:
                raise NpuError(exc.errno, command.name, "request refused") from None
            self._owed = True
            reply = self._read_reply(command.name)
            self._owed = False
        hdr = uapi.unpack_header(reply)
        if hdr.cmd != cmd or hdr.seq != seq:
            raise NpuError(errno.EPROTO, command.name, f"reply for command {hdr.cmd:#x} seq {hdr.seq}")
        body = reply[uapi.HDR_SIZE:]
        if hdr.result:
            error = NpuError(-hdr.result, command.name)
            error.payload = uapi.unpack_payload(cmd, body) if body else None
            raise error
        return uapi.unpack_payload(cmd, body)

    def _read_reply(self, name: str) -> bytes:
        """Read the reply; the driver holds a read at most ~50 ms and answers
        EAGAIN if the reply is not ready by then, so we loop (interruptible)."""
        while True:
            try:
                return os.read(self.fd, uapi.NPU_MAX_FRAME)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise NpuError(exc.errno, name, "reading the reply failed") from None
