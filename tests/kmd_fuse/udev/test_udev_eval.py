"""The udev rules evaluator: matching, assignment semantics, substitutions, explain()."""
from __future__ import annotations

import os

import pytest

from kmd_fuse.udev.rules import RuleEvalError, RuleSet, glob_match, load_rules
from kmd_fuse.udev.uevent import Uevent

DEVPATH = "/devices/platform/npu-emu.0/npu/npu0"


def ev(action: str = "add", kernel: str = "npu0", subsystem: str = "npu", **extra: str) -> Uevent:
    return Uevent(action, f"/devices/platform/npu-emu.0/npu/{kernel}", subsystem, kernel, 240,
                  int(kernel[3:]) if kernel[3:].isdigit() else 0, 7, extra)


def rs(text: str) -> RuleSet:
    return RuleSet.from_text(text, "t.rules")


@pytest.mark.parametrize("pattern, value, hit", [
    ("npu[0-9]*", "npu12", True), ("npu[0-9]*", "npux", False), ("npu?", "npu1", True),
    ("add|change", "change", True), ("add|change", "remove", False), ("", "", True),
    ("?*", "", False), ("npu[!0]", "npu1", True), ("*", "anything", True), ("NPU0", "npu0", False),
])
def test_glob_match(pattern: str, value: str, hit: bool) -> None:
    assert glob_match(pattern, value) is hit


def test_defaults_when_nothing_matches() -> None:
    out = rs('KERNEL=="sda", MODE="0666", GROUP="disk"').evaluate(ev())
    assert (out.mode, out.owner, out.group, out.symlinks, out.matched) == (0o600, "root", "root", [], [])


def test_group_without_mode_defaults_to_0660() -> None:
    out = rs('KERNEL=="npu*", GROUP="video"').evaluate(ev())
    assert (out.mode, out.group) == (0o660, "video")


def test_all_matches_of_a_rule_must_hold() -> None:
    rules = rs('KERNEL=="npu*", SUBSYSTEM=="usb", MODE="0666"\n'
               'KERNEL=="npu*", SUBSYSTEM!="usb", ACTION=="add", DEVPATH=="/devices/platform/*", MODE="0640"')
    out = rules.evaluate(ev())
    assert out.mode == 0o640 and [r.line for r in out.matched] == [2]


def test_later_assignment_wins_unless_final() -> None:
    assert rs('MODE="0600"\nMODE="0640"').evaluate(ev()).mode == 0o640
    out = rs('MODE:="0600"\nMODE="0640"\nMODE:="0666"').evaluate(ev())
    assert out.mode == 0o600 and out.origin["MODE"] == "t.rules:1"
    assert any("t.rules:2 MODE ignored, final value set at t.rules:1" in line for line in out.trace)


def test_symlink_list_operators() -> None:
    out = rs('SYMLINK+="a b"\nSYMLINK+="c a"').evaluate(ev())
    assert out.symlinks == ["a", "b", "c"]
    assert rs('SYMLINK+="a"\nSYMLINK="x y"').evaluate(ev()).symlinks == ["x", "y"]
    assert rs('SYMLINK:="k"\nSYMLINK+="late"').evaluate(ev()).symlinks == ["k"]


def test_env_assignment_feeds_later_matches_and_substitutions() -> None:
    out = rs('ENV{STAGE}="one"\nENV{STAGE}=="one", ENV{NEXT}="after-$env{STAGE}"\n'
             'ENV{NEXT}+="more"\nENV{GONE}="x"\nENV{GONE}=""').evaluate(ev())
    assert out.properties["NEXT"] == "after-one more"
    assert "GONE" not in out.properties
    # Event properties are visible to ENV matches too, like udev's property list.
    assert rs('ENV{RESET_COUNT}=="3", MODE="0606"').evaluate(ev("change", RESET_COUNT="3")).mode == 0o606
    assert rs('ENV{MISSING}=="", MODE="0606"').evaluate(ev()).mode == 0o606


def test_goto_skips_to_label() -> None:
    rules = rs('SUBSYSTEM!="npu", GOTO="end"\nMODE="0640"\nLABEL="end"\nSYMLINK+="always"')
    assert rules.evaluate(ev()).mode == 0o640
    other = rules.evaluate(ev(subsystem="usb"))
    assert other.mode == 0o600 and other.symlinks == ["always"]
    assert any("GOTO 'end'" in line for line in other.trace)


def test_substitution_values(tmp_path) -> None:
    sysroot = tmp_path / "sys"
    attrs = sysroot / "class" / "npu" / "npu3"
    attrs.mkdir(parents=True)
    (attrs / "model").write_text("npu emu/v1 \n")
    text = ('ENV{K}="$kernel %k", ENV{N}="$number %n", ENV{P}="$devpath %p", ENV{MM}="$major:$minor %M:%m", '
            'ENV{E}="$env{ACTION} %E{SUBSYSTEM}", ENV{A}="$attr{model}|%s{nothere}|", ENV{NODE}="$devnode %N", '
            'ENV{NAME}="$name", ENV{R}="$root %r", ENV{S}="$sys %S", ENV{ESC}="$$HOME 100%%"\n'
            'SYMLINK+="one", SYMLINK+="m/$attr{model}"\nENV{L}="$links"')
    out = rs(text).evaluate(ev(kernel="npu3"), devroot="/tmp/dev", sysroot=str(sysroot))
    p = out.properties
    assert p["K"] == "npu3 npu3" and p["N"] == "3 3"
    assert p["P"] == "/devices/platform/npu-emu.0/npu/npu3 /devices/platform/npu-emu.0/npu/npu3"
    assert p["MM"] == "240:3 240:3" and p["E"] == "add npu"
    assert p["A"] == "npu emu/v1||"  # trailing whitespace stripped, missing attribute is empty
    assert p["NODE"] == "/tmp/dev/npu3 /tmp/dev/npu3" and p["NAME"] == "npu3"
    assert p["R"] == "/tmp/dev /tmp/dev" and p["S"] == f"{sysroot} {sysroot}"
    assert p["ESC"] == "$HOME 100%"
    # In a link name, whitespace and '/' from an attribute become '_'.
    assert out.symlinks == ["one", "m/npu_emu_v1"] and p["L"] == "one m/npu_emu_v1"


def test_attr_match_reads_sysfs_below_devpath_first(tmp_path) -> None:
    devdir = tmp_path / DEVPATH.lstrip("/")
    devdir.mkdir(parents=True)
    (devdir / "cores").write_text("4\n")
    rules = rs('ATTR{cores}=="4", MODE="0604"\nATTR{missing}!="x", MODE="0666"')
    out = rules.evaluate(ev(), sysroot=str(tmp_path))
    assert out.mode == 0o604  # a missing attribute matches neither == nor !=
    assert rules.evaluate(ev()).mode == 0o600  # no sysroot: no attributes at all


def test_number_is_empty_without_trailing_digits() -> None:
    out = rs('ENV{N}="x%ny"').evaluate(Uevent("add", "/devices/virtual/npu/npux", "npu", "npux"))
    assert out.properties["N"] == "xy"


@pytest.mark.parametrize("text, message", [
    ('ENV{M}="rw", MODE="$env{M}"', "t.rules:1: MODE must be octal, got 'rw'"),
    ('SYMLINK+="../escape"', "must be a plain relative path"),
    ('SYMLINK+="/abs"', "must be a plain relative path"),
    ('ENV{G}="a b", GROUP="$env{G}"', "bad GROUP 'a b'"),
    ('OWNER="$env{NOPE}"', "bad OWNER ''"),
])
def test_runtime_value_errors(text: str, message: str) -> None:
    with pytest.raises(RuleEvalError, match=message.replace("(", r"\(")):
        rs(text).evaluate(ev())


def test_shipped_rules_on_add_change_remove_and_other_devices(tmp_path) -> None:
    rules = load_rules()
    (tmp_path / "class" / "npu" / "npu2").mkdir(parents=True)
    (tmp_path / "class" / "npu" / "npu2" / "model").write_text("npu-emu-v1\n")
    add = rules.evaluate(ev(kernel="npu2"), devroot="/dev", sysroot=str(tmp_path))
    assert (add.mode, add.owner, add.group) == (0o660, "root", "render")
    assert add.symlinks == ["accel/accel2", "npu/by-path/platform-npu-emu.npu2", "npu/by-model/npu-emu-v1-2"]
    assert add.properties["ID_PATH"] == "platform-npu-emu.npu2"
    change = rules.evaluate(ev("change", kernel="npu2", RESET_COUNT="4"))
    assert change.properties["NPU_LAST_RESET"] == "4" and change.group == "render"
    for other in (ev("remove", kernel="npu2"), ev(subsystem="block"), ev(kernel="npux")):
        out = rules.evaluate(other)
        assert (out.mode, out.group, out.symlinks) == (0o600, "root", [])


def test_explain_reads_like_udevadm_test(tmp_path) -> None:
    text = load_rules().explain(ev(), devroot=str(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("Reading rules file: ") and lines[0].endswith("70-npu.rules")
    assert any(line.endswith("GROUP 'render'") and ":13 " in line for line in lines)
    assert any(line.endswith(':13 matched ACTION=="add|change", SUBSYSTEM=="npu", KERNEL=="npu[0-9]*"')
               for line in lines)
    assert ("npu0: Result OWNER=root GROUP=render MODE=0660 "
            "SYMLINK=accel/accel0 npu/by-path/platform-npu-emu.npu0") in lines
    assert f"npu0: Handling device node '{tmp_path}/npu0', devnum=c240:0" in lines
    assert any(line.startswith(f"npu0: Setting permissions {tmp_path}/npu0, uid=0, gid=") and
               line.endswith("mode=0660") for line in lines)
    assert f"npu0: Creating symlink '{tmp_path}/accel/accel0' to '../npu0'" in lines
    assert f"DEVNAME={tmp_path}/npu0" in lines and "ACTION=add" in lines and "SEQNUM=7" in lines
    devlinks = next(line for line in lines if line.startswith("DEVLINKS="))
    assert devlinks.split("=", 1)[1].split() == [os.path.join(str(tmp_path), link) for link in
                                                 ("accel/accel0", "npu/by-path/platform-npu-emu.npu0")]
    assert not os.listdir(tmp_path)  # explain touches nothing


def test_explain_remove_shows_the_goto_and_no_permissions() -> None:
    lines = load_rules().explain(ev("remove")).splitlines()
    assert any(line.endswith(':8 matched ACTION!="add|change"') for line in lines)
    assert any(line.endswith(":8 GOTO 'npu_end'") for line in lines)
    assert "npu0: Removing the symlinks recorded for '/dev/npu0'" in lines
    assert not any("Setting permissions" in line or "Result" in line for line in lines)


# Rules and results from a run of systemd-udevd 252 (Debian 12) `udevadm test --action=add
# /sys/class/mem/null`: uid 65534, gid 44 (video), mode 0604, these links and properties.
UDEV252_RULES = '''SUBSYSTEM!="mem", GOTO="d_end"
ACTION!="add|change", GOTO="d_end"
KERNEL!="nu[l]?", GOTO="d_end"
KERNEL=="null|zero", SUBSYSTEM=="mem", \\
    OWNER="nobody", GROUP="audio", MODE="0640"
KERNEL=="nul*", SYMLINK+="d/by-name/$kernel-%n-$major:%m x/%k", ENV{D_ONE}="1"
MODE:="0604"
MODE="0666", GROUP:="video"
GROUP="audio"
ATTR{dev}=="1:3", SYMLINK+="d/by-dev/$attr{dev}", ENV{D_ATTR}="%s{dev}"
ATTR{nonexistent}!="x", ENV{D_NEVER}="1"
DEVPATH=="/devices/virtual/*", ENV{D_PATH}="$devpath"
LABEL="d_end"
'''


@pytest.mark.skipif(not os.path.exists("/sys/devices/virtual/mem/null/dev"), reason="needs Linux sysfs")
def test_same_result_as_systemd_udevd_252() -> None:
    out = rs(UDEV252_RULES).evaluate(Uevent("add", "/devices/virtual/mem/null", "mem", "null", 1, 3),
                                     sysroot="/sys")
    assert (out.owner, out.group, out.mode) == ("nobody", "video", 0o604)
    assert sorted(out.symlinks) == ["d/by-dev/1:3", "d/by-name/null--1:3", "x/null"]
    assert {k: v for k, v in out.properties.items() if k.startswith("D_")} == {
        "D_ONE": "1", "D_ATTR": "1:3", "D_PATH": "/devices/virtual/mem/null"}
