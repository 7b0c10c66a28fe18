"""What a devroot's driver left behind, seen from outside: its processes (daemons, chips,
cores), its mounts, and the ``npu-kmd start`` / ``npu-kmd stop`` runs tests watch."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kmd_fuse import paths
from tests.support.device import REPO


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


def chips_of(devroot: Path) -> list[int]:
    """The pids of ``devroot``'s chip processes (and their cores)."""
    return [pid for pid, cmdline in processes_of(devroot).items() if "-m firmware_sim " in cmdline]


def mounted(devroot: Path) -> list[str]:
    return [line for line in Path("/proc/self/mounts").read_text().splitlines() if str(devroot) in line]


def kmd_env(**extra: str) -> dict[str, str]:
    """The environment of an ``npu-kmd`` the test runs: its own devroot only, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_DEVROOT", "NPU_SYSROOT", "NPU_DEBUG")}
    return {**env, **extra}


def popen_kmd(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``npu-kmd ARGS`` running (no stdin; stdout and stderr piped, as text)."""
    return subprocess.Popen([sys.executable, "-m", "kmd_fuse.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env or kmd_env())


def end_everything_of(devroot: Path, *procs: subprocess.Popen) -> None:
    """A test's clean-up, also when it failed: its ``npu-kmd`` runs killed and reaped,
    ``npu-kmd stop``, then whatever process of the devroot is still there killed (a test
    that found one alive fails on it; the next must not find it too)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                   capture_output=True, timeout=120, cwd=REPO, env=kmd_env())
    for pid in processes_of(devroot):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
