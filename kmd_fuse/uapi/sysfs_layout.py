"""Where the driver serves its nodes and attribute trees, as both sides must agree.

The driver (kmd_fuse.paths, npu-kmd) chooses a devroot's sysroot by this rule and
records it in ``<devroot>/.npu-sysroot``; tools (npu smi, libnpu) find it by the same
rule.  One copy, here in the shared interface, so the two can never drift apart.
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DEVROOT = "/dev"
SYSROOT_FOR_DEV = "/run/npu-emu/sys"    # the real /sys is the kernel's: the driver never mounts into it
SYSROOT_MARKER = ".npu-sysroot"         # in the devroot: the sysroot its daemons serve (written by npu-kmd start)
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


def recorded_sysroot(root: str | os.PathLike) -> str | None:
    """The sysroot `npu-kmd start` recorded in the devroot, if any."""
    try:
        with open(os.path.join(root, SYSROOT_MARKER), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


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
