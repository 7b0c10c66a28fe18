"""The chaos test of issue 11, CI-sized: clients mixing DMA jobs, inferences, async jobs and
allocations while clients, chip cores or the chip's main process are SIGKILLed at random.

Every operation must end, with success or an errno, before a generous bound (job timeout
+ 15 s); no successful job may return wrong data; the daemon never exits; afterwards
nothing leaks (device memory, contexts, the daemon's fds and RSS, /dev/shm files,
processes).  One run per kind of kill, so a failure says which kind broke it, and one with
all of them.  The same implementation runs for ten minutes as ``python -m benchmarks.soak``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import fuzz_frames
from benchmarks.chaos import ChaosConfig, run_chaos
from benchmarks.scratch_device import ScratchDevice, is_alive, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting the FUSE device needs root")

SECONDS = 6        # a run goes on past it until it made its minimum of operations and kills


@pytest.fixture
def scratch_device():
    device = ScratchDevice(watchdog_ms=2000).start()
    yield device
    left = device.stop()
    assert not left, left


@pytest.mark.parametrize("kills", ["client", "chip", "core", "client,core,chip"])
def test_jobs_end_and_nothing_leaks_while_processes_are_killed(scratch_device, kills):
    kinds = tuple(kills.split(","))
    report = run_chaos(scratch_device, ChaosConfig(seconds=SECONDS, kills=kinds, seed=len(kills),
                                                   min_operations=101, min_kills=3))
    print(report.summary())
    assert not report.problems(), report.summary()
    assert sum(report.kills.values()) >= 3, report.summary()
    assert report.operations > 100, report.summary()


def test_random_frames_get_documented_errnos_and_leak_nothing():
    """A few thousand frames of ``benchmarks.fuzz_frames`` (a million in the acceptance run)."""
    result = fuzz_frames.run(3000, 2, "nobody", reply_timeout=30.0, log=lambda *_: None)
    assert result["frames"] == 3000 and not result["daemon_exits"], result
    assert not result["problems"], result


_STARTER = """
import sys
from benchmarks.scratch_device import ScratchDevice
device = ScratchDevice(cores=1, memory="64M").start()
print(device.tmp, device.daemon_pid, flush=True)
sys.stdin.read()
"""


def test_scratch_device_stops_when_its_starter_is_killed(tmp_path):
    """A benchmark killed by SIGKILL (or a ``timeout`` wrapper) cannot run ``stop()``: its
    guard must stop the daemonized driver and remove the directory."""
    starter = subprocess.Popen([sys.executable, "-c", _STARTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    tmp = ""
    try:
        tmp, daemon = starter.stdout.readline().split()
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert wait_until(lambda: not is_alive(int(daemon)) and not Path(tmp).exists(), 120, 0.1), \
            f"daemon {daemon} alive: {is_alive(int(daemon))}; {tmp} exists: {Path(tmp).exists()}"
        assert tmp not in Path("/proc/self/mounts").read_text()
    finally:
        starter.kill()
        starter.wait()
        if tmp and Path(tmp, "dev").is_dir():      # the guard failed: do its work so nothing is left
            subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(Path(tmp, "dev"))],
                           capture_output=True, timeout=120)
