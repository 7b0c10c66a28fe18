"""A daemon's mounts, made only where the driver checked and recorded, so that `npu-kmd stop`
undoes exactly them (also after the daemon was killed).

A mount point is reached through descriptors of checked directories (paths.open_dir: no
symbolic link followed, nothing another user may change on the way); the node file or
tree directory is made there with openat/mkdirat, and mount(2) gets /proc/self/fd/N of
that very file or directory, never a path to resolve again. Each mount is then checked:
the topmost mount at the point must be a new one, at that path, with the device's source
name; anything else is undone and refused.

The record (``npuN.mounts`` in the devroot's private state directory) says what each
mount is: its point and source, written before mounting, and its mount id once checked.
Unmounting takes the topmost mount at a recorded point only when its id, point and source
are what the record says (or, for a mount made but killed before its id was written,
point and source), so no command unmounts a mount the driver did not make.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
from pathlib import Path

from kmd_fuse import owner, paths

MS_BIND = 4096
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class MountError(OSError):
    """A mount or unmount failed or was refused (the message says why)."""


def mount_id(fd: int) -> int:
    """The id of the mount a descriptor is on (its `mnt_id` in /proc/self/fdinfo)."""
    with open(f"/proc/self/fdinfo/{fd}") as info:
        for line in info:
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    raise MountError(errno.EIO, f"no mnt_id in /proc/self/fdinfo/{fd}")


def mount_table() -> dict[int, tuple[str, str]]:
    """Mount id -> (mount point, source) of every mount this process sees."""
    table = {}
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            dash = fields.index("-")
            table[int(fields[0])] = (paths.unescape(fields[4]), paths.unescape(fields[dash + 2]))
    return table


def open_top(parent: int, name: str) -> int:
    """An O_PATH descriptor of what ``name`` in ``parent`` shows: the root of the topmost
    mount there, if any (the lookup crosses mounts; a link is not followed)."""
    return os.open(name, _PATH_FLAGS, dir_fd=parent)


class MountRecord:
    """A device's mount record: one JSON object a line, {"point", "source"} before a mount
    and {"point", "source", "id"} once it is checked."""

    def __init__(self, path: Path):
        self.path = path

    def entries(self) -> list[dict]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        with os.fdopen(fd) as f:
            out = []
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue        # a line cut short by a kill: its mount has a pending entry or none
                if isinstance(entry, dict) and isinstance(entry.get("point"), str) \
                        and isinstance(entry.get("source"), str):
                    out.append(entry)
            return out

    def add(self, point: Path, source: str, ident: int | None = None) -> None:
        entry = {"point": str(point), "source": source, **({"id": ident} if ident is not None else {})}
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)

    def _keep(self, entries: list[dict]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in entries)
        os.replace(tmp, self.path)

    def points(self) -> list[Path]:
        """The recorded mount points, newest first."""
        return list(dict.fromkeys(Path(e["point"]) for e in reversed(self.entries())))

    def is_ours(self, point: Path, ident: int, table: dict[int, tuple[str, str]]) -> bool:
        """Is mount ``ident`` (topmost at ``point``) one this record says the driver made?"""
        if ident not in table or table[ident][0] != str(point):
            return False
        mine = [e for e in self.entries() if e["point"] == str(point) and e["source"] == table[ident][1]]
        made = [e["id"] for e in mine if "id" in e]
        # a mount whose id was never written (killed in between) is known by point and source
        return ident in made or len(mine) > 2 * len(made)

    def unmount(self, only: tuple[Path, ...] | None = None) -> list[Path]:
        """Unmount the recorded mounts (all, or those at the points ``only``), newest first,
        each only while the topmost mount at its point is the recorded one; returns the
        points now free of the driver's mounts and drops them from the record. A point where
        a mount the driver did not make is on top is left alone, and stays recorded
        (MountError once the others are done)."""
        done, blocked = [], []
        for point in self.points():
            if only is not None and point not in only:
                continue
            result = _unmount_ours(self, point)
            if result is None:
                done.append(point)
            elif result:
                blocked.append(result)
        self._keep([e for e in self.entries() if Path(e["point"]) not in done])
        if blocked:
            raise MountError(errno.EBUSY, "; ".join(blocked))
        return done


def _unmount_ours(record: MountRecord, point: Path) -> str | None:
    """Unmount the recorded mounts stacked at ``point``; None when none of ours is left
    there, else why one is left."""
    try:
        parent = paths.open_dir(point.parent)
    except FileNotFoundError:
        return None                               # the point is gone, and its mount with it
    except paths.UnsafePathError as exc:
        return str(exc.strerror)
    try:
        for _ in range(8):
            try:
                top = open_top(parent, point.name)
            except FileNotFoundError:
                return None
            try:
                table = mount_table()
                ident = mount_id(top)
                if ident not in table or table[ident][0] != str(point):
                    return None                   # nothing mounted there any more
                if not record.is_ours(point, ident, table):
                    return (f"{point}: a mount the driver did not make ({table[ident][1]}) is on top: "
                            "left in place")
                _detach(top, point)
            finally:
                os.close(top)
        return f"{point}: still mounted after 8 unmounts"
    finally:
        os.close(parent)


def _detach(top: int, point: Path) -> None:
    """umount -l of the topmost mount at ``point`` (``top``: its descriptor). Root detaches it
    through the descriptor; a normal user's FUSE mount goes through fusermount3 -u -z,
    which checks the mount is that user's (its point is in a private directory of theirs)."""
    if owner.rootless():
        proc = subprocess.run(["fusermount3", "-u", "-z", str(point)], capture_output=True, text=True)
        if proc.returncode:
            raise MountError(errno.EPERM, f"unmount {point}: {proc.stderr.strip() or 'fusermount3 failed'}")
        return
    if _libc.umount2(os.fsencode(f"/proc/self/fd/{top}"), MNT_DETACH):
        err = ctypes.get_errno()
        raise MountError(err, f"unmount {point}: {os.strerror(err)}")


def make_node_file(parent: int, name: str, point: Path) -> int:
    """An O_PATH descriptor of the empty file a node is mounted on, made with openat
    (O_EXCL, O_NOFOLLOW) or, left by an earlier run, a regular file of root or ours."""
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=parent))
    except FileExistsError:
        pass
    fd = os.open(name, _PATH_FLAGS, dir_fd=parent)
    _check_target(fd, point, stat.S_ISREG, "a regular file")
    return fd


def make_tree_dir(parent: int, name: str, point: Path, mode: int = 0o755) -> int:
    """An O_PATH descriptor of the directory a tree is mounted on, made with mkdirat or,
    left by an earlier run, a real directory of root or ours."""
    try:
        os.mkdir(name, mode, dir_fd=parent)
    except FileExistsError:
        pass
    fd = os.open(name, _PATH_FLAGS, dir_fd=parent)
    _check_target(fd, point, stat.S_ISDIR, "a directory")
    return fd


def _check_target(fd: int, point: Path, kind, what: str) -> None:
    st = os.fstat(fd)
    problem = ("is a symbolic link: refusing to follow it" if stat.S_ISLNK(st.st_mode)
               else f"is not {what}" if not kind(st.st_mode)
               else f"belongs to uid {st.st_uid}" if st.st_uid not in (0, os.geteuid()) else None)
    if problem:
        os.close(fd)
        raise MountError(errno.EPERM, f"{point} {problem}: refusing to mount there (remove it and start again)")


def bind(source: Path, parent: int, name: str, point: Path, fs_source: str, record: MountRecord) -> None:
    """Bind-mount ``source`` on ``name`` in the checked directory ``parent`` (``point``: its
    path), which the caller made (make_node_file / make_tree_dir); checked and recorded."""
    kind = make_tree_dir if source.is_dir() else make_node_file
    target = kind(parent, name, point)
    try:
        record.add(point, fs_source)
        if _libc.mount(os.fsencode(source), os.fsencode(f"/proc/self/fd/{target}"), None, MS_BIND, None):
            err = ctypes.get_errno()
            raise MountError(err, f"bind mount {source} on {point}: {os.strerror(err)}")
    finally:
        os.close(target)
    check(parent, name, point, fs_source, record)


def check(parent: int, name: str, point: Path, fs_source: str, record: MountRecord) -> None:
    """The topmost mount at ``point`` (``name`` in ``parent``) is one just made there with the
    device's source name: record its id; otherwise undo it and refuse (MountError)."""
    top = open_top(parent, name)
    try:
        ident = mount_id(top)
        seen = mount_table().get(ident)
        if seen != (str(point), fs_source):
            if seen is not None and seen[1] == fs_source:
                _detach(top, point)
            raise MountError(errno.EXDEV, f"{point}: the mount there is {seen}, not the device's "
                                          f"({fs_source}): undone")
        record.add(point, fs_source, ident)
    finally:
        os.close(top)
