"""How a device appears to the system and goes away again: bind mounts of the
daemon's FUSE filesystem, uevents, and the udev rules applied to the node.

    <state>/.fuse-npuN/npuN    --bind-->  <devroot>/npuN
    <state>/.fuse-npuN/device  --bind-->  <sysroot>/class/npu/npuN

Every directory on the way is checked and made relative to a checked descriptor, and
each mount checked and recorded (kmd_fuse.mounts), so a symlink planted where the tree
goes cannot send a mount elsewhere, and `stop` unmounts exactly what was mounted.

In rootless mode (kmd_fuse.owner: a normal user, who may not bind-mount) the same two
places are symlinks to those paths instead; only a symlink with exactly that target is
ever replaced or removed, and the FUSE mount itself goes through fusermount3.

Uevents go to the devroot's event log (kmd_fuse.udev.uevent): "add" once the mounts are
up, "change" with RESET_COUNT after every reset, "remove" before the mounts go. The
rules (udev/70-npu.rules) are applied after each event, in event order, by one task;
applying them touches the node and reads attributes through this very daemon's FUSE
filesystem, so it runs in a worker thread while the trio loop keeps serving.

The rules' GROUP ("render") is created with groupadd when this system lacks it and
the daemon runs as root (missing_group="create"); otherwise it is not changed
and the node keeps the group it had.

The daemon's side (the trio task applying the rules, in order) is
kmd_fuse.udev.presence: this module imports no trio, so ``npu-kmd`` (which uses these
helpers in every start and stop) does not pay trio's import (~0.13 s of CPU a command).
"""
from __future__ import annotations

import errno
import grp
import os
import stat
from pathlib import Path

from kmd_fuse import mounts, owner, paths
from kmd_fuse.mounts import MountError
from kmd_fuse.udev.apply import apply_outcome
from kmd_fuse.udev.rules import RuleSet
from kmd_fuse.udev.uevent import Uevent


def remove_node_placeholder(node: Path) -> None:
    """Remove the empty file the node was mounted on, so no stale `npuN` outlives the device."""
    try:
        with paths.opened_dir(node.parent) as parent:
            st = os.stat(node.name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_size == 0 and not paths.is_mounted(node):
                os.unlink(node.name, dir_fd=parent)
    except (FileNotFoundError, paths.UnsafePathError):
        pass


def link_targets(root: Path, sys_root: Path, index: int) -> dict[Path, Path]:
    """Rootless mode's symlinks: where users look -> the daemon's FUSE mount."""
    fuse = paths.fuse_dir(root, index)
    return {paths.node_path(root, index): fuse / f"npu{index}", paths.device_dir(sys_root, index): fuse / "device"}


def _read_link(parent: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=parent)
    except OSError:
        return None


def is_our_link(link: Path, target: Path) -> bool:
    """Is ``link`` a symlink to exactly ``target`` (one this device made)?"""
    try:
        return os.readlink(link) == str(target)
    except OSError:
        return False


def make_link(link: Path, target: Path) -> None:
    """Create ``link`` -> ``target`` in a checked directory (paths.open_dir, made if missing);
    an older link of ours is replaced, anything else refused."""
    with paths.opened_dir(link.parent, create_mode=0o755, hint="give another --devroot/--sysroot") as parent:
        if _lexists(parent, link.name) and _read_link(parent, link.name) != str(target):
            raise MountError(errno.EEXIST, f"{link} exists and is not this device's link: remove it and start again")
        tmp = f".{link.name}.npu-link"
        if _lexists(parent, tmp) and _read_link(parent, tmp) != str(target):
            raise MountError(errno.EEXIST, f"{link.parent / tmp} is in the way: remove it and start again")
        if _lexists(parent, tmp):
            os.unlink(tmp, dir_fd=parent)
        os.symlink(target, tmp, dir_fd=parent)
        os.replace(tmp, link.name, src_dir_fd=parent, dst_dir_fd=parent)


def _lexists(parent: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def remove_links(root: Path, sys_root: Path, index: int) -> list[Path]:
    """Remove this device's rootless links (never anything else); returns those removed."""
    done = []
    for link, target in link_targets(root, sys_root, index).items():
        try:
            with paths.opened_dir(link.parent) as parent:
                if _read_link(parent, link.name) == str(target):
                    os.unlink(link.name, dir_fd=parent)
                    done.append(link)
        except (FileNotFoundError, paths.UnsafePathError):
            continue
    return done


def attached(root: Path, sys_root: Path, index: int, point: Path) -> bool:
    """Is ``point`` (the node or the tree) this device's: its bind mount, or in rootless mode
    its symlink into a FUSE mount that is up?"""
    ours = paths.mount_source(root, index)
    if paths.mounted_source(point) == ours:
        return True
    target = link_targets(root, sys_root, index).get(point)
    return (target is not None and is_our_link(point, target)
            and paths.mounted_source(paths.fuse_dir(root, index)) == ours)


def mount_points(root: Path, sys_root: Path, index: int) -> list[Path]:
    """Every mount a device's daemon makes, the outermost (bind mounts) first."""
    return [paths.node_path(root, index), paths.device_dir(sys_root, index), paths.fuse_dir(root, index)]


def mount_record(root: Path, index: int) -> mounts.MountRecord:
    return mounts.MountRecord(paths.mount_record(root, index))


def unmount_all(root: Path, sys_root: Path, index: int) -> list[Path]:
    """Unmount what the device's mount record says its daemon mounted (alive or not), and
    its rootless links; returns what was removed. Nothing else is ever unmounted (MountError
    names a point where another mount sits on top of the device's)."""
    return mount_record(root, index).unmount() + remove_links(root, sys_root, index)


def foreign_mount(root: Path, sys_root: Path, index: int) -> str | None:
    """What takes a mount point of this device, if a mount the device did not make does."""
    table = mounts.mount_table()
    mine = {(e["point"], e["source"]) for e in mount_record(root, index).entries()}
    for point in mount_points(root, sys_root, index):
        for point_seen, source in table.values():
            if point_seen == str(point) and (point_seen, source) not in mine:
                if source.startswith("npu-emu:") and source != paths.mount_source(root, index):
                    return f"{point} is served by another device ({source})"
                return f"{point} is taken by a mount this device did not make ({source})"
    return None


def device_event(action: str, index: int, extra: dict[str, object] | None = None) -> dict:
    """The keyword arguments of UeventLog.emit for device npu<index>."""
    return dict(action=action, devpath=paths.devpath(index), subsystem=paths.SUBSYSTEM,
                devname=f"npu{index}", major=paths.NPU_MAJOR, minor=index, extra=extra or {})


def apply_rules(rules: RuleSet, event: Uevent, root: Path, sys_root: Path) -> None:
    """Apply the rules to one event's node (blocking: file system calls).

    In rootless mode the rules apply as far as a normal user may: the mode and symlinks
    as written, the node stays the user's own, and its group is the rules' group only
    if the user belongs to it (else the user's own group)."""
    out = rules.evaluate(event, devroot=str(root), sysroot=str(sys_root))
    if owner.rootless():
        out.owner = str(os.geteuid())
        out.group = str(_own_group(out.group))
    apply_outcome(out, dbdir=paths.udev_db(root), missing_group="ignore" if owner.rootless() else "create")


def _own_group(name: str) -> int:
    """``name``'s gid if this user belongs to that group, else the user's own group."""
    try:
        gid = int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
    except KeyError:
        return os.getegid()
    return gid if gid == os.getegid() or gid in os.getgroups() else os.getegid()
