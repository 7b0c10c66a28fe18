"""``npu-kmd start --devices N``: a start that fails, or is interrupted, leaves no process
and no file of its own behind (issue 28: after a failed 128-device start, chip processes
lived on as orphans and the cores' self-test directories stayed in /dev/shm)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kmd_fuse import paths
from kmd_fuse.hw import ChipConfig, Hardware
from tests.support.device import REPO, MountedNpu, stop_npu, wait_until
from tests.support.fleet import mounted, processes_of


def test_a_start_that_fails_leaves_nothing_of_its_own(tmp_path):
    """npu0 and npu1 come up together; npu1's daemon fails (its bus directory cannot be
    made) while npu0 is still starting: the start ends with 1 and stops it, and of the two
    devices only their logs stay (for the reason)."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    npu = MountedNpu(tmp_path / "dev", 2)
    npu.devroot.mkdir()
    state = paths.private_state_dir(npu.devroot)  # what start makes first, made here to put the obstacle in
    obstacle = state / "npu1"
    try:
        obstacle.write_text("in the way of npu1's bus directory\n")
        result = npu.kmd("start", "--devices", "2", check=False)
        assert result.returncode == 1, result
        assert "npu1: daemon exited with status 1" in result.stderr
        assert wait_until(lambda: not processes_of(npu.devroot), 60), processes_of(npu.devroot)
        assert sorted(p.name for p in state.iterdir() if p.name.startswith("npu")) == \
            ["npu0.log", "npu1", "npu1.log"]
        assert not list(state.rglob("npu-self-test-*"))
        assert not mounted(npu.devroot)
    finally:
        obstacle.unlink(missing_ok=True)
        stop_npu(npu)


def test_a_start_ended_by_sigterm_leaves_nothing(tmp_path):
    """SIGTERM (a service manager stopping it) while 2 devices come up ends the start as
    Ctrl-C does: exit 130, every daemon, chip and core it started gone, nothing mounted,
    no state directory."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_DEVROOT", "NPU_SYSROOT", "NPU_DEBUG")}
    proc = subprocess.Popen([sys.executable, "-m", "kmd_fuse.cli", "start", "--devices", "2", "--devroot",
                             str(devroot)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        assert wait_until(lambda: proc.poll() is not None or paths.ready_file(devroot, 0).exists(), 120)
        assert proc.poll() is None, proc.communicate()
        state = paths.state_dir(devroot)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (130, "npu-kmd: interrupted\n"), (out, err)
        assert wait_until(lambda: not processes_of(devroot), 60), processes_of(devroot)
        assert not mounted(devroot)
        assert not state.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                       capture_output=True, timeout=120)
        assert not mounted(devroot)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_a_chip_whose_driver_died_while_it_started_does_not_live_on(tmp_path):
    """The driver dies right after spawning its chip, before the chip's imports are done
    (before it asks for SIGKILL at its parent's death): the chip must not run on as an
    orphan (72 did after a failed 128-device start)."""
    class DiesAtOnce(Hardware):
        def _start_chip(self) -> None:
            super()._start_chip()
            assert self.process is not None
            os.write(write_end, f"{self.process.pid}\n".encode())
            os._exit(0)

    read_end, write_end = os.pipe()
    driver = os.fork()
    if driver == 0:                         # the driver: powers the chip on and dies at once
        try:
            DiesAtOnce(tmp_path / "bus", ChipConfig(cores=1)).power_on()
        finally:
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        chip = int(pipe.readline())
    os.waitpid(driver, 0)
    try:
        assert wait_until(lambda: not _alive(chip), 60), f"chip {chip} outlived its driver"
    finally:
        if _alive(chip):
            os.kill(chip, signal.SIGKILL)
