"""scripts/npu-mount, npu-unmount, npu-status, npu-monitor, npu-udev-test: which npu-kmd they run, and with what."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = {"npu-mount": "start", "npu-unmount": "stop", "npu-status": "status", "npu-monitor": "monitor",
           "npu-udev-test": "udev-test"}
# An npu-kmd that records how it was called: the wrappers' whole job is this dispatch.
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$0" "$@"\nexit 7\n'


def fake_repo(tmp_path: Path, with_venv: bool) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy2(REPO / "scripts" / name, repo / "scripts" / name)
    if with_venv:
        (repo / ".venv" / "bin").mkdir(parents=True)
        kmd = repo / ".venv" / "bin" / "npu-kmd"
        kmd.write_text(RECORDER)
        kmd.chmod(0o755)
    return repo


def run(script: Path, *args: str, path: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True,
                          env={"PATH": path, "HOME": "/nonexistent"})


@pytest.mark.parametrize("name, sub", sorted(SCRIPTS.items()))
def test_uses_the_repo_venv_and_passes_arguments_through(tmp_path: Path, name: str, sub: str) -> None:
    repo = fake_repo(tmp_path, with_venv=True)
    done = run(repo / "scripts" / name, "--devroot", "/tmp/a b", "-n", "2", path="/usr/bin:/bin")
    assert done.returncode == 7  # npu-kmd's own status comes back
    assert done.stdout.splitlines() == [f"{repo}/scripts/../.venv/bin/npu-kmd", sub, "--devroot", "/tmp/a b",
                                        "-n", "2"]


def test_falls_back_to_npu_kmd_on_path(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, with_venv=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "npu-kmd").write_text(RECORDER)
    (bindir / "npu-kmd").chmod(0o755)
    done = run(repo / "scripts" / "npu-status", "--json", path=f"{bindir}:/usr/bin:/bin")
    assert done.stdout.splitlines() == [str(bindir / "npu-kmd"), "status", "--json"]


def test_found_through_a_symlink_to_the_script(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, with_venv=True)
    link = tmp_path / "npu-mount"
    link.symlink_to(repo / "scripts" / "npu-mount")
    done = run(link, path="/usr/bin:/bin")
    assert done.stdout.splitlines() == [f"{repo}/scripts/../.venv/bin/npu-kmd", "start"]


def test_clear_error_without_npu_kmd(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, with_venv=False)
    done = run(repo / "scripts" / "npu-unmount", path="/usr/bin:/bin")
    assert done.returncode == 127
    assert "npu-unmount: npu-kmd not found (run scripts/bootstrap" in done.stderr


@pytest.mark.skipif(importlib.util.find_spec("kmd_fuse.cli") is None, reason="npu-kmd CLI not built yet")
def test_real_npu_kmd_help() -> None:
    done = subprocess.run([str(REPO / "scripts" / "npu-status"), "--help"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert done.returncode == 0 and "usage" in done.stdout.lower()
