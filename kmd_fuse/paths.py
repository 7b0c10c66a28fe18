"""Where a device's node, state and memories live."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

DEFAULT_DEVROOT = "/dev"
SHM_ROOT = Path(os.environ.get("NPU_SHM_ROOT", "/dev/shm/npu-emu"))


def devroot(value: str | os.PathLike | None = None) -> Path:
    """The directory holding the nodes: argument, else $NPU_DEVROOT, else /dev."""
    return Path(value or os.environ.get("NPU_DEVROOT") or DEFAULT_DEVROOT).resolve()


def node_path(root: Path, index: int) -> Path:
    return root / f"npu{index}"


def state_dir(root: Path) -> Path:
    """Per-devroot state on tmpfs: pid files, logs and each device's bus directory."""
    key = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    return SHM_ROOT / key


def bus_dir(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}"


def pid_file(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}.pid"


def log_file(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}.log"


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            mountpoint = line.split()[1].replace("\\040", " ")
            if mountpoint == target:
                return True
    return False
