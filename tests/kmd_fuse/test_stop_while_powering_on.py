"""A driver stopped while its chip powers on ends at once, with its chip, leaving nothing.

The chip's power-on is held (``firmware_sim.startup``'s test-only hold, before the chip's
imports: where a first start builds the C kernels) far longer than the tests wait, so
what the tests find gone was ended by the stop, not by a deadline: a start SIGTERMed
while its daemon waited for such a chip left the chip running as long as its imports
took (the lead's 60 s power-on made the final CI find one alive)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from firmware_sim.startup import HOLD_POWER_ON_ENV
from kmd_fuse import paths
from tests.support.device import REPO, wait_until
from tests.support.fleet import chips_of, end_everything_of, kmd_env, mounted, popen_kmd, processes_of

HOLD_S = "300"       # the chips' held power-on: far beyond every wait below
GONE_S = 60          # how long what a stop ended may take to be gone (a deadline for a failing test)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting the FUSE device needs root")


def _wait_for_chips(devroot, count: int, *running: subprocess.Popen) -> None:
    """Until ``count`` chips of ``devroot`` exist (their daemons then wait for them)."""
    assert wait_until(lambda: len(chips_of(devroot)) >= count or any(p.poll() is not None for p in running), 120)
    assert all(p.poll() is None for p in running), [p.communicate() for p in running]


def test_a_start_sigtermed_while_its_chip_powers_on_leaves_nothing(tmp_path):
    """SIGTERM to ``npu-kmd start`` while its daemon waits for the chip: exit 130, and the
    daemon, the chip, every mount and the state in /dev/shm are gone."""
    devroot = tmp_path / "dev"
    devroot.mkdir()
    start = popen_kmd("start", "--devroot", str(devroot), env=kmd_env(**{HOLD_POWER_ON_ENV: HOLD_S}))
    try:
        _wait_for_chips(devroot, 1, start)
        state = paths.state_dir(devroot)
        start.send_signal(signal.SIGTERM)
        out, err = start.communicate(timeout=120)
        assert (start.returncode, err) == (130, "npu-kmd: interrupted\n"), (out, err)
        assert wait_until(lambda: not processes_of(devroot), GONE_S), processes_of(devroot)
        assert not mounted(devroot)
        assert not state.exists()
    finally:
        end_everything_of(devroot, start)


def test_npu_kmd_stop_ends_a_device_still_powering_on(tmp_path):
    """A start SIGKILLed while its chip powers on leaves its daemon waiting for the chip
    (it lives on, as every daemon a start spawned does); ``npu-kmd stop`` ends both and
    removes the state."""
    devroot = tmp_path / "dev"
    devroot.mkdir()
    start = popen_kmd("start", "--devroot", str(devroot), env=kmd_env(**{HOLD_POWER_ON_ENV: HOLD_S}))
    try:
        _wait_for_chips(devroot, 1, start)
        state = paths.state_dir(devroot)
        start.kill()
        start.communicate()
        assert chips_of(devroot)
        stop = subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                              capture_output=True, text=True, timeout=120, cwd=REPO, env=kmd_env())
        assert stop.returncode == 0, stop
        assert wait_until(lambda: not processes_of(devroot), GONE_S), processes_of(devroot)
        assert not mounted(devroot)
        assert not state.exists()
    finally:
        end_everything_of(devroot, start)


def test_a_daemon_sigtermed_while_its_chip_powers_on_cleans_up_after_itself(tmp_path):
    """``python -m kmd_fuse.daemon`` (run by hand: nobody cleans up after it) SIGTERMed
    while it waits for its chip: the chip killed and reaped, its bus directory (the chip's
    memories in /dev/shm) and the daemon's pid file removed."""
    devroot = tmp_path / "dev"
    devroot.mkdir()
    with open(tmp_path / "daemon.out", "w") as out:      # not a pipe: a chip left alive would hold it open
        daemon = subprocess.Popen([sys.executable, "-m", "kmd_fuse.daemon", "--devroot", str(devroot)],
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=REPO,
                                  env=kmd_env(**{HOLD_POWER_ON_ENV: HOLD_S}))
    try:
        _wait_for_chips(devroot, 1, daemon)
        chip = chips_of(devroot)[0]
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(120)
        assert not os.path.exists(f"/proc/{chip}"), f"chip {chip} outlived its daemon (or was not reaped)"
        assert not paths.bus_dir(devroot, 0).exists()
        assert not paths.pid_file(devroot, 0).exists()
        assert not processes_of(devroot)
    finally:
        end_everything_of(devroot, daemon)
