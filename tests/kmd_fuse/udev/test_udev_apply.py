"""Applying rules to real files: owner, group, mode and symlinks, checked with os.stat."""
from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from kmd_fuse.udev.apply import ApplyError, MissingGroupError
from kmd_fuse.udev.rules import RuleSet, load_rules
from kmd_fuse.udev.uevent import Uevent

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to other users needs root")
GROUP = grp.getgrgid(os.getgid()).gr_name if os.geteuid() != 0 else "audio"


def ev(action: str = "add", n: int = 0, **extra: str) -> Uevent:
    return Uevent(action, f"/devices/platform/npu-emu.{n}/npu/npu{n}", "npu", f"npu{n}", 240, n, None, extra)


def node(devroot: Path, n: int = 0, mode: int = 0o644) -> Path:
    path = devroot / f"npu{n}"
    path.touch()
    path.chmod(mode)
    return path


RULES = ('SUBSYSTEM!="npu", GOTO="end"\nACTION!="add|change", GOTO="end"\n'
         f'KERNEL=="npu[0-9]*", OWNER="{pwd.getpwuid(os.getuid()).pw_name}", GROUP="{GROUP}", MODE="0640"\n'
         'KERNEL=="npu[0-9]*", SYMLINK+="accel/accel%n npu/by-path/platform-npu-emu.$kernel"\n'
         'ENV{EXTRA_LINK}=="?*", SYMLINK+="$env{EXTRA_LINK}"\nLABEL="end"\n')


def test_add_sets_mode_owner_group_and_relative_symlinks(tmp_path: Path) -> None:
    path = node(tmp_path)
    out = RuleSet.from_text(RULES).apply(ev(), tmp_path)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_uid == os.getuid() and st.st_gid == grp.getgrnam(GROUP).gr_gid
    assert os.readlink(tmp_path / "accel" / "accel0") == "../npu0"
    assert os.readlink(tmp_path / "npu" / "by-path" / "platform-npu-emu.npu0") == "../../npu0"
    assert os.path.samefile(tmp_path / "accel" / "accel0", path)
    db = (tmp_path / ".udev" / "db" / "c240:0").read_text().splitlines()
    assert db[:3] == ["N:npu0", "S:accel/accel0", "S:npu/by-path/platform-npu-emu.npu0"]
    assert "E:SUBSYSTEM=npu" in db and out.mode == 0o640


@needs_root
def test_chown_to_another_user_and_group(tmp_path: Path) -> None:
    path = node(tmp_path)
    RuleSet.from_text('KERNEL=="npu0", OWNER="nobody", GROUP="nogroup", MODE="0604"').apply(ev(), tmp_path)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid)
    assert stat.S_IMODE(st.st_mode) == 0o604
    RuleSet.from_text('KERNEL=="npu0", OWNER="1234", GROUP="4321"').apply(ev("change"), tmp_path)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 4321, 0o660)


def test_change_reapplies_and_drops_stale_links(tmp_path: Path) -> None:
    path = node(tmp_path)
    rules = RuleSet.from_text(RULES)
    rules.apply(ev(EXTRA_LINK="extra/deep/link"), tmp_path)
    assert os.readlink(tmp_path / "extra" / "deep" / "link") == "../../npu0"
    path.chmod(0o777)
    rules.apply(ev("change"), tmp_path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert not (tmp_path / "extra").exists()  # stale link gone and its empty dirs pruned
    assert (tmp_path / "accel" / "accel0").is_symlink()


def test_remove_deletes_recorded_links_only(tmp_path: Path) -> None:
    node(tmp_path, 0)
    node(tmp_path, 1)
    rules = RuleSet.from_text(RULES)
    rules.apply(ev(n=0), tmp_path)
    rules.apply(ev(n=1), tmp_path)
    (tmp_path / "mine").symlink_to("npu0")  # not recorded: must survive
    rules.apply(ev("remove", n=0), tmp_path)
    assert not os.path.lexists(tmp_path / "accel" / "accel0")
    assert not os.path.lexists(tmp_path / "npu" / "by-path" / "platform-npu-emu.npu0")
    assert os.readlink(tmp_path / "accel" / "accel1") == "../npu1"
    assert (tmp_path / "mine").is_symlink() and (tmp_path / "npu0").exists()
    assert not (tmp_path / ".udev" / "db" / "c240:0").exists()
    rules.apply(ev("remove", n=1), tmp_path)
    assert sorted(os.listdir(tmp_path)) == [".udev", "mine", "npu0", "npu1"]


def test_remove_leaves_a_link_another_device_took_over(tmp_path: Path) -> None:
    node(tmp_path, 0)
    node(tmp_path, 1)
    shared = RuleSet.from_text('KERNEL=="npu*", SYMLINK+="npu/default"')
    shared.apply(ev(n=0), tmp_path)
    shared.apply(ev(n=1), tmp_path)  # replaces the link atomically
    assert os.readlink(tmp_path / "npu" / "default") == "../npu1"
    shared.apply(ev("remove", n=0), tmp_path)
    assert os.readlink(tmp_path / "npu" / "default") == "../npu1"


def test_custom_dbdir(tmp_path: Path) -> None:
    devroot, db = tmp_path / "dev", tmp_path / "run" / "udev"
    devroot.mkdir()
    node(devroot)
    RuleSet.from_text(RULES).apply(ev(), devroot, dbdir=db)
    assert (db / "c240:0").exists() and not (devroot / ".udev").exists()


def test_missing_group_policies(tmp_path: Path) -> None:
    path = node(tmp_path)
    before = os.stat(path).st_gid
    name = f"npuemu{uuid.uuid4().hex[:8]}"
    rules = RuleSet.from_text(f'KERNEL=="npu0",\\\n GROUP="{name}", MODE="0660"', "g.rules")
    with pytest.raises(MissingGroupError) as info:
        rules.apply(ev(), tmp_path)
    assert f"group '{name}' (set at g.rules:1) does not exist" in str(info.value)
    assert f"groupadd --system {name}" in str(info.value)
    out = rules.apply(ev(), tmp_path, missing_group="ignore")
    assert os.stat(path).st_gid == before and stat.S_IMODE(os.stat(path).st_mode) == 0o660
    assert any("warning: group" in line for line in out.trace)
    with pytest.raises(ValueError, match="missing_group must be one of"):
        rules.apply(ev(), tmp_path, missing_group="maybe")


@needs_root
def test_missing_group_create(tmp_path: Path) -> None:
    path = node(tmp_path)
    name = f"npuemu{uuid.uuid4().hex[:8]}"
    try:
        RuleSet.from_text(f'GROUP="{name}"').apply(ev(), tmp_path, missing_group="create")
        assert os.stat(path).st_gid == grp.getgrnam(name).gr_gid
    finally:
        subprocess.run(["groupdel", name], capture_output=True)


def test_unknown_owner_missing_node_and_blocking_files(tmp_path: Path) -> None:
    with pytest.raises(ApplyError, match=r"device node .*npu0 of /devices/platform/npu-emu.0/npu/npu0 does not exist"):
        RuleSet.from_text(RULES).apply(ev(), tmp_path)
    node(tmp_path)
    with pytest.raises(ApplyError, match=r"user 'no_such_user_x' \(set at t.rules:1\) does not exist"):
        RuleSet.from_text('OWNER="no_such_user_x"', "t.rules").apply(ev(), tmp_path)
    (tmp_path / "accel").mkdir()
    (tmp_path / "accel" / "accel0").write_text("a regular file")
    with pytest.raises(ApplyError, match="accel0 exists and is not a symlink"):
        RuleSet.from_text(RULES).apply(ev(), tmp_path)


def test_symlink_cannot_escape_devroot_through_a_symlinked_dir(tmp_path: Path) -> None:
    devroot, outside = tmp_path / "dev", tmp_path / "outside"
    devroot.mkdir()
    outside.mkdir()
    node(devroot)
    (devroot / "npu").symlink_to(outside)
    for link in ("npu/x", "npu/deeper/still/x"):
        with pytest.raises(ApplyError, match="would leave the devroot"):
            RuleSet.from_text(f'SYMLINK+="{link}"').apply(ev(), devroot)
    assert os.listdir(outside) == []


@needs_root
def test_shipped_rules_applied(tmp_path: Path) -> None:
    path = node(tmp_path, 0, 0o666)
    rules = load_rules()
    try:
        gid = grp.getgrnam("render").gr_gid
    except KeyError:
        with pytest.raises(MissingGroupError, match="group 'render' .*70-npu.rules:13"):
            rules.apply(ev(), tmp_path)
        out = rules.apply(ev(), tmp_path, missing_group="ignore")
        gid = os.stat(path).st_gid
    else:
        out = rules.apply(ev(), tmp_path)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_uid == 0 and st.st_gid == gid
    assert out.symlinks == ["accel/accel0", "npu/by-path/platform-npu-emu.npu0"]
    assert os.path.samefile(tmp_path / "accel" / "accel0", path)
    rules.apply(ev("remove"), tmp_path)
    assert sorted(os.listdir(tmp_path)) == [".udev", "npu0"]
