"""``npu doctor``: one line per prerequisite, the fix on each failure, exit 0 only when all pass."""
from __future__ import annotations

import os
import stat

from libnpu.tools.cli import main
from libnpu.tools.doctor import check_fuse, check_fuse_conf


def _lines(text: str) -> dict[str, str]:
    """check name -> its status word."""
    out = {}
    for line in text.splitlines():
        status, _, rest = line.partition("  ")
        out[rest.strip().split(":")[0]] = status.strip()
    return out


def test_all_pass_on_a_running_device(npu, capsys):
    assert main(["doctor", "--devroot", str(npu.devroot)]) == 0
    captured = capsys.readouterr()
    checks = _lines(captured.out)
    assert set(checks) == {"fuse", "fuse.conf", "state", "c-kernels", "npu0", "npu0 attributes"}
    assert all(status in ("ok", "info") for status in checks.values()), captured.out
    assert "npu-emu" in captured.out and captured.err == ""


def test_no_device_fails_with_the_start_command(tmp_path, capsys):
    devroot = tmp_path / "dev"
    devroot.mkdir()
    assert main(["doctor", "--devroot", str(devroot)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  device: no device node under {devroot}; fix: npu-kmd start --devroot {devroot}" in out
    assert _lines(out)["fuse"] == "ok" and "Traceback" not in out


def test_attribute_tree_missing_is_named(npu, tmp_path, capsys, monkeypatch):
    """On the module's device: the marker is put back before anything else reads it."""
    marker = npu.devroot / ".npu-sysroot"
    real = marker.read_text()
    marker.write_text(f"{tmp_path / 'elsewhere'}\n")       # the tree is not where the devroot says
    try:
        assert main(["doctor", "--devroot", str(npu.devroot)]) == 1
    finally:
        marker.write_text(real)
    out = capsys.readouterr().out
    assert _lines(out)["npu0"] == "ok" and _lines(out)["npu0 attributes"] == "FAIL"
    assert "fix: npu-kmd stop --devroot" in out


def test_fuse_for_a_normal_user(tmp_path):
    dev_fuse = tmp_path / "fuse"
    dev_fuse.write_text("")
    no_fuse = check_fuse(euid=1000, dev_fuse=str(tmp_path / "none"))
    assert not no_fuse.ok and "modprobe fuse" in no_fuse.line()
    plain = tmp_path / "fusermount3"
    plain.write_text("#!/bin/sh\n")
    os.chmod(plain, 0o755)
    not_setuid = check_fuse(euid=1000, fusermount=str(plain), dev_fuse=str(dev_fuse))
    assert not not_setuid.ok and f"chmod u+s {plain}" in not_setuid.line()
    os.chmod(plain, 0o755 | stat.S_ISUID)
    if os.stat(plain).st_uid == 0:
        assert check_fuse(euid=1000, fusermount=str(plain), dev_fuse=str(dev_fuse)).ok
    assert check_fuse(euid=0, dev_fuse=str(dev_fuse)).ok


def test_fuse_conf_is_informational(tmp_path):
    conf = tmp_path / "fuse.conf"
    conf.write_text("# user_allow_other\n")
    off = check_fuse_conf(str(conf))
    assert off.ok and off.info and "user_allow_other off" in off.line()
    conf.write_text("user_allow_other\n")
    assert "user_allow_other on" in check_fuse_conf(str(conf)).line()
