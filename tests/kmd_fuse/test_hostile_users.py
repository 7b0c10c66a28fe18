"""Local users attacking the driver from the shell (issue 11): a path name, a process
name, a planted state directory, a sibling devroot, a stale pid file. Each must end in a
clear error for the attacker and leave the daemon serving everyone else."""
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from kmd_fuse import paths
from tests.support.device import MountedNpu, open_to_others, start_npu, stop_npu, wait_until
from tests.support.shell import NOBODY, attr_dir, sh

FRAME = Path(__file__).with_name("npu_frame.py")


def answers(npu: MountedNpu) -> bool:
    """The daemon still serves: a raw GET_INFO on the node succeeds."""
    return "CORES=2" in sh('"$PY" "$FRAME" "$N" info', N=str(npu.node)).stdout


def test_stat_of_a_huge_client_name_is_enoent_and_the_daemon_lives(npu):
    open_to_others(attr_dir(npu).parent)
    for name in ("18446744069414584320", "99999999999999999999999", "0001", "-1", "1e9"):
        gone = sh('stat "$D/clients/$C"', D=str(attr_dir(npu)), C=name, uid=NOBODY, check=False)
        assert gone.returncode == 1 and "No such file or directory" in gone.stderr, (name, gone.stderr)
    assert answers(npu)


def test_a_client_named_with_a_newline_cannot_break_the_stats(npu):
    holder = textwrap.dedent("""
        import ctypes, os, sys
        ctypes.CDLL(None).prctl(15, b"x\\ny\\tz\\x1b", 0, 0, 0)   # PR_SET_NAME
        fd = os.open(sys.argv[1], os.O_RDWR)
        print("open", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder, str(npu.node)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    open_to_others(attr_dir(npu).parent)
    try:
        assert proc.stdout.readline() == "open\n"
        out = sh('cat "$D"/clients/*', D=str(attr_dir(npu)), uid=NOBODY).stdout
        comms = [line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("comm:")]
        assert "x?y?z?" in comms
        smi = sh('"$PY" -m libnpu.tools smi --devroot "$R" --json --interval 0.1', R=str(npu.devroot))
        assert smi.returncode == 0
        assert answers(npu)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_every_fuse_handler_answers_eio_on_an_unexpected_exception():
    import errno

    import pyfuse3
    import trio

    from kmd_fuse.fuse_ops import contain_errors

    @contain_errors
    class Broken(pyfuse3.Operations):
        async def getattr(self, inode, ctx=None):
            raise OverflowError("int too big to convert")

        async def lookup(self, parent_inode, name, ctx=None):
            raise pyfuse3.FUSEError(errno.ENOENT)

    async def call(method, *args):
        with pytest.raises(pyfuse3.FUSEError) as info:
            await method(*args)
        return info.value.errno

    assert trio.run(call, Broken().getattr, 1) == errno.EIO
    assert trio.run(call, Broken().lookup, 1, b"x") == errno.ENOENT   # FUSE errors pass through


@pytest.fixture
def shm_root():
    """A shared-memory root of the test's own (the real one serves the other tests)."""
    root = Path("/dev/shm") / f"npu-test-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def kmd(devroot: Path, *args: str, shm: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(devroot)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NPU_SHM_ROOT": str(shm)})


def test_a_state_root_another_user_made_is_neither_trusted_nor_a_dead_end(tmp_path, shm_root):
    devroot = tmp_path / "dev"
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "precious").write_text("keep me")
    # The attacker creates the shared-memory root before root ever ran the driver, with a
    # symlink where the devroot's state directory goes. Root cannot trust it, and must not
    # be locked out by it either (issue 24, finding 4).
    state_name = paths.default_state_dir(devroot.resolve()).name
    sh('mkdir -m 777 "$S" && ln -s "$V" "$S/$K"', S=str(shm_root), V=str(victim), K=state_name, uid=NOBODY)
    try:
        started = kmd(devroot, "start", shm=shm_root)
        assert started.returncode == 0, started.stderr
        (note,) = started.stderr.splitlines()
        state = paths.state_dir(devroot.resolve())
        assert "belongs to uid 65534" in note and f"goes to {state} instead" in note
        assert state.parent == shm_root.parent and state.name.startswith("npu-emu-0-")
        assert (state.stat().st_uid, stat.S_IMODE(state.stat().st_mode)) == (0, 0o711)
        assert (devroot / paths.STATE_MARKER).read_text() == f"{state}\n"
        assert answers(MountedNpu(devroot, 1))
    finally:
        stopped = kmd(devroot, "stop", shm=shm_root)
    assert stopped.returncode == 0 and "Traceback" not in stopped.stderr
    assert not state.exists() and os.listdir(devroot) == []
    assert os.stat(victim).st_mode & 0o777 == 0o700 and sorted(os.listdir(victim)) == ["precious"]
    assert os.stat(shm_root).st_uid == NOBODY and os.listdir(shm_root) == [state_name]   # untouched
    assert os.readlink(shm_root / state_name) == str(victim)
    assert not paths.is_mounted(devroot / "npu0")


def test_a_symlinked_state_directory_is_refused(tmp_path, shm_root):
    devroot = tmp_path / "dev"
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    shm_root.mkdir(mode=0o711)
    os.symlink(victim, shm_root / paths.default_state_dir(devroot.resolve()).name)
    started = kmd(devroot, "start", shm=shm_root)
    assert started.returncode == 1 and "symbolic link" in started.stderr
    assert kmd(devroot, "stop", shm=shm_root).returncode == 1
    assert os.listdir(victim) == [] and os.stat(victim).st_mode & 0o777 == 0o700


def test_sibling_devroots_get_trees_of_their_own(tmp_path):
    a, b = MountedNpu(tmp_path / "a", 1), MountedNpu(tmp_path / "b", 1)
    a.devroot.mkdir()
    b.devroot.mkdir()
    try:
        assert a.kmd("start", check=False).returncode == 0
        assert b.kmd("start", check=False).returncode == 0
        tree_a, tree_b = tmp_path / "a.sys/class/npu/npu0", tmp_path / "b.sys/class/npu/npu0"
        sh('echo 1 > "$D/reset"', D=str(tree_a))
        assert (tree_a / "reset_count").read_text() == "1\n"
        assert (tree_b / "reset_count").read_text() == "0\n"
        b.kmd("stop")
        assert (tree_a / "cores").read_text() == "2\n" and answers(a)
    finally:
        a.kmd("stop", check=False)
        b.kmd("stop", check=False)
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()


def test_a_sysroot_served_by_another_device_is_refused_and_left_alone(tmp_path):
    shared = tmp_path / "sys"
    a, b = MountedNpu(tmp_path / "a", 1), MountedNpu(tmp_path / "b", 1)
    a.devroot.mkdir()
    b.devroot.mkdir()
    try:
        assert a.kmd("start", "--sysroot", str(shared), check=False).returncode == 0
        second = b.kmd("start", "--sysroot", str(shared), check=False)
        assert second.returncode == 1 and "served by another device" in second.stderr
        b.kmd("stop", "--sysroot", str(shared), check=False)
        assert (shared / "class/npu/npu0/cores").read_text() == "2\n" and answers(a)
    finally:
        a.kmd("stop", "--sysroot", str(shared), check=False)
        b.kmd("stop", "--sysroot", str(shared), check=False)
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()


def test_a_stale_pid_file_neither_blocks_start_nor_kills_a_bystander(tmp_path):
    npu = start_npu(tmp_path)
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        pid_file = paths.pid_file(npu.devroot, 0)
        daemon = int(pid_file.read_text())
        os.kill(daemon, signal.SIGKILL)
        assert wait_until(lambda: not os.path.exists(f"/proc/{daemon}")
                          or "State:\tZ" in Path(f"/proc/{daemon}/status").read_text())
        pid_file.write_text(f"{bystander.pid}\n")          # the dead daemon's pid, reused
        started = npu.kmd("start")
        assert "already served" not in started.stdout and "up (pid" in started.stdout
        assert answers(npu)
        stop_npu(npu)
        assert bystander.poll() is None                    # never signalled
    finally:
        bystander.kill()
        bystander.wait()
        npu.kmd("stop", check=False)
