"""Which devices a devroot serves and whether each is healthy, as schedulers' agents
(the CDI generator, the Kubernetes device plugin) see them.

Discovery reads the attribute trees (``<sysroot>/class/npu/npuN``, as Intel's NPU plugin
scans ``/sys/class/accel``); health is the daemon's: a device is healthy while its daemon
holds its pid file's lock and has announced the device (the ready file), so a stopped or
dead daemon turns it unhealthy at once, without a round trip to the node (which a hung
daemon would not answer within any useful time).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kmd_fuse import paths, pidfile
from kmd_fuse.uapi.sysfs_layout import class_dir, recorded_sysroot


@dataclass(frozen=True)
class ServedDevice:
    """Device ``npu<index>`` of a devroot: its node, its hand-over socket (every client of
    the node needs it for MEM_MAP) and its health."""
    index: int
    node: Path
    socket: Path
    healthy: bool


def sysroot_for(root: Path, value: str | None = None) -> Path:
    """The sysroot a devroot's daemons serve: argument, else what `start` recorded, else the rule."""
    return paths.sysroot(root, value or recorded_sysroot(root))


def device_numbers(sys_root: Path) -> list[int]:
    """The numbers N of the attribute trees ``<sysroot>/class/npu/npuN`` present, sorted."""
    try:
        names = os.listdir(class_dir(sys_root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(name[3:]) for name in names if name.startswith("npu") and name[3:].isdigit())


def is_healthy(root: Path, index: int) -> bool:
    """The device's daemon runs and has announced the device."""
    return pidfile.running_pid(paths.pid_file(root, index)) is not None and paths.ready_file(root, index).exists()


def served_devices(root: Path, sys_root: Path | None = None) -> list[ServedDevice]:
    """Every device with an attribute tree under the devroot's sysroot, with its health."""
    sys_root = sys_root or sysroot_for(root)
    return [served_device(root, index) for index in device_numbers(sys_root)]


def served_device(root: Path, index: int) -> ServedDevice:
    """Device ``npu<index>`` of the devroot as it stands now."""
    return ServedDevice(index, paths.node_path(root, index), paths.handover_socket(root, index),
                        is_healthy(root, index))
