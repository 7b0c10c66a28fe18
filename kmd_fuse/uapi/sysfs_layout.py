"""Where the driver serves its nodes and attribute trees, as both sides must agree.

The driver (kmd_fuse.paths, npu-kmd) chooses a devroot's sysroot by this rule and
records it in ``<devroot>/.npu-sysroot``, and where it keeps the devroot's state (pid
files, the hand-over socket, the chip's bus directory) in ``<devroot>/.npu-state``; tools
(npu smi, libnpu, a CDI generator) find both by the same rules. One copy, here in the
shared interface, so the two can never drift apart.

A record is believed only if nobody but the devroot's owner could have written it: the
devroot is a real directory writable by its owner alone, and the record a regular file
(not a link) of that owner. Another user can then neither plant nor change one.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

DEFAULT_DEVROOT = "/dev"
SYSROOT_FOR_DEV = "/run/npu-emu/sys"    # the real /sys is the kernel's: the driver never mounts into it
SYSROOT_MARKER = ".npu-sysroot"         # in the devroot: the sysroot its daemons serve (written by npu-kmd start)
STATE_MARKER = ".npu-state"             # in the devroot: its state directory (written by npu-kmd start)
SUBSYSTEM = "npu"


def devroot(value: str | os.PathLike | None = None) -> Path:
    """The directory holding the nodes: argument, else $NPU_DEVROOT, else /dev (not resolved)."""
    return Path(value or os.environ.get("NPU_DEVROOT") or DEFAULT_DEVROOT)


def sysroot_rule(root: Path, value: str | os.PathLike | None = None) -> Path:
    """The attribute tree's root for a (resolved) devroot: argument, else $NPU_SYSROOT, else
    /run/npu-emu/sys for /dev, `<parent>/sys` for another devroot named `dev`, and
    `<parent>/<name>.sys` for any other name (sibling devroots never share a tree)."""
    if value or os.environ.get("NPU_SYSROOT"):
        return Path(value or os.environ["NPU_SYSROOT"]).resolve()
    if root == Path(DEFAULT_DEVROOT):
        return Path(SYSROOT_FOR_DEV)
    return root.parent / ("sys" if root.name == "dev" else f"{root.name}.sys")


def read_record(root: str | os.PathLike, name: str) -> str | None:
    """The absolute path recorded in ``<root>/<name>`` if the record is to be believed (see
    the module doc), else None."""
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        devroot = os.fstat(dir_fd)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        record = os.fstat(fd)
        if devroot.st_mode & 0o022 or not stat.S_ISREG(record.st_mode) or record.st_uid != devroot.st_uid:
            return None
        text = f.read(4096).decode("utf-8", errors="replace").strip()
    return text if os.path.isabs(text) and "\n" not in text else None


def recorded_sysroot(root: str | os.PathLike) -> str | None:
    """The sysroot `npu-kmd start` recorded in the devroot, if any."""
    return read_record(root, SYSROOT_MARKER)


def recorded_state_dir(root: str | os.PathLike) -> str | None:
    """The state directory `npu-kmd start` recorded in the devroot, if any (the driver's
    user still checks it is theirs before using it)."""
    return read_record(root, STATE_MARKER)


def default_sysroot(root: str | os.PathLike) -> str:
    """The attribute tree a tool should read for a devroot: $NPU_SYSROOT, else the sysroot
    `npu-kmd start` recorded, else what ``sysroot_rule`` gives."""
    if os.environ.get("NPU_SYSROOT"):
        return os.environ["NPU_SYSROOT"]
    resolved = os.path.realpath(root)
    return recorded_sysroot(resolved) or str(sysroot_rule(Path(resolved)))


def class_dir(sysroot: str | os.PathLike) -> str:
    """<sysroot>/class/npu: one directory per device, npuN."""
    return os.path.join(sysroot, "class", SUBSYSTEM)
