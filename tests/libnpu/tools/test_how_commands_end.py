"""How ``npu`` and ``npu-kmd`` end when the user stops them, run as the user runs them (the
console scripts, real processes, a real SIGINT): a Ctrl-C at any moment ends with one line
``<prog>: interrupted`` and exit 130, with nothing left running (no daemon, no chip process,
no mount, no context on the device); a reader that goes away from stdout (``| head``) ends it
silently with exit 141 (npu_console.py, README "Exit codes").

The moment of the Ctrl-C is chosen by waiting on the child's state, never by a sleep:
"importing" once the child has mapped numpy's (``npu``) or cffi's (``npu-kmd``) C module, while it
imports the CLI (before the fix, the console script imported it outside any handler), "running" once it holds a
context on the device, "spawning" once ``npu-kmd start``'s daemon process exists."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kmd_fuse import paths
from tests.support.device import REPO, wait_until
from tests.support.shell import attr_dir

BIN = Path(sys.executable).parent
NPU, KMD = BIN / "npu", BIN / "npu-kmd"
pytestmark = pytest.mark.skipif(not (NPU.exists() and KMD.exists()),
                                reason="the console scripts are not installed (scripts/bootstrap installs them)")


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NPU_DEBUG", "NPU_DEVROOT", "NPU_SYSROOT")}


def spawn(*argv: str | Path) -> subprocess.Popen:
    """The command in a process group of its own, as a shell runs a foreground job."""
    return subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=_environ(), process_group=0)


def maps(pid: int, library: str) -> bool:
    """The process has mapped ``library`` (a C extension its imports load)."""
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def poll_until(predicate, proc: subprocess.Popen, deadline_s: float = 120.0) -> None:
    """Poll ``predicate`` every 2 ms (the import window is ~0.1 s) until it holds; fail if the
    child exits first."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert proc.poll() is None, f"exited first ({proc.returncode}): {proc.communicate()}"
        assert time.monotonic() < deadline, "the child never reached the moment"
        time.sleep(0.002)   # the poll interval of this condition wait, not a wait itself


def interrupted(proc: subprocess.Popen, prog: str) -> None:
    """SIGINT now to the command's process group (what Ctrl-C in a terminal does); it ends
    with one line and 130."""
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err + out
    assert err == f"{prog}: interrupted\n"
    assert proc.returncode == 130


def processes_of(devroot: Path) -> dict[int, str]:
    """The command lines of the processes serving ``devroot`` (its daemons and their chips)
    by pid."""
    marks = (f"--devroot {devroot} ", str(paths.state_dir(devroot)))
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and int(entry.name) != os.getpid() and any(mark in cmdline for mark in marks):
            found[int(entry.name)] = cmdline
    return found


def stop_what_serves(devroot: Path) -> None:
    """Teardown: stop the daemons a failed test left (a start that did not undo itself) and
    what they mounted."""
    for pid, cmdline in processes_of(devroot).items():
        if "kmd_fuse.daemon" in cmdline:
            os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not processes_of(devroot), 60)
    subprocess.run([KMD, "stop", "--devroot", devroot], capture_output=True, timeout=120)


def test_ctrl_c_while_npu_imports_or_runs_a_model(npu, resnet8_path):
    """npu run holds a model on the device and infers until stopped."""
    clients = attr_dir(npu) / "clients"
    assert wait_until(lambda: not any(clients.iterdir()), 60)           # an earlier test's contexts have closed
    for moment, reached in (("importing", lambda pid: maps(pid, "_multiarray_umath")),
                            ("running", lambda pid: any(clients.iterdir()))):
        proc = spawn(NPU, "run", resnet8_path, "--repeat", "100000000", "--devroot", npu.devroot)
        try:
            poll_until(lambda: reached(proc.pid), proc)
            interrupted(proc, "npu")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert wait_until(lambda: not any(clients.iterdir()), 60), f"{moment}: a context left on the device"


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_ctrl_c_reaches_bench_nop_and_its_worker_processes(npu):
    """``bench nop --processes 2``: the terminal's SIGINT reaches the workers too; they
    neither print nor stay (before: a KeyboardInterrupt traceback from each)."""
    proc = spawn(NPU, "bench", "nop", "-n", "100", "--processes", "2", "--seconds", "600", "--devroot", npu.devroot)
    workers: list[int] = []
    try:
        def two_workers_run() -> bool:
            workers[:] = [pid for pid in children(proc.pid)
                          if b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
                          and b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
            return len(workers) == 2 and all(maps(pid, "_multiarray_umath") for pid in workers)
        poll_until(two_workers_run, proc)
        interrupted(proc, "npu")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in workers), 60)


@pytest.mark.parametrize("moment", ["importing", "spawning"])
def test_ctrl_c_during_npu_kmd_start_leaves_nothing_running(tmp_path, moment):
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    devroot = tmp_path / "dev"
    devroot.mkdir()
    proc = spawn(KMD, "start", "--devroot", devroot)
    try:
        if moment == "importing":
            poll_until(lambda: maps(proc.pid, "_cffi_backend"), proc)
        else:
            poll_until(lambda: any("kmd_fuse.daemon" in line for line in processes_of(devroot).values()), proc)
        interrupted(proc, "npu-kmd")
        assert wait_until(lambda: not processes_of(devroot), 60), processes_of(devroot)
        assert str(devroot) not in Path("/proc/self/mounts").read_text()
        status = subprocess.run([KMD, "status", "--devroot", devroot], capture_output=True, text=True, timeout=120)
        assert status.returncode == 3 and status.stdout == f"no devices served under {devroot}\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stop_what_serves(devroot)


@pytest.mark.parametrize("argv", [(NPU, "inspect", "resnet8", "--plan"), (KMD, "udev-test", "--devroot", "/dev")],
                         ids=["npu inspect --plan", "npu-kmd udev-test"])
def test_a_reader_gone_from_stdout_ends_it_quietly(argv):
    """``npu inspect resnet8 --plan | head -3`` with head gone before npu writes.  (``--help``
    ends 0: argparse ignores a failed write of the help.)"""
    proc = spawn(*argv)
    proc.stdout.close()                      # the reader is gone before the first write
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert err == ""
    assert proc.returncode == 141
