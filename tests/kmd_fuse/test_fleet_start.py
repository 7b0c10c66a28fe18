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
from tests.support.device import REPO, start_npu, stop_npu, wait_until


def processes_of(devroot: Path) -> dict[int, str]:
    """The command lines of the processes serving ``devroot``, by pid: its daemons (their
    ``--devroot``) and their chips and cores (their ``--bus`` in its state directory), whoever
    their parent is now."""
    marks = (f"--devroot {devroot} ", f"{paths.state_dir(devroot)}/")
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and state != "Z" and any(mark in cmdline for mark in marks):
            found[int(entry.name)] = cmdline
    return found


def mounted(devroot: Path) -> list[str]:
    return [line for line in Path("/proc/self/mounts").read_text().splitlines() if str(devroot) in line]


def test_a_start_that_fails_leaves_nothing_of_its_own(tmp_path):
    """npu1..npu3 come up together; npu2's daemon fails (its bus directory cannot be made):
    the start ends with 1, and of npu1..npu3 only their logs stay (for the reason), while
    npu0, started before, goes on serving."""
    npu = start_npu(tmp_path)
    state = paths.state_dir(npu.devroot)
    obstacle = state / "npu2"
    try:
        served = processes_of(npu.devroot)
        assert len(served) == 4                       # daemon, chip, two cores
        obstacle.write_text("in the way of npu2's bus directory\n")
        result = npu.kmd("start", "--devices", "4", check=False)
        assert result.returncode == 1, result
        assert "npu2: daemon exited with status 1" in result.stderr
        assert wait_until(lambda: processes_of(npu.devroot) == served, 60), (served, processes_of(npu.devroot))
        left = sorted(p.name for p in state.iterdir() if p.name.startswith(("npu1", "npu2", "npu3")))
        assert left == ["npu1.log", "npu2", "npu2.log", "npu3.log"]
        assert not list(state.rglob("npu-self-test-*"))
        assert [line for line in mounted(npu.devroot) if "npu0" not in line] == []
        assert npu.kmd("status").stdout.count("mounted,") == 1
    finally:
        obstacle.unlink(missing_ok=True)
        stop_npu(npu)
    assert wait_until(lambda: not processes_of(npu.devroot), 60)


def test_a_start_ended_by_sigterm_leaves_nothing(tmp_path):
    """SIGTERM (a service manager stopping it) while 3 devices come up ends the start as
    Ctrl-C does: exit 130, every daemon, chip and core it started gone, nothing mounted,
    no state directory."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_DEVROOT", "NPU_SYSROOT", "NPU_DEBUG")}
    proc = subprocess.Popen([sys.executable, "-m", "kmd_fuse.cli", "start", "--devices", "3", "--devroot",
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
