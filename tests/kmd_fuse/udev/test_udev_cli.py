"""`python -m kmd_fuse.udev.udevadm test|apply|udevd`: the shell face of the rules engine."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from kmd_fuse.udev.uevent import UeventLog

CMD = [sys.executable, "-m", "kmd_fuse.udev.udevadm"]
DEVPATH = "/devices/platform/npu-emu.0/npu/npu0"


def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "90-test.rules"
    path.write_text('SUBSYSTEM!="npu", GOTO="end"\nACTION!="add|change", GOTO="end"\n'
                    'KERNEL=="npu*", GROUP="0", MODE="0640", SYMLINK+="accel/accel%n"\nLABEL="end"\n')
    return path


def test_cli_test_prints_the_report(tmp_path: Path) -> None:
    done = subprocess.run(CMD + ["test", DEVPATH, "--rules", str(rules_file(tmp_path)), "--devroot", "/dev",
                                 "--devnum", "240:0", "-p", "RESET_COUNT=2", "--action", "change"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "npu0: Result OWNER=root GROUP=0 MODE=0640 SYMLINK=accel/accel0\n" in done.stdout
    assert "ACTION=change\n" in done.stdout and "RESET_COUNT=2\n" in done.stdout


def test_cli_apply_and_errors(tmp_path: Path) -> None:
    devroot = tmp_path / "dev"
    devroot.mkdir()
    (devroot / "npu0").touch()
    rules = str(rules_file(tmp_path))
    done = subprocess.run(CMD + ["apply", DEVPATH, "--rules", rules, "--devroot", str(devroot)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(devroot / "npu0").st_mode) == 0o640
    assert os.readlink(devroot / "accel" / "accel0") == "../npu0"
    bad = subprocess.run(CMD + ["test", DEVPATH, "--rules", str(tmp_path / "nope.rules")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "nope.rules: cannot read rules file" in bad.stderr
    gone = subprocess.run(CMD + ["apply", "/devices/platform/npu-emu.5/npu/npu5", "--rules", rules,
                                 "--devroot", str(tmp_path)], capture_output=True, text=True)
    assert gone.returncode == 1 and "device node" in gone.stderr and "does not exist" in gone.stderr


def test_cli_udevd_applies_logged_events(tmp_path: Path) -> None:
    devroot, runroot = tmp_path / "dev", tmp_path / "run"
    devroot.mkdir()
    (devroot / "npu0").touch()
    with UeventLog(runroot) as log:
        log.emit("add", DEVPATH, "npu", devname="npu0", major=240, minor=0)
        log.emit("add", "/devices/platform/npu-emu.1/npu/npu1", "npu", devname="npu1", major=240, minor=1)
        log.emit("remove", DEVPATH, "npu", devname="npu0", major=240, minor=0)
    (devroot / "npu0").chmod(0o666)
    done = subprocess.run(CMD + ["udevd", str(runroot), "--rules", str(rules_file(tmp_path)),
                                 "--devroot", str(devroot), "--all", "--timeout", "0.3"],
                                capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["1 add npu0: applied", "3 remove npu0: applied"]
    assert "2 add npu1: device node" in done.stderr  # npu1 has no node: reported, others go on
    assert stat.S_IMODE(os.stat(devroot / "npu0").st_mode) == 0o640
    assert not (devroot / "accel").exists()  # the remove undid the link


def test_cli_argument_errors(tmp_path: Path) -> None:
    for argv, message in ((["test", DEVPATH, "--devnum", "240"], "--devnum must be MAJOR:MINOR"),
                          (["test", DEVPATH, "-p", "NOEQUALS"], "expected KEY=VALUE"),
                          (["test", DEVPATH, "--action", "explode"], "invalid choice")):
        done = subprocess.run(CMD + argv, capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr
