"""Where a device's node, state and memories live, and the checks that make it safe
for root (or, in rootless mode, the user running the driver) to write there.

The driver works in places other users share: the state directories sit on a
world-writable tmpfs (/dev/shm), and a devroot made with `mktemp -d` puts the default
sysroot `<devroot>.sys` in /tmp. Anyone may create a name there first: `/dev/shm/npu-emu`,
a symlink where a state directory goes, `<devroot>.sys/class/npu/npu0` as a link to
a directory of their choice. So every directory the driver creates, writes in or mounts
on is reached with open_dir: from / one name at a time, no link followed, each directory
root's or the driver's user's and writable by nobody else (sticky ones like /tmp
excepted on the way), made with mkdirat relative to a checked descriptor, and refused
(UnsafePathError, saying what is wrong and what to do) otherwise. Once a path passes, no
other user can change what it leads to.

A state root another user made first is not a dead end: the devroot's state goes to a
fresh directory of our own, and `<devroot>/.npu-state` records where (private_state_dir).
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from kmd_fuse.uapi.sysfs_layout import (  # noqa: F401 (the markers: for npu-kmd)
    STATE_MARKER,
    SUBSYSTEM,
    SYSROOT_MARKER,
    class_dir,
    recorded_state_dir,
    sysroot_rule,
)
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


def mount_record(root: Path, index: int) -> Path:
    """What the device's daemon mounted (kmd_fuse.mounts.MountRecord)."""
    return state_dir(root) / f"npu{index}.mounts"


def udev_db(root: Path) -> Path:
    return state_dir(root) / "udev"


def log_file(root: Path, index: int) -> Path:
    return state_dir(root) / f"npu{index}.log"


class UnsafePathError(OSError):
    """A path the driver would create, write or mount on, but which another user could
    redirect or change (the message says which and why, and what to do)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


class StateDirError(UnsafePathError):
    """A state directory that is not safe to use (the message says why and what to do)."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(path: Path, create_mode: int | None = None, private: bool = True, hint: str = "",
             uid: int | None = None) -> int:
    """A descriptor (O_DIRECTORY) of the absolute ``path``, reached from / one name at a time
    with openat(O_NOFOLLOW), so no symbolic link is followed; with ``create_mode``, missing
    directories are made with mkdirat (that mode, whatever the umask). UnsafePathError,
    saying which directory and why (and ``hint``: what to do), unless every directory on the
    way belongs to root or to the driver's user and is writable by nobody else, sticky
    directories such as /tmp excepted (others add names there but cannot move ours): once
    that holds, no other user can change what the path leads to. ``private``: the directory
    itself may not be a sticky shared one either (the driver puts names in it by path).
    ``uid``: the driver's user, if not this process's."""
    if not path.is_absolute():
        raise ValueError(f"{path}: not an absolute path")
    euid = os.geteuid() if uid is None else uid
    fd = os.open("/", _DIR_FLAGS)
    here = Path("/")
    try:
        for i, name in enumerate(path.parts[1:], 2):
            here = here / name
            made = False
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create_mode is None:
                    raise FileNotFoundError(errno.ENOENT, f"{here} does not exist") from None
                try:
                    os.mkdir(name, create_mode, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass          # made meanwhile: opened and checked like any other
                child = _open_checked_kind(fd, name, here, hint)
            except NotADirectoryError:
                child = _open_checked_kind(fd, name, here, hint)
            os.close(fd)
            fd = child
            if made and create_mode is not None:
                os.fchmod(fd, create_mode)        # mkdir's mode is masked by the umask
            _check_fd(fd, here, euid, shared_ok=not private or i <= len(path.parts) - 1, hint=hint)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_checked_kind(parent: int, name: str, here: Path, hint: str) -> int:
    """Open ``name`` as a directory, or say why it is not one (a symlink, another file)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except NotADirectoryError:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        what = "a symbolic link: refusing to follow it" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise UnsafePathError(errno.ENOTDIR, _with_hint(f"{here} is {what}", hint)) from None


def _with_hint(message: str, hint: str) -> str:
    return f"{message} ({hint})" if hint else message


def _check_fd(fd: int, here: Path, euid: int, shared_ok: bool, hint: str) -> None:
    st = os.fstat(fd)
    if st.st_uid not in (0, euid):
        raise UnsafePathError(errno.EPERM, _with_hint(
            f"{here} belongs to uid {st.st_uid}, not to root or uid {euid} who runs the driver: "
            "refusing to use it", hint))
    if st.st_mode & 0o022 and not (shared_ok and st.st_mode & stat.S_ISVTX):
        raise UnsafePathError(errno.EPERM, _with_hint(
            f"{here} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): refusing to use it", hint))


class opened_dir:
    """``with opened_dir(path, ...) as fd``: open_dir's descriptor, closed afterwards."""

    def __init__(self, path: Path, create_mode: int | None = None, private: bool = True, hint: str = ""):
        self.fd = open_dir(path, create_mode, private, hint)

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def _check_dir(path: Path, uid: int) -> None:
    """StateDirError unless ``path`` is a real directory of ``uid`` (no symlink on the way)
    that nobody else may write, nor change what leads to it."""
    hint = "remove it and start again"
    try:
        fd = open_dir(path, hint=hint, uid=uid)
    except UnsafePathError as exc:
        raise StateDirError(exc.errno, exc.strerror) from None
    except FileNotFoundError:
        raise StateDirError(errno.ENOENT, f"{path} does not exist") from None
    try:
        owner = os.fstat(fd).st_uid
    finally:
        os.close(fd)
    if owner != uid:
        raise StateDirError(errno.EPERM, f"{path} belongs to uid {owner}, not to uid {uid} who runs the "
                                         f"driver: refusing to use it ({hint})")


def _ensure_dir(path: Path, mode: int) -> None:
    """Create ``path`` (owned by us, ``mode``) unless it exists, then check it is ours and private."""
    try:
        with opened_dir(path.parent, private=False, hint="remove it and start again") as parent:
            _make_dir_at(parent, path.name, mode)
    except UnsafePathError as exc:
        raise StateDirError(exc.errno, exc.strerror) from None
    _check_dir(path, os.geteuid())


def _make_dir_at(parent: int, name: str, mode: int) -> bool:
    """mkdirat ``name`` with exactly ``mode`` (not masked by the umask); False if it existed."""
    try:
        os.mkdir(name, mode, dir_fd=parent)
    except FileExistsError:
        return False
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return True


SHM_ROOT = state_root()


def devroot_key(root: Path) -> str:
    """A short name for a devroot: its state directory's name and its mounts' source names."""
    return hashlib.sha1(str(root).encode()).hexdigest()[:12]


def default_state_dir(root: Path) -> Path:
    """Where a devroot's state goes unless the driver's user cannot use the state root
    (see private_state_dir)."""
    return SHM_ROOT / devroot_key(root)


def state_dir(root: Path) -> Path:
    """Per-devroot state on tmpfs: pid files, logs, mount records, each device's bus
    directory. The one `npu-kmd start` recorded in the devroot (uapi.sysfs_layout's rule:
    a record only the devroot's owner could have written), else the default."""
    recorded = recorded_state_dir(root)
    return Path(recorded) if recorded else default_state_dir(root)


def private_state_dir(root: Path, note: Callable[[str], None] | None = None) -> Path:
    """The devroot's state directory, created if needed, checked and recorded in the devroot
    (StateDirError when it is not safe): a real directory of the user the driver runs as,
    writable by nobody else (mode 0711: clients reach their buffers and the hand-over socket
    by name), on a path nobody else can change.

    The state root may be another user's: /dev/shm is world-writable, so anyone may create
    /dev/shm/npu-emu-<uid> (or /dev/shm/npu-emu) before its user first starts a driver, and
    that user could never remove it. That is no dead end and is never trusted: the state
    then goes to a fresh directory of our own next to it (npu-emu-<uid>-XXXXXXXX, made with
    mkdirat: nobody else can have made it), and the record in the devroot, which only its
    owner writes, tells every command and tool where it is. ``note`` hears of that move."""
    recorded = recorded_state_dir(root)
    if recorded is not None and os.path.lexists(recorded):
        try:
            _check_dir(Path(recorded), os.geteuid())
            return Path(recorded)
        except StateDirError as exc:     # gone and remade by someone else: chosen afresh below
            if note is not None:
                note(f"{str(exc).split(' (')[0]}: not using it")
    state = default_state_dir(root)
    try:
        _ensure_dir(SHM_ROOT, 0o711)
    except StateDirError as exc:
        state = _fresh_dir(SHM_ROOT.parent, f"npu-emu-{os.geteuid()}-", 0o711)
        if note is not None:
            note(f"{str(exc).split(' (')[0]}; the state of {root} goes to {state} instead")
    else:
        _ensure_dir(state, 0o711)
    record_in_devroot(root, STATE_MARKER, f"{state}\n")
    return state


def _fresh_dir(parent: Path, prefix: str, mode: int) -> Path:
    """A new directory of our own in ``parent`` (mkdtemp, made relative to a checked descriptor)."""
    with opened_dir(parent, private=False, hint="set NPU_SHM_ROOT to a directory of yours") as fd:
        for _ in range(100):
            name = prefix + secrets.token_hex(4)
            if _make_dir_at(fd, name, mode):
                return parent / name
    raise StateDirError(errno.EEXIST, f"no free name {prefix}* in {parent}")


def check_state_dir(root: Path) -> Path | None:
    """The devroot's state directory if it exists and is safe, None if it does not exist;
    StateDirError when it exists but is not safe (commands must then touch nothing in it)."""
    state = state_dir(root)
    if not os.path.lexists(state):
        return None
    _check_dir(state, os.geteuid())
    return state


def open_devroot(root: Path, create: bool = False) -> int:
    """The devroot's descriptor (open_dir: created with ``create``): the driver writes the
    node, the udev links and its records there, so it must be private to root or the
    driver's user."""
    return open_dir(root, 0o755 if create else None, hint="give a --devroot of your own")


def record_in_devroot(root: Path, name: str, text: str) -> None:
    """Write one of the devroot's records (the sysroot, the state directory) atomically,
    never through a link: a temporary file renamed over it, relative to the checked devroot."""
    with opened_dir(root, hint="give a --devroot of your own") as fd:
        tmp = f".{name}.{os.getpid()}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o644, dir_fd=fd), "w") as f:
            f.write(text)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)


def remove_from_devroot(root: Path, name: str) -> None:
    """Remove one of the devroot's records (a regular file; never what a link points to)."""
    try:
        with opened_dir(root) as fd:
            if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=fd)
    except (FileNotFoundError, UnsafePathError):
        pass


def mount_source(root: Path, index: int) -> str:
    """The source name of a device's FUSE mount (and so of its bind mounts) in /proc/mounts:
    unique per devroot and index, so a command can tell its own mounts from another's."""
    return f"npu-emu:{devroot_key(root)}.{index}"


def mounted_source(path: Path) -> str | None:
    """The source of the topmost mount at ``path``, or None when nothing is mounted there."""
    target, source = str(path), None
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            dash = fields.index("-")
            if unescape(fields[4]) == target:
                source = unescape(fields[dash + 2])
    return source


def unescape(field: str) -> str:
    """Undo the kernel's octal escapes (\\040 for a space, ...) in a mountinfo field."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(path: Path) -> bool:
    return mounted_source(path) is not None
