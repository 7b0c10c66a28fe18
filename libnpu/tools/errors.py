"""One line per user error: what went wrong and the next step to take.

The ``npu`` CLI turns every exception a command raises into one line on stderr (the
traceback only with ``--debug`` or ``NPU_DEBUG=1``).  The device errors a user meets
first (no device, a driver that died, a devroot that does not exist, a node they may not
open) are recognised here and given the command that fixes them.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from kmd_fuse.uapi import DRIVER_GONE

__all__ = ["OneLineParser", "debug_wanted", "device_hint", "start_command"]


def debug_wanted(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether ``--debug`` (anywhere in ``argv``) or NPU_DEBUG=1 asks for tracebacks, and
    ``argv`` without it."""
    rest = [a for a in argv if a != "--debug"]
    return len(rest) != len(argv) or os.environ.get("NPU_DEBUG", "") not in ("", "0"), rest


def start_command(devroot: str | os.PathLike) -> str:
    """The command that serves a device under ``devroot``."""
    return f"npu-kmd start --devroot {devroot}"


def _is_node(path: str | None, devroot: Path) -> bool:
    if not path:
        return False
    p = Path(path)
    return p.name.startswith("npu") and p.name[3:].isdigit() and p.parent == devroot


def device_hint(exc: BaseException, devroot: Path) -> str | None:
    """The one-line explanation of a device error on a node under ``devroot``, or None
    when ``exc`` is not one."""
    if not isinstance(exc, OSError):
        return None
    path = getattr(exc, "filename", None)
    if path is None and _is_node(str(exc).split(":")[0], devroot):   # NpuError("<node>: ...")
        path = str(exc).split(":")[0]
    if not _is_node(path, devroot):
        return None
    start = start_command(devroot)
    code = exc.errno
    if code == errno.ENOTDIR or code == errno.ENOENT and devroot.exists() and not devroot.is_dir():
        return f"{devroot} is not a directory (wrong --devroot or NPU_DEVROOT?)"
    if code == errno.ENOENT and not devroot.is_dir():
        return f"{devroot} does not exist (wrong --devroot or NPU_DEVROOT?); to serve a device there: {start}"
    if code == errno.ENOENT:
        return f"no device {path}: no driver serves {devroot}; start one with: {start}"
    if code == errno.ECANCELED and not _answers(path):     # cancelled by a driver that then went away
        code = errno.ENOTCONN
    if code in DRIVER_GONE:
        return (f"{path}: the driver is down ({os.strerror(code)}); restart it with: "
                f"npu-kmd stop --devroot {devroot} && {start}")
    if code in (errno.EACCES, errno.EPERM):
        return (f"{path}: permission denied; the node belongs to {_owner(Path(path))}: join its group, "
                f"or start a device of your own with: npu-kmd start --devroot <a directory of yours>")
    return None


def _answers(node: str) -> bool:
    """Whether a driver still serves ``node``: the node is on the driver's file system, not
    its devroot's (a stopping driver unmounts it first, leaving the placeholder file; a dead
    one's mount answers ENOTCONN; a stopped one's node is gone)."""
    try:
        return os.stat(node).st_dev != os.stat(os.path.dirname(node)).st_dev
    except OSError:
        return False


def _owner(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "another user"
    import grp
    import pwd
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} (mode {st.st_mode & 0o777:o})"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the problem and where the help is)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
