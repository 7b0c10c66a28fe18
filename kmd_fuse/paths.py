"""Where a device's node, state and memories live."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

DEFAULT_DEVROOT = "/dev"
SYSROOT_FOR_DEV = Path("/run/npu-emu/sys")   # the real /sys is the kernel's: never mount into it
SYSROOT_MARKER = ".npu-sysroot"              # in the devroot: the sysroot its daemons serve (for tools)
NPU_MAJOR = 261      # like the accel subsystem's major
SUBSYSTEM = "npu"
SHM_ROOT = Path(os.environ.get("NPU_SHM_ROOT", "/dev/shm/npu-emu"))


def devroot(value: str | os.PathLike | None = None) -> Path:
    """The directory holding the nodes: argument, else $NPU_DEVROOT, else /dev."""
    return Path(value or os.environ.get("NPU_DEVROOT") or DEFAULT_DEVROOT).resolve()


def sysroot(root: Path, value: str | os.PathLike | None = None) -> Path:
    """The attribute tree's root for a devroot: argument, else $NPU_SYSROOT, else
    `<parent of devroot>/sys`, or /run/npu-emu/sys when the devroot is /dev."""
    if value or os.environ.get("NPU_SYSROOT"):
        return Path(value or os.environ["NPU_SYSROOT"]).resolve()
    return SYSROOT_FOR_DEV if root == Path(DEFAULT_DEVROOT) else root.parent / "sys"


def node_path(root: Path, index: int) -> Path:
    return root / f"npu{index}"


def device_dir(sys_root: Path, index: int) -> Path:
    """Where a device's attribute tree is mounted: <sysroot>/class/npu/npuN."""
    return sys_root / "class" / SUBSYSTEM / f"npu{index}"


def devpath(index: int) -> str:
    """The device's sysfs DEVPATH, as its uevents carry it."""
    return f"/devices/platform/npu-emu.{index}/{SUBSYSTEM}/npu{index}"


def state_dir(root: Path) -> Path:
    """Per-devroot state on tmpfs: pid files, logs and each device's bus directory."""
    key = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    return SHM_ROOT / key


def bus_dir(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}"


def pid_file(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}.pid"


def handover_socket(root: Path, index: int) -> Path:
    """The device's buffer hand-over socket (MEM_MAP tokens traded for memfds)."""
    return state_dir(root) / f"npu{index}.sock"


def fuse_dir(root: Path, index: int) -> Path:
    """The daemon's own FUSE mount (node + attribute tree), bind-mounted to where users look."""
    return state_dir(root) / f".fuse-npu{index}"


def ready_file(root: Path, index: int) -> Path:
    """Exists from the moment the device is fully announced (mounts, uevent, udev rules)
    until the daemon has announced its removal."""
    return state_dir(root) / f"npu{index}.ready"


def udev_db(root: Path) -> Path:
    return state_dir(root) / "udev"


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
