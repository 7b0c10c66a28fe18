"""A driver stopped while its chip powers on ends at once, with its chip, leaving nothing.

The chip's power-on is held (``firmware_sim.startup``'s test-only hold, before the chip's
imports: where a first start builds the C kernels) far longer than the tests wait, so
what the tests find gone was ended by the stop, not by a deadline: a driver stopped while
its chip was in its imports left the chip running as long as they took."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from firmware_sim.startup import HOLD_POWER_ON_ENV
from kmd_fuse import paths, pidfile
from tests.support.device import REPO, wait_until
from tests.support.fleet import chips_of, end_everything_of, kmd_env, mounted, popen_kmd, processes_of

HOLD_S = "300"       # the chips' held power-on: far beyond every wait below
GONE_S = 60          # how long what a stop ended may take to be gone (a deadline for a failing test)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting the FUSE device needs root")


def test_a_sigkilled_start_leaves_its_daemon_powering_on_which_a_stop_ends(tmp_path):
    """A start SIGKILLed while its chip powers on leaves its daemon waiting for the chip (it
    lives on, as every daemon a start spawned does). SIGTERM to that daemon (what ``npu-kmd
    stop`` sends) ends it at once: the daemon kills and reaps its chip and removes its bus
    directory (the chip's memories in /dev/shm) and its pid file itself; ``npu-kmd stop``
    then finds no daemon and removes the devroot's state. Before, the daemon died at the
    signal and its chip, still in its imports, ran on until they ended."""
    devroot = tmp_path / "dev"
    devroot.mkdir()
    start = popen_kmd("start", "--devroot", str(devroot), env=kmd_env(**{HOLD_POWER_ON_ENV: HOLD_S}))
    try:
        assert wait_until(lambda: chips_of(devroot) or start.poll() is not None, 120)
        start.kill()
        start.communicate()
        [chip] = chips_of(devroot)
        state = paths.state_dir(devroot)
        daemon = pidfile.running_pid(paths.pid_file(devroot, 0))
        assert daemon is not None
        os.kill(daemon, signal.SIGTERM)
        assert wait_until(lambda: not processes_of(devroot), GONE_S), processes_of(devroot)
        assert not paths.bus_dir(devroot, 0).exists()
        assert not paths.pid_file(devroot, 0).exists()
        assert not os.path.exists(f"/proc/{chip}")         # reaped, not only dead
        stop = subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                              capture_output=True, text=True, timeout=120, cwd=REPO, env=kmd_env())
        assert stop.returncode == 0, stop
        assert not mounted(devroot)
        assert not state.exists()
    finally:
        end_everything_of(devroot, start)
