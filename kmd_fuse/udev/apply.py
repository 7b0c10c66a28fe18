"""Carry out a udev rules Outcome on a devroot: owner, group, mode and symlinks.

Like udevd, the links a device got at "add"/"change" are recorded in a small database
(default `<devroot>/.udev/db/c<major>:<minor>`, the layout old udev kept in /dev/.udev)
so that "remove" deletes exactly those links, and a "change" drops links the rules no
longer give. Links are relative (`accel/accel0 -> ../npu0`) and are replaced atomically.
"""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from kmd_fuse.udev.outcome import Outcome, UdevRulesError
from kmd_fuse.udev.uevent import Uevent

MISSING_GROUP_POLICIES = ("error", "create", "ignore")


class ApplyError(UdevRulesError):
    """The outcome could not be carried out on the devroot."""


class MissingGroupError(ApplyError):
    """A rule names a group this system does not have."""


def db_name(event: Uevent) -> str:
    """udev's database key: c<major>:<minor> for char devices, +<subsystem>:<kernel> else."""
    if event.major is not None:
        return f"c{event.major}:{event.minor}"
    return f"+{event.subsystem}:{event.kernel}"


def resolve_user(name: str, where: str | None) -> int:
    """A user name or number to a uid; ApplyError if the user does not exist."""
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise ApplyError(f"user {name!r}{_at(where)} does not exist on this system") from None


def resolve_group(name: str, where: str | None, missing_group: str) -> int | None:
    """A group name or number to a gid, following the missing-group policy (None: leave it)."""
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pass
    if missing_group == "ignore":
        return None
    if missing_group == "error":
        raise MissingGroupError(
            f"group {name!r}{_at(where)} does not exist on this system; create it "
            f"(groupadd --system {name}) or apply with missing_group='create'")
    tool = shutil.which("groupadd") or next(
        (p for p in ("/usr/sbin/groupadd", "/sbin/groupadd") if os.path.exists(p)), None)
    if tool is None:
        raise MissingGroupError(f"group {name!r}{_at(where)} is missing and groupadd is not installed")
    proc = subprocess.run([tool, "--system", name], capture_output=True, text=True)
    if proc.returncode not in (0, 9):  # 9: it appeared meanwhile
        raise MissingGroupError(f"could not create group {name!r}{_at(where)}: "
                                f"{proc.stderr.strip() or 'groupadd exit ' + str(proc.returncode)}")
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise MissingGroupError(f"group {name!r} still missing after groupadd") from None


def _at(where: str | None) -> str:
    return f" (set at {where})" if where else ""


def _read_db(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [line[2:] for line in text.splitlines() if line.startswith("S:")]


def _write_db(path: Path, out: Outcome) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"N:{out.event.devname}"] if out.event.devname else []
    lines += [f"S:{link}" for link in out.symlinks]
    lines += [f"E:{k}={v}" for k, v in out.properties.items()]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _link_path(devroot: Path, link: str) -> Path:
    path = devroot / link
    real_root = os.path.realpath(devroot)
    existing = path.parent
    while not existing.exists() and existing != devroot:  # the part mkdir will not create
        existing = existing.parent
    if os.path.commonpath([real_root, os.path.realpath(existing)]) != real_root:
        raise ApplyError(f"symlink {link!r} would leave the devroot {devroot} (through {existing})")
    return path


def create_link(devroot: Path, link: str, node: str) -> None:
    """Make devroot/link a relative symlink to node, replacing an older symlink atomically."""
    path = _link_path(devroot, link)
    path.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(node, path.parent)
    if os.path.lexists(path):
        if not path.is_symlink():
            raise ApplyError(f"{path} exists and is not a symlink; not replacing it")
        if os.readlink(path) == target:
            return
    tmp = path.with_name(f".{path.name}.udev-tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def remove_link(devroot: Path, link: str, node: str) -> bool:
    """Remove devroot/link if it still points at node; prune directories it leaves empty."""
    path = devroot / link
    if not path.is_symlink():
        return False
    pointee = os.path.normpath(os.path.join(path.parent, os.readlink(path)))
    if pointee != os.path.normpath(node):
        return False  # another device owns the link now
    path.unlink()
    parent = path.parent
    while parent != devroot and devroot in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
    return True


def apply_outcome(out: Outcome, *, dbdir: str | os.PathLike[str] | None = None,
                  missing_group: str = "error") -> None:
    """Carry out an Outcome (see module doc). Raises ApplyError with the path at fault."""
    if missing_group not in MISSING_GROUP_POLICIES:
        raise ValueError(f"missing_group must be one of {MISSING_GROUP_POLICIES}, got {missing_group!r}")
    event = out.event
    devroot = Path(out.devroot)
    dbfile = (Path(dbdir) if dbdir is not None else devroot / ".udev" / "db") / db_name(event)
    node = out.devnode
    old_links = _read_db(dbfile)
    if event.action == "remove":
        if node is not None:
            for link in old_links:
                remove_link(devroot, link, node)
        dbfile.unlink(missing_ok=True)
        return
    if node is not None:
        if not os.path.lexists(node):
            raise ApplyError(f"device node {node} of {event.devpath} does not exist")
        uid = resolve_user(out.owner, out.origin.get("OWNER"))
        gid = resolve_group(out.group, out.origin.get("GROUP"), missing_group)
        if gid is None:
            out.trace.append(f"{event.kernel}: warning: group {out.group!r} unknown, group left unchanged")
        try:
            os.chown(node, uid, -1 if gid is None else gid)
            os.chmod(node, out.mode)
        except OSError as exc:
            raise ApplyError(f"cannot set owner/mode of {node}: {exc.strerror}") from None
        for link in out.symlinks:
            try:
                create_link(devroot, link, node)
            except OSError as exc:
                raise ApplyError(f"cannot create symlink {devroot / link}: {exc.strerror}") from None
        for link in old_links:
            if link not in out.symlinks:
                remove_link(devroot, link, node)
    _write_db(dbfile, out)


def describe_outcome(out: Outcome) -> list[str]:
    """The tail of a `udevadm test` report: node handling, then the final properties."""
    ev, k = out.event, out.event.kernel
    lines: list[str] = []
    node = out.devnode
    if node is not None and ev.action != "remove":
        devnum = f", devnum=c{ev.major}:{ev.minor}" if ev.major is not None else ""
        lines.append(f"{k}: Handling device node '{node}'{devnum}")
        lines.append(f"{k}: Setting permissions {node}, uid={_show_id(out.owner, pwd.getpwnam, 'pw_uid')}, "
                     f"gid={_show_id(out.group, grp.getgrnam, 'gr_gid')}, mode={out.mode:04o}")
        for link in out.symlinks:
            path = os.path.join(out.devroot, link)
            lines.append(f"{k}: Creating symlink '{path}' to "
                         f"'{os.path.relpath(node, os.path.dirname(path))}'")
    elif node is not None:
        lines.append(f"{k}: Removing the symlinks recorded for '{node}'")
    if ev.action != "remove":
        lines.append(f"{k}: Result OWNER={out.owner} GROUP={out.group} MODE={out.mode:04o} "
                     f"SYMLINK={' '.join(out.symlinks) or '(none)'}")
    props = dict(out.properties)
    if node is not None:
        props["DEVNAME"] = node
    if out.symlinks and ev.action != "remove":
        props["DEVLINKS"] = " ".join(sorted(os.path.join(out.devroot, link) for link in out.symlinks))
    lines += [f"{key}={value}" for key, value in props.items()]
    return lines


def _show_id(name: str, lookup, attr: str) -> str:  # type: ignore[no-untyped-def]
    if name.isdigit():
        return name
    try:
        return str(getattr(lookup(name), attr))
    except KeyError:
        return f"{name}(unknown)"
