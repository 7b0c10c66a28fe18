"""Where a device's node, state and memories live, and the checks that make it safe
for root (or, in rootless mode, the user running the driver) to write there.

The state directories sit on a world-writable tmpfs (/dev/shm): any user can create
`/dev/shm/npu-emu` before the driver first runs, or put a symlink where a device's state
directory goes. So every state directory is created by the daemon's own user, and refused
(StateDirError, with what is wrong and how to fix it) when it is a symlink, belongs to
someone else, or is writable by anyone else; once it passes, nobody else can plant
anything inside it.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from kmd_fuse.uapi.sysfs_layout import SUBSYSTEM, SYSROOT_MARKER, class_dir, sysroot_rule  # noqa: F401 (SYSROOT_MARKER: for npu-kmd)
from kmd_fuse.uapi.sysfs_layout import devroot as _devroot

NPU_MAJOR = 261      # like the accel subsystem's major
ROOT_SHM_ROOT = Path("/dev/shm/npu-emu")


def state_root(uid: int | None = None, runtime_dir: str | None = None) -> Path:
    """Where the state directories of the driver's user live: $NPU_SHM_ROOT if set; root's
    /dev/shm/npu-emu; for a normal user $XDG_RUNTIME_DIR/npu-emu when that directory is
    theirs and private, else /dev/shm/npu-emu-<uid> (checked like every state directory
    when it is created: owned by that user, writable by nobody else, no symlink)."""
    env = os.environ.get("NPU_SHM_ROOT")
    if env:
        return Path(env)
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return ROOT_SHM_ROOT
    runtime = os.environ.get("XDG_RUNTIME_DIR") if runtime_dir is None else runtime_dir
    if runtime and os.path.isabs(runtime):
        try:
            _check_dir(Path(runtime), uid)
            return Path(runtime) / "npu-emu"
        except StateDirError:
            pass          # another user's (e.g. root's, kept by sudo): not a place for ours
    return Path(f"/dev/shm/npu-emu-{uid}")


def devroot(value: str | os.PathLike | None = None) -> Path:
    """The directory holding the nodes, resolved (the rule: uapi.sysfs_layout.devroot)."""
    return _devroot(value).resolve()


sysroot = sysroot_rule   # the attribute tree's root for a devroot (uapi.sysfs_layout has the rule)


def node_path(root: Path, index: int) -> Path:
    return root / f"npu{index}"


def device_dir(sys_root: Path, index: int) -> Path:
    """Where a device's attribute tree is mounted: <sysroot>/class/npu/npuN."""
    return Path(class_dir(sys_root)) / f"npu{index}"


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
    """The daemon's own FUSE mount (node + attribute tree), bind-mounted (rootless: symlinked)
    to where users look."""
    return state_dir(root) / f".fuse-npu{index}"


def ready_file(root: Path, index: int) -> Path:
    """Exists from the moment the device is fully announced (mounts, uevent, udev rules)
    until the daemon has announced its removal."""
    return state_dir(root) / f"npu{index}.ready"


def udev_db(root: Path) -> Path:
    return state_dir(root) / "udev"


def log_file(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}.log"


class StateDirError(OSError):
    """A state directory that is not safe to use (the message says why and what to do)."""


def _check_dir(path: Path, uid: int) -> None:
    """StateDirError unless ``path`` is a real directory of ``uid`` that nobody else may write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise StateDirError(f"{path} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise StateDirError(f"{path} is a symbolic link: refusing to follow it (remove it and start again)")
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"{path} is not a directory (remove it and start again)")
    if st.st_uid != uid:
        raise StateDirError(f"{path} belongs to uid {st.st_uid}, not to uid {uid} who runs the driver: "
                            "refusing to use it (remove it and start again)")
    if st.st_mode & 0o022:
        raise StateDirError(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): refusing "
                            "to use it (remove it and start again)")


def _ensure_dir(path: Path, mode: int) -> None:
    """Create ``path`` (owned by us, ``mode``) unless it exists, then check it is ours and private."""
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)          # mkdir's mode is masked by the umask
    except FileExistsError:
        pass
    _check_dir(path, os.geteuid())


SHM_ROOT = state_root()


def private_state_dir(root: Path) -> Path:
    """The devroot's state directory, created if needed and checked (StateDirError otherwise):
    the shared-memory root and the state directory are real directories of the user the
    driver runs as, writable by nobody else (mode 0711: clients reach their buffers by name)."""
    _ensure_dir(SHM_ROOT, 0o711)
    state = state_dir(root)
    _ensure_dir(state, 0o711)
    return state


def check_state_dir(root: Path) -> Path | None:
    """The devroot's state directory if it exists and is safe, None if it does not exist;
    StateDirError when it exists but is not safe (commands must then touch nothing in it)."""
    state = state_dir(root)
    if not os.path.lexists(state):
        return None
    _check_dir(SHM_ROOT, os.geteuid())
    _check_dir(state, os.geteuid())
    return state


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a small file without following a symlink at ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def mount_source(root: Path, index: int) -> str:
    """The source name of a device's FUSE mount (and so of its bind mounts) in /proc/mounts:
    unique per devroot and index, so a command can tell its own mounts from another's."""
    return f"npu-emu:{state_dir(root).name}.{index}"


def mounted_source(path: Path) -> str | None:
    """The source of the topmost mount at ``path``, or None when nothing is mounted there."""
    target, source = str(path), None
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            dash = fields.index("-")
            if _unescape(fields[4]) == target:
                source = _unescape(fields[dash + 2])
    return source


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes (\\040 for a space, ...) in a mountinfo field."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(path: Path) -> bool:
    return mounted_source(path) is not None
