"""A daemon's pid file, trusted only while the daemon holds a lock on it.

A pid file alone lies once its daemon died by SIGKILL and the pid was reused: `start`
would say "already served" and `stop` would kill a bystander. So the daemon takes an
exclusive flock on its pid file for its whole life (the kernel drops it when the process
dies, however it dies), and readers believe the pid only while that lock is held.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


class AlreadyRunning(OSError):
    """Another live daemon holds the pid file."""


def acquire(path: Path) -> int:
    """Lock ``path`` for this process and write our pid into it; returns the fd to keep open
    for the daemon's lifetime (closing it releases the lock)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(f"{path}: held by a running daemon (pid {running_pid(path)})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def running_pid(path: Path) -> int | None:
    """The pid in ``path`` if the daemon that wrote it still holds its lock, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:          # locked: the daemon is alive
            try:
                return int(os.pread(fd, 32, 0).decode())
            except ValueError:
                return None
        return None                      # nobody holds it: a stale file
    finally:
        os.close(fd)
