"""The tools' way to the attribute tree (uapi.sysfs_layout.default_sysroot, which libnpu
imports) picks what the driver picks; the devroot's records are believed only when their
owner alone could have written them."""
import os
from pathlib import Path

import pytest

from kmd_fuse import paths
from kmd_fuse.uapi.sysfs_layout import STATE_MARKER, recorded_state_dir, recorded_sysroot
from libnpu.tools.npu_sysfs import SYSROOT_MARKER, default_sysroot
from tests.support.shell import NOBODY


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("NPU_SYSROOT", raising=False)


def test_default_is_next_to_the_devroot(tmp_path: Path) -> None:
    devroot = tmp_path / "dev"
    devroot.mkdir()
    assert default_sysroot(str(devroot)) == str(paths.sysroot(devroot)) == str(tmp_path / "sys")


def test_dev_maps_to_run_not_the_kernels_sys() -> None:
    assert default_sysroot("/dev") == str(paths.sysroot(Path("/dev"))) == "/run/npu-emu/sys"


def test_environment_wins(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NPU_SYSROOT", str(tmp_path / "x"))
    assert default_sysroot(str(tmp_path)) == str(paths.sysroot(tmp_path)) == str(tmp_path / "x")


def test_the_marker_npu_kmd_start_writes_is_followed(tmp_path: Path) -> None:
    assert SYSROOT_MARKER == paths.SYSROOT_MARKER
    (tmp_path / SYSROOT_MARKER).write_text(f"{tmp_path / 'custom'}\n")
    assert default_sysroot(str(tmp_path)) == str(tmp_path / "custom")


def test_sibling_devroots_get_different_trees(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert default_sysroot(str(a)) == str(paths.sysroot(a)) == str(tmp_path / "a.sys")
    assert default_sysroot(str(b)) == str(paths.sysroot(b)) == str(tmp_path / "b.sys")


def test_a_record_is_believed_only_if_nobody_but_the_devroots_owner_could_write_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving the record to another user needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir(mode=0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(f"{tmp_path / 'planted'}\n")
    for marker, read in ((SYSROOT_MARKER, recorded_sysroot), (STATE_MARKER, recorded_state_dir)):
        record = devroot / marker
        record.write_text(f"{tmp_path / 'mine'}\n")
        assert read(devroot) == str(tmp_path / "mine")
        os.chown(record, NOBODY, NOBODY)                  # another user's record
        assert read(devroot) is None
        record.unlink()
        record.symlink_to(elsewhere)                      # a link to a file of the owner's
        assert read(devroot) is None
        record.unlink()
        record.write_text("relative/path\n")
        assert read(devroot) is None
        record.write_text(f"{tmp_path / 'mine'}\n")
        devroot.chmod(0o777)                              # anyone could have put it there
        assert read(devroot) is None
        devroot.chmod(0o755)
        record.unlink()
