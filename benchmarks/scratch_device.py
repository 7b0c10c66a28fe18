"""A device of one's own for the acceptance scripts and the chaos test.

``ScratchDevice`` starts the driver under a temporary devroot exactly as a user would
(``python -m kmd_fuse.cli start``), stops it at the end even on failure, and finds its
processes by looking at /proc rather than at the driver's private files: the daemon
(``kmd_fuse.daemon --devroot <root>``), the chip's main process (the daemon's
``firmware_sim`` child) and the chip's cores (the main process's children).

``Resources`` is what must come back to its baseline once the clients are gone: device
memory in use, contexts, the daemon's file descriptors and resident memory, and the
files in the device's shared-memory state directory.

``DeviceGuard`` is a process (``python -m benchmarks.scratch_device guard``) that stops the
devices under the directories it is told about and removes them when the process that
started them dies without stopping them (SIGKILL, a ``timeout`` wrapper's SIGTERM): the
driver daemonizes, so nothing else would. The test suite's devices have one too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libnpu
from kmd_fuse import paths

_PROJECT = Path(__file__).resolve().parents[1]


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def process_state(pid: int) -> str | None:
    """'R', 'S', 'D', 'Z'... or None when there is no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    return process_state(pid) not in (None, "Z", "X")


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children(pid: int) -> list[int]:
    found = []
    for child in _all_pids():
        fields = _stat_fields(child)
        if fields and int(fields[1]) == pid:
            found.append(child)
    return found


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def wait_until(predicate: Callable[[], bool], timeout: float, period: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period)
    return predicate()


def reap(workers: Iterable[tuple[Any, Any]], grace: float = 10) -> None:
    """Join each ``(process, connection)`` worker of a fuzz run, killing any still alive after ``grace`` s."""
    for proc, _ in workers:
        proc.join(grace)
        if proc.is_alive():
            proc.kill()
            proc.join()


@dataclass(frozen=True)
class Resources:
    """What a device holds; compare a snapshot with the baseline."""
    memory_used: int
    contexts: int          # the snapshot's own context included
    daemon_fds: int
    daemon_rss: int
    shm_files: int

    def leaks_against(self, baseline: Resources, rss_slack: int) -> list[str]:
        """What did not come back to ``baseline`` (RSS may grow by ``rss_slack`` bytes)."""
        leaks = []
        for name in ("memory_used", "contexts", "daemon_fds", "shm_files"):
            now, then = getattr(self, name), getattr(baseline, name)
            if now != then:
                leaks.append(f"{name}: {then} at the start, {now} at the end")
        if self.daemon_rss > baseline.daemon_rss + rss_slack:
            leaks.append(f"daemon RSS grew from {baseline.daemon_rss >> 20} MiB to {self.daemon_rss >> 20} MiB "
                         f"(more than {rss_slack >> 20} MiB)")
        return leaks


class ScratchDevice:
    """``npu-kmd start`` under a temporary devroot; ``stop()`` (or leaving the ``with``
    block) stops it, removes the directory and checks no process of it is left."""

    def __init__(self, *, cores: int = 2, memory: str = "1G", watchdog_ms: int = 2000,
                 extra: tuple[str, ...] = (), parent: str | os.PathLike | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="npu-scratch-", dir=parent))
        self.devroot = (self.tmp / "dev").resolve()
        self.devroot.mkdir()
        self.args = ("--cores", str(cores), "--memory", memory, "--watchdog-ms", str(watchdog_ms), *extra)
        self.daemon_pid = 0
        self._guard: DeviceGuard | None = None

    def _kmd(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(self.devroot)],
                              capture_output=True, text=True, timeout=120)

    def start(self) -> ScratchDevice:
        self._guard = DeviceGuard()
        self._guard.watch(self.tmp)
        result = self._kmd("start", *self.args)
        if result.returncode:
            self.stop()
            raise RuntimeError(f"npu-kmd start failed:\n{result.stdout}{result.stderr}")
        pids = self.find_daemons()
        if len(pids) != 1:
            self.stop()
            raise RuntimeError(f"expected one daemon serving {self.devroot}, found {pids}")
        self.daemon_pid = pids[0]
        return self

    def stop(self) -> list[str]:
        """Stop the device; returns what was left behind (mounts, processes), if anything."""
        problems = []
        result = self._kmd("stop")
        if result.returncode:
            problems.append(f"npu-kmd stop: status {result.returncode}: {result.stdout}{result.stderr}".strip())
        if str(self.devroot) in Path("/proc/self/mounts").read_text():
            problems.append(f"mount left behind under {self.devroot}")
        if not wait_until(lambda: not self.find_daemons() and not self.chip_processes(), 10):
            problems.append(f"processes left behind: daemons {self.find_daemons()}, chip {self.chip_processes()}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        return problems

    def __enter__(self) -> ScratchDevice:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- processes ----
    def find_daemons(self) -> list[int]:
        found = []
        for pid in _all_pids():
            cmd = _cmdline(pid)
            if "kmd_fuse.daemon" in cmd and str(self.devroot) in cmd and is_alive(pid):
                found.append(pid)
        return found

    def chip_main(self) -> int | None:
        """The chip's main process (the daemon's ``firmware_sim`` child), if running."""
        for pid in children(self.daemon_pid):
            if "firmware_sim" in _cmdline(pid) and is_alive(pid):
                return pid
        return None

    def chip_cores(self) -> list[int]:
        main = self.chip_main()
        return [pid for pid in children(main) if is_alive(pid)] if main else []

    def chip_processes(self, include_dead: bool = False) -> list[int]:
        """Every process serving this device's bus, whoever its parent is now (live ones
        only, unless ``include_dead``: zombies too)."""
        bus = str(paths.bus_dir(self.devroot, 0))
        return [pid for pid in _all_pids()
                if bus in _cmdline(pid) and (include_dead or is_alive(pid))]

    def daemon_alive(self) -> bool:
        return is_alive(self.daemon_pid)

    # ---- resources ----
    def shm_files(self) -> int:
        state = paths.state_dir(self.devroot)
        return sum(len(files) + len(dirs) for _, dirs, files in os.walk(state))

    def settle(self, baseline: Resources, rss_slack: int, timeout: float = 30) -> tuple[Resources, list[str]]:
        """Wait up to ``timeout`` s for the device's resources to come back to ``baseline``:
        the last snapshot and what had not come back."""
        wait_until(lambda: not self.resources().leaks_against(baseline, rss_slack), timeout, 0.5)
        final = self.resources()
        return final, final.leaks_against(baseline, rss_slack)

    def resources(self) -> Resources:
        with libnpu.initialize(self.devroot) as session:
            info = session.open(0).info()
            return Resources(info["memory_used"], info["num_contexts"], fd_count(self.daemon_pid),
                             rss_bytes(self.daemon_pid), self.shm_files())


class DeviceGuard:
    """A process that, once its starter closes the pipe or dies, stops the device under each
    directory ``watch`` named (``DIR/dev``) if it is still there, and removes DIR. It holds
    the read end of a pipe only its starter writes, in a session of its own (a ^C meant
    for the starter must not reach it first)."""

    def __init__(self) -> None:
        read_end, self._pipe = os.pipe()
        paths = os.pathsep.join(filter(None, (str(_PROJECT), os.environ.get("PYTHONPATH"))))
        try:
            self._process: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.scratch_device", "guard"], stdin=read_end,
                env={**os.environ, "PYTHONPATH": paths}, start_new_session=True)
        finally:
            os.close(read_end)

    def watch(self, directory: Path) -> None:
        os.write(self._pipe, f"{directory}\n".encode())

    def close(self) -> None:
        """Let the guard do its work now (on what is left) and wait for it."""
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1
        if self._process is not None:
            self._process.wait()
            self._process = None


def guard_devices() -> None:
    """The guard's side: directories from stdin, one a line, until EOF; then each one's
    device stopped if it is still there, and the directory removed."""
    directories = [Path(line.decode().rstrip("\n")) for line in sys.stdin.buffer]
    for directory in directories:
        devroot = directory / "dev"
        if devroot.is_dir():
            subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                           capture_output=True, timeout=120)
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:2] == ["guard"]:
    guard_devices()
