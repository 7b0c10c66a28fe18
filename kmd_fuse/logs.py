"""The driver's log, bounded: it lives on tmpfs (RAM), and other users can make the
driver write to it (a refused request is logged), so it must never grow without end.

`npu-kmd start` points each daemon's stdout and stderr at its log file (opened
O_APPEND); the chip's processes inherit them. ``CappedLog`` writes the daemon's records
there and, once the file reaches half of the cap, copies it to ``<log>.1`` (replacing
the older copy) and truncates it in place (logrotate's copytruncate): every descriptor
on the file - the daemon's, the chip's, a traceback printed by the interpreter - keeps
writing to the live log, and the two files together hold about ``max_bytes`` at most.
Lines written between the copy and the truncation are lost (a few microseconds).

Refusals of other users' requests are also rate-limited where they happen
(handover.RefusalLog), so the cap is a last bound, not the first.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

DEFAULT_MAX_BYTES = 8 << 20        # the live log and its one older copy together
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class CappedLog(logging.StreamHandler):
    """Records to ``stream``, an O_APPEND file at ``path``, kept under ``max_bytes`` with its copy."""

    def __init__(self, path: Path, stream, max_bytes: int = DEFAULT_MAX_BYTES):
        super().__init__(stream)
        self.path = path
        self.max_bytes = max_bytes

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        try:
            if os.fstat(self.stream.fileno()).st_size >= self.max_bytes // 2:
                self.rotate()
        except OSError:
            self.handleError(record)

    def rotate(self) -> None:
        """Keep the log's content as ``<log>.1`` and empty the log, in place."""
        self.flush()
        shutil.copyfile(self.path, self.path.with_name(self.path.name + ".1"))
        os.ftruncate(self.stream.fileno(), 0)


def setup(path: Path | None, level: str = "INFO", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Send the daemon's log records to stderr, capped when stderr is the log at ``path``
    (as `npu-kmd start` sets it up); to a terminal or any other file, uncapped."""
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    if path is not None and _same_file(sys.stderr.fileno(), path):
        handler = CappedLog(path, sys.stderr, max_bytes)
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)
