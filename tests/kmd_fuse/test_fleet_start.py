"""``npu-kmd start --devices N``: a start that fails, or is interrupted, leaves no process
and no file of its own behind (issue 28: after a failed 128-device start, chip processes
lived on as orphans and the cores' self-test directories stayed in /dev/shm)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from firmware_sim.startup import HOLD_POWER_ON_ENV
from kmd_fuse import paths
from kmd_fuse.cli import probe
from kmd_fuse.hw import ChipConfig, Hardware
from tests.support.device import MountedNpu, open_to_others, stop_npu, wait_until
from tests.support.fleet import end_everything_of, kmd_env, mounted, popen_kmd, processes_of


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
    """SIGTERM (a service manager stopping it) while 2 devices come up, npu0 up and npu1's
    chip still powering on (held: firmware_sim.startup), ends the start as Ctrl-C does:
    exit 130, every daemon, chip and core it started gone, nothing mounted, no state
    directory. (npu1's chip, still importing, outlived its daemon before.)"""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir()
    proc = popen_kmd("start", "--devices", "2", "--devroot", str(devroot),
                     env=kmd_env(**{HOLD_POWER_ON_ENV: "npu1=300"}))
    try:
        assert wait_until(lambda: proc.poll() is not None or paths.ready_file(devroot, 0).exists(), 240)
        assert proc.poll() is None, proc.communicate()
        state = paths.state_dir(devroot)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (130, "npu-kmd: interrupted\n"), (out, err)
        assert wait_until(lambda: not processes_of(devroot), 60), processes_of(devroot)
        assert not mounted(devroot)
        assert not state.exists()
    finally:
        end_everything_of(devroot, proc)
        assert not mounted(devroot)


def test_two_starts_at_once_and_one_sigtermed_as_it_lets_its_fork_server_go(tmp_path):
    """Two ``npu-kmd start`` of one devroot at once: one brings npu0 up, the other waits
    for it to end. SIGTERM to the first once it reported npu0 up and is letting its fork
    server go (held stopped until then, so the signal lands there) undoes it: exit 130,
    its daemon gone. The second then brings npu0 up itself. Before, the first said
    "interrupted" with its daemon left running (the final CI's failure of the test above:
    its SIGTERM came after npu1 was up and npu0's probe), and two starts at once both
    failed (one's daemon lost the pid file, and its start's undo stopped the other's)."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir()
    starts = [popen_kmd("start", "--devroot", str(devroot)) for _ in range(2)]
    servers: list[int] = []
    try:
        def first_server() -> int | None:
            return next((server for start in starts if (server := _fork_server(start.pid, devroot))), None)
        assert wait_until(lambda: any(start.poll() is not None for start in starts) or first_server(), 120)
        server = first_server()
        assert server is not None, [start.communicate() for start in starts]
        servers.append(server)
        first, second = sorted(starts, key=lambda start: _parent(server) != start.pid)
        # npu0's daemon forked and the server back in its wait: the start has its pid (the reply
        # came before the wait), the start's close is all it will still ask of the server
        def reply_sent() -> bool:
            return (any(_parent(pid) == server for pid in processes_of(devroot))
                    and _waiting_in(server) == "do_epoll_wait")
        assert wait_until(lambda: first.poll() is not None or reply_sent(), 120)
        os.kill(server, signal.SIGSTOP)
        requests = os.readlink(f"/proc/{server}/fd/0")       # the pipe the start writes requests to
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.startswith(f"{devroot}/npu0: up "), (line, first.communicate())
        assert wait_until(lambda: requests not in _descriptors(first.pid), 60)   # closed: letting it go
        first.send_signal(signal.SIGTERM)
        os.kill(server, signal.SIGCONT)
        out, err = first.communicate(timeout=120)
        assert (first.returncode, err) == (130, "npu-kmd: interrupted\n"), (out, err)
        out, err = second.communicate(timeout=240)
        assert second.returncode == 0, (out, err)
        assert out.startswith(f"{devroot}/npu0: up "), (out, err)
        assert err == f"npu-kmd start: waiting for another start of {devroot} to end\n", err
        assert probe(paths.node_path(devroot, 0))["cores"] == 2
        assert len(processes_of(devroot)) == 1 + 1 + 2      # one daemon: the second's (its chip, 2 cores)
    finally:
        for server in servers:
            if _alive(server):
                os.kill(server, signal.SIGCONT)
        end_everything_of(devroot, *starts)


def _fork_server(start: int, devroot) -> int | None:
    """The pid of ``start``'s fork server (its child serving ``devroot``), once it runs."""
    for pid, cmdline in processes_of(devroot).items():
        if "--fork-server" in cmdline and _parent(pid) == start:
            return pid
    return None


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _waiting_in(pid: int) -> str:
    """The kernel function process ``pid`` sleeps in (its wchan), "" if it is gone."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def _descriptors(pid: int) -> set[str]:
    """What process ``pid``'s descriptors point to (``pipe:[N]``, paths)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(os.readlink(fd))
        except OSError:
            continue
    return found


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


def test_another_user_holding_an_flock_on_the_devroot_does_not_hold_up_a_start():
    """The one-start-at-a-time lock is a file of the driver's user (mode 0600) that no other
    user can open, so none can hold it. Before, the start locked the devroot itself, which
    anyone who can read it (/dev: every user) could flock and so stall every start."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    home = Path(tempfile.mkdtemp(prefix="npu-flock-"))
    npu = MountedNpu(home / "dev", 1, home)
    npu.devroot.mkdir(mode=0o755)
    open_to_others(npu.devroot)
    os.chmod(npu.devroot, 0o755)
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "flock", "--exclusive", str(npu.devroot), "-c", "echo held; exec cat"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = npu.kmd("start", check=False)
        assert result.returncode == 0 and "waiting" not in result.stderr, result
        assert not (npu.devroot / ".npu-start.lock").exists()      # the ended start removed its lock
    finally:
        holder.communicate("")
        end_everything_of(npu.devroot)
        stop_npu(npu)
        shutil.rmtree(home, ignore_errors=True)      # nothing mounted in it now (stop_npu checked)
