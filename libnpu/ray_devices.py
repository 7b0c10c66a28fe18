"""Ray: the custom resource ``npu_emu`` and the device a task holding it uses.

Ray counts a custom resource but assigns no IDs for it (it does so only for its own
accelerators; ``"NPU"`` is Ray's name for Huawei's Ascend, which sets
``ASCEND_RT_VISIBLE_DEVICES``: hence a name of our own). Each node advertises as many
``npu_emu`` as it has devices (``ray start --resources "$(npu ray-resources)"``-style:
``node_resources``), so Ray never runs more tasks wanting one each than a node has
devices; a task then claims a free device of its node with ``claimed_device``: an
exclusive lock per device (``flock`` on a file of libnpu's own, never the driver's), held
for the ``with`` block, which sets ``NPU_VISIBLE_DEVICES`` (and restores it after). A
task killed mid-way releases its lock with its process.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from libnpu.portability import default_devroot

RESOURCE = "npu_emu"
VISIBLE = "NPU_VISIBLE_DEVICES"


def node_numbers(devroot: str | os.PathLike | None = None) -> list[int]:
    """The numbers N of the nodes ``npuN`` present in the devroot, sorted."""
    root = Path(devroot) if devroot else default_devroot()
    return sorted(int(p.name[3:]) for p in root.glob("npu[0-9]*") if p.name[3:].isdigit())


def node_resources(devroot: str | os.PathLike | None = None) -> dict[str, float]:
    """What this node advertises to Ray: ``{"npu_emu": <devices>}``."""
    return {RESOURCE: float(len(node_numbers(devroot)))}


def _lock_dir(root: Path) -> Path:
    """Where the claims on ``root``'s devices are: per user and devroot, in the temp dir."""
    key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"npu-emu-ray-{os.geteuid()}" / key
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


@contextlib.contextmanager
def claimed_device(devroot: str | os.PathLike | None = None) -> Iterator[int]:
    """Claim a device of this node no other task holds, for the block: its node number,
    also set as ``NPU_VISIBLE_DEVICES`` (so device 0 is it) and ``NPU_DEVROOT``. OSError
    EBUSY when every device is held (more tasks than the node advertised ``npu_emu``)."""
    root = Path(devroot) if devroot else default_devroot()
    locks = _lock_dir(root)
    for number in node_numbers(root):
        fd = os.open(locks / f"npu{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        saved = {name: os.environ.get(name) for name in (VISIBLE, "NPU_DEVROOT")}
        os.environ.update({VISIBLE: str(number), "NPU_DEVROOT": str(root)})
        try:
            yield number
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            os.close(fd)              # releases the lock
        return
    raise OSError(errno.EBUSY, f"every device of {root} is held by another task: ask Ray for "
                               f"resources={{'{RESOURCE}': 1}} per task, as many as the node has devices")
