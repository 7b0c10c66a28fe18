"""Uevents: the record the driver emits when a device appears, changes or goes.

A uevent is what the kernel broadcasts on its netlink socket: ACTION, DEVPATH,
SUBSYSTEM, DEVNAME, MAJOR, MINOR, SEQNUM plus extra keys (e.g. RESET_COUNT on a
"change" after a reset). Here the transport is an append-only log in a per-devroot
run directory, shared by every device daemon process:

    <runroot>/uevents.log   records, in the format `udevadm monitor --kernel --property`
                            prints: a header line, KEY=VALUE lines, a blank line
    <runroot>/uevents.seq   the last SEQNUM handed out (decimal text)

Writers take an flock on the seq file, bump SEQNUM and append the whole record with
one O_APPEND write(), so records from several processes never interleave and file
order equals SEQNUM order. `UeventMonitor` follows the log like `udevadm monitor`;
from the shell: `python -m kmd_fuse.udev.udevadm monitor|emit RUNROOT ...`.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LOG_NAME = "uevents.log"
SEQ_NAME = "uevents.seq"
# The kernel refuses uevents larger than its UEVENT_BUFFER_SIZE; we keep the same bound.
MAX_RECORD_BYTES = 2048
ACTIONS = ("add", "remove", "change", "move", "online", "offline", "bind", "unbind")
_KEY_RE = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_STD_KEYS = ("ACTION", "DEVPATH", "SUBSYSTEM", "DEVNAME", "MAJOR", "MINOR", "SEQNUM")
_HEADER_RE = re.compile(r"KERNEL\[(\d+\.\d+)\] (\S+)\s+(\S+) \((\S+)\)\Z")


class UeventError(Exception):
    """A malformed uevent, or the event log could not be written or read."""


@dataclass(frozen=True)
class Uevent:
    """One uevent. `devname` is relative to the devroot (kernel style: "npu0")."""

    action: str
    devpath: str
    subsystem: str
    devname: str | None = None
    major: int | None = None
    minor: int | None = None
    seqnum: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    # CLOCK_MONOTONIC seconds when the event was emitted (not a uevent property).
    timestamp: float | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UeventError(f"unknown ACTION {self.action!r} (one of {', '.join(ACTIONS)})")
        if not self.devpath.startswith("/") or self.devpath.endswith("/") or "//" in self.devpath:
            raise UeventError(f"DEVPATH must be an absolute sysfs path, got {self.devpath!r}")
        if not self.subsystem or not re.fullmatch(r"[A-Za-z0-9_.-]+", self.subsystem):
            raise UeventError(f"bad SUBSYSTEM {self.subsystem!r}")
        if self.devname is not None and (not self.devname or self.devname.startswith("/")
                                         or ".." in self.devname.split("/")):
            raise UeventError(f"DEVNAME must be relative to the devroot, got {self.devname!r}")
        if (self.major is None) != (self.minor is None):
            raise UeventError("MAJOR and MINOR go together")
        for key, value in self.extra.items():
            if not _KEY_RE.match(key) or key in _STD_KEYS:
                raise UeventError(f"bad extra uevent key {key!r}")
            _check_value(key, value)
        for key, value in (("DEVPATH", self.devpath), ("DEVNAME", self.devname or "")):
            _check_value(key, value)

    @property
    def kernel(self) -> str:
        """The kernel name of the device: the last DEVPATH component ("npu0")."""
        return self.devpath.rsplit("/", 1)[-1]

    def properties(self) -> dict[str, str]:
        """All properties in kernel order, as `udevadm monitor --property` lists them."""
        props = {"ACTION": self.action, "DEVPATH": self.devpath, "SUBSYSTEM": self.subsystem}
        if self.devname is not None:
            props["DEVNAME"] = self.devname
        if self.major is not None:
            props["MAJOR"] = str(self.major)
            props["MINOR"] = str(self.minor)
        if self.seqnum is not None:
            props["SEQNUM"] = str(self.seqnum)
        props.update(self.extra)
        return props

    def format(self) -> str:
        """The record as the log stores it and `udevadm monitor --kernel --property` shows it."""
        ts = self.timestamp if self.timestamp is not None else time.monotonic()
        lines = [f"KERNEL[{ts:.6f}] {self.action:<8} {self.devpath} ({self.subsystem})"]
        lines += [f"{k}={v}" for k, v in self.properties().items()]
        return "\n".join(lines) + "\n\n"

    @classmethod
    def parse(cls, record: str) -> Uevent:
        """Parse one record made by `format()` (the trailing blank line is optional)."""
        lines = record.rstrip("\n").split("\n")
        header = _HEADER_RE.match(lines[0])
        if not header:
            raise UeventError(f"bad uevent header line {lines[0]!r}")
        props: dict[str, str] = {}
        for line in lines[1:]:
            key, sep, value = line.partition("=")
            if not sep or not _KEY_RE.match(key):
                raise UeventError(f"bad uevent property line {line!r}")
            props[key] = value
        try:
            action, devpath, subsystem = props.pop("ACTION"), props.pop("DEVPATH"), props.pop("SUBSYSTEM")
            major = props.pop("MAJOR", None)
            minor = props.pop("MINOR", None)
            seq = props.pop("SEQNUM", None)
            return cls(action, devpath, subsystem, props.pop("DEVNAME", None),
                       int(major) if major is not None else None,
                       int(minor) if minor is not None else None,
                       int(seq) if seq is not None else None, props, float(header.group(1)))
        except KeyError as exc:
            raise UeventError(f"uevent record lacks {exc.args[0]}") from None
        except ValueError as exc:
            raise UeventError(f"bad number in uevent record: {exc}") from None


def _check_value(key: str, value: str) -> None:
    if "\n" in value or "\0" in value:
        raise UeventError(f"uevent value of {key} contains a newline or NUL")


def _log_paths(runroot: str | os.PathLike[str]) -> tuple[Path, Path]:
    root = Path(runroot)
    return root / LOG_NAME, root / SEQ_NAME


class UeventLog:
    """The writer side of a runroot's event log; keep one open per daemon process.

    `emit` costs a few system calls under a lock that every holder keeps for a few
    microseconds; if the lock stays busy past `lock_timeout` seconds (a writer stopped
    while holding it) it raises UeventError instead of stalling the caller's loop.
    """

    def __init__(self, runroot: str | os.PathLike[str], *, lock_timeout: float = 0.1) -> None:
        self.runroot = Path(runroot)
        self.runroot.mkdir(parents=True, exist_ok=True)
        log_path, seq_path = _log_paths(self.runroot)
        self.lock_timeout = lock_timeout
        self._seq_fd = os.open(seq_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            os.close(self._seq_fd)
            raise

    def close(self) -> None:
        """Close the log; further emits raise."""
        for fd in (self._seq_fd, self._log_fd):
            if fd >= 0:
                os.close(fd)
        self._seq_fd = self._log_fd = -1

    def __enter__(self) -> UeventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock(self) -> None:
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(self._seq_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UeventError(f"event log lock {self.runroot / SEQ_NAME} busy for "
                                      f"{self.lock_timeout}s; is a writer stopped?") from None
                time.sleep(0.0002)

    def emit(self, action: str, devpath: str, subsystem: str, *, devname: str | None = None,
             major: int | None = None, minor: int | None = None,
             extra: Mapping[str, object] | None = None) -> Uevent:
        """Assign the next SEQNUM and append the event; returns the event as logged."""
        if self._seq_fd < 0:
            raise UeventError("event log is closed")
        extras = {k: str(v) for k, v in (extra or {}).items()}
        # Validate (and bound the size) before taking a SEQNUM, so a bad event leaves no gap.
        size = len(Uevent(action, devpath, subsystem, devname, major, minor, 0, extras, 0.0).format().encode())
        if size + 40 > MAX_RECORD_BYTES:  # room for the real SEQNUM and timestamp digits
            raise UeventError(f"uevent of about {size} bytes exceeds {MAX_RECORD_BYTES}")
        self._lock()
        try:
            raw = os.pread(self._seq_fd, 32, 0).strip()
            try:
                seq = int(raw or b"0") + 1
            except ValueError:
                raise UeventError(f"corrupt SEQNUM file {self.runroot / SEQ_NAME}: {raw!r}") from None
            text = str(seq).encode()
            os.pwrite(self._seq_fd, text + b"\n", 0)  # SEQNUM only grows: no truncate needed
            event = Uevent(action, devpath, subsystem, devname, major, minor, seq, extras,
                           time.monotonic())
            data = event.format().encode()
            written = os.write(self._log_fd, data)
            if written != len(data):
                raise UeventError(f"short write to event log ({written} of {len(data)} bytes)")
        finally:
            fcntl.flock(self._seq_fd, fcntl.LOCK_UN)
        return event


def emit(runroot: str | os.PathLike[str], action: str, devpath: str, subsystem: str,
         **kwargs: object) -> Uevent:
    """Open the runroot's log, emit one event, close it (daemons should keep a UeventLog)."""
    with UeventLog(runroot) as log:
        return log.emit(action, devpath, subsystem, **kwargs)  # type: ignore[arg-type]


class UeventMonitor:
    """Follows a runroot's event log; iterate it to receive events as they are logged.

    Starts at the end of the log ("now") unless `from_start` is set or `since_seqnum`
    asks for every event with a larger SEQNUM. Iteration blocks until the next event;
    with `timeout` set it stops after that many seconds without one.
    """

    def __init__(self, runroot: str | os.PathLike[str], *, from_start: bool = False,
                 since_seqnum: int | None = None, subsystem: str | None = None,
                 timeout: float | None = None, poll_interval: float = 0.02) -> None:
        self.log_path, _ = _log_paths(runroot)
        self.subsystem = subsystem
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.since_seqnum = since_seqnum
        self._buf = b""
        self._fd = -1
        self._ino: int | None = None
        self._pos = 0
        if not (from_start or since_seqnum is not None):
            try:
                st = os.stat(self.log_path)
                self._ino, self._pos = st.st_ino, st.st_size
            except FileNotFoundError:
                pass  # no log yet: everything written later is "new"

    def close(self) -> None:
        """Stop following the log."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> UeventMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Uevent]:
        return self

    def __next__(self) -> Uevent:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            event = self._next_buffered()
            if event is not None:
                return event
            if not self._read_more():
                if deadline is not None and time.monotonic() >= deadline:
                    raise StopIteration
                time.sleep(self.poll_interval)

    def _next_buffered(self) -> Uevent | None:
        while True:
            end = self._buf.find(b"\n\n")
            if end < 0:
                return None
            record, self._buf = self._buf[:end + 1], self._buf[end + 2:]
            event = Uevent.parse(record.decode())
            if self.since_seqnum is not None and (event.seqnum or 0) <= self.since_seqnum:
                continue
            if self.subsystem is not None and event.subsystem != self.subsystem:
                continue
            return event

    def _read_more(self) -> bool:
        if self._fd < 0:
            try:
                self._fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return False
            st = os.fstat(self._fd)
            if self._ino is not None and st.st_ino != self._ino:
                self._pos = 0  # the log was recreated after we looked
            self._ino = st.st_ino
        if os.fstat(self._fd).st_size < self._pos:
            self._pos, self._buf = 0, b""  # truncated: start over
        chunk = os.pread(self._fd, 1 << 16, self._pos)
        if not chunk:
            try:
                replaced = os.stat(self.log_path).st_ino != self._ino
            except FileNotFoundError:
                replaced = False
            if replaced:  # a new log took the old one's place: read it from its start
                os.close(self._fd)
                self._fd, self._ino, self._pos, self._buf = -1, None, 0, b""
            return False
        self._pos += len(chunk)
        self._buf += chunk
        return True


def monitor(runroot: str | os.PathLike[str], **kwargs: object) -> UeventMonitor:
    """A blocking iterator over events of a runroot (see UeventMonitor for options)."""
    return UeventMonitor(runroot, **kwargs)  # type: ignore[arg-type]
