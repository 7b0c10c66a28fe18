"""Shared fixtures: a real emulated device, mounted under a temporary devroot.

Every mount is unmounted and every daemon/chip process ended at teardown, also
when a test fails."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class MountedNpu:
    devroot: Path
    devices: int

    @property
    def node(self) -> Path:
        return self.devroot / "npu0"

    def kmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(self.devroot)],
                              capture_output=True, text=True, check=check, timeout=120)


def start_npu(tmp: Path, devices: int = 1, extra: tuple[str, ...] = ()) -> MountedNpu:
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    npu = MountedNpu(tmp / "dev", devices)
    npu.devroot.mkdir(parents=True, exist_ok=True)
    result = npu.kmd("start", "--devices", str(devices), *extra, check=False)
    if result.returncode:
        npu.kmd("stop", check=False)
        raise RuntimeError(f"npu-kmd start failed:\n{result.stdout}\n{result.stderr}")
    return npu


def stop_npu(npu: MountedNpu) -> None:
    result = npu.kmd("stop", check=False)
    mounts = Path("/proc/self/mounts").read_text()
    assert str(npu.devroot) not in mounts, f"mount left behind: {result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def npu(tmp_path_factory) -> MountedNpu:
    """One device, shared by the tests of a module."""
    mounted = start_npu(tmp_path_factory.mktemp("npu"))
    yield mounted
    stop_npu(mounted)


@pytest.fixture
def fresh_npu(tmp_path) -> MountedNpu:
    """A device of the test's own (for tests that break or reset it)."""
    mounted = start_npu(tmp_path)
    yield mounted
    stop_npu(mounted)


@pytest.fixture
def session(npu):
    import libnpu
    with libnpu.initialize(npu.devroot) as s:
        yield s


@pytest.fixture
def device(session):
    return session.open(0)
