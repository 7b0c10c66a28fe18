"""Rootless mode (issue 17): a normal user serves a devroot of their own.

The scenario runs for real as an unprivileged user (npu-rootless, created once with
useradd): start, a DMA job (`npu demo`), ResNet-8, `npu bench nop`, `npu smi` finding the
user's process through the symlinked node, a reset by the device's owner, stop; then
nothing is left (mounts, processes, links, state directory).

The user runs a venv of their own, built once with the system's python3 (the suite's
interpreter may live under /root, out of the user's reach) and cached under
/var/cache/npu-emu, keyed by pyproject.toml and this checkout's path. fusermount3 opens
/dev/fuse as the calling user, and some machines (containers) leave it root's alone: the
scenario then runs in a private mount namespace whose /dev/fuse is a mode-0666 node of
the same device, the mode distributions ship. Nothing of that namespace outlives it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from kmd_fuse import owner, paths
from kmd_fuse.udev import hotplug
from tests.support.device import wait_until
from tests.support.other_user import STAGE_ROOT, repo_for_others
from tests.support.shell import NOBODY, sh

USER = "npu-rootless"
SQUATTED_USER = "npu-squatted"
CACHE = STAGE_ROOT
SYSTEM_PYTHON = "/usr/bin/python3"
FUSE_DEVICE = Path("/dev/fuse")


# ---- the pieces, without a second user ----

def test_state_root_is_roots_for_root_and_the_users_own_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("NPU_SHM_ROOT", raising=False)
    assert paths.state_root(uid=0) == Path("/dev/shm/npu-emu")
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 4321, 4321)
    assert paths.state_root(uid=4321, runtime_dir=str(runtime)) == runtime / "npu-emu"
    # someone else's runtime directory (sudo keeps root's $XDG_RUNTIME_DIR): the per-uid one
    assert paths.state_root(uid=4322, runtime_dir=str(runtime)) == Path("/dev/shm/npu-emu-4322")
    runtime.chmod(0o777)       # writable by others: not a safe place either
    assert paths.state_root(uid=4321, runtime_dir=str(runtime)) == Path("/dev/shm/npu-emu-4321")
    assert paths.state_root(uid=4321, runtime_dir="") == Path("/dev/shm/npu-emu-4321")


def test_fuse_conf_user_allow_other_is_read_line_by_line(tmp_path):
    conf = tmp_path / "fuse.conf"
    for text, allowed in (("#user_allow_other\n", False), ("# user_allow_other is off\n", False),
                          ("mount_max = 1000\nuser_allow_other\n", True), ("  user_allow_other  # yes\n", True),
                          ("user_allow_other_not\n", False)):
        conf.write_text(text)
        assert owner.user_allow_other(str(conf)) is allowed, text
    assert owner.user_allow_other(str(tmp_path / "missing")) is False


def test_the_owner_is_root_or_the_drivers_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert owner.rootless() and owner.is_owner(1000) and owner.is_owner(0) and not owner.is_owner(1001)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert not owner.rootless() and owner.is_owner(0) and not owner.is_owner(1000)


def test_allow_other_only_when_root_or_fuse_conf_allows(monkeypatch):
    from kmd_fuse import daemon
    root = Path("/tmp/npu-rootless-options")
    assert "allow_other" in daemon.mount_options(root, 0)      # the suite runs as root
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(owner, "user_allow_other", lambda conf=owner.FUSE_CONF: False)
    assert "allow_other" not in daemon.mount_options(root, 0)
    monkeypatch.setattr(owner, "user_allow_other", lambda conf=owner.FUSE_CONF: True)
    assert "allow_other" in daemon.mount_options(root, 0)


def test_rootless_links_never_replace_or_remove_what_is_not_theirs(tmp_path):
    root, sys_root = tmp_path / "dev", tmp_path / "sys"
    root.mkdir()
    node, tree = paths.node_path(root, 0), paths.device_dir(sys_root, 0)
    node.write_text("mine")
    with pytest.raises(hotplug.MountError) as caught:
        hotplug.make_link(node, paths.fuse_dir(root, 0) / "npu0")
    assert caught.value.errno == errno.EEXIST and node.read_text() == "mine"
    node.unlink()
    node.symlink_to("/elsewhere")
    tree.parent.mkdir(parents=True)
    tree.symlink_to("/elsewhere/too")
    assert hotplug.remove_links(root, sys_root, 0) == []
    assert os.readlink(node) == "/elsewhere" and os.readlink(tree) == "/elsewhere/too"
    node.unlink()
    tree.unlink()
    for link, target in hotplug.link_targets(root, sys_root, 0).items():
        hotplug.make_link(link, target)
        hotplug.make_link(link, target)          # again: its own older link is replaced
    assert sorted(hotplug.remove_links(root, sys_root, 0)) == sorted([node, tree])
    assert not os.path.lexists(node) and not os.path.lexists(tree)


# ---- the whole stack as a normal user ----

def _system_user(name: str) -> pwd.struct_passwd:
    """The unprivileged user ``name``, created with useradd if missing (skips without root)."""
    if os.geteuid() != 0:
        pytest.skip("creating the unprivileged user needs root")
    for tool in ("useradd", "setpriv", "unshare", "fusermount3"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    made = subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                          capture_output=True, text=True)
    if made.returncode not in (0, 9):        # 9: created meanwhile
        pytest.skip(f"cannot create the user {name}: {made.stderr.strip()}")
    return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def rootless_user() -> pwd.struct_passwd:
    return _system_user(USER)


@pytest.fixture(scope="module")
def squatted_user() -> pwd.struct_passwd:
    """A second user, the victim of the strangers below (`nobody` takes its /dev/shm/npu-emu-<uid>
    first, or plants a link where its tree goes): a user of its own, so that these scenarios
    and a concurrent run's npu-rootless scenarios never meet (each run's teardown kills its
    user's processes and removes that user's state)."""
    return _system_user(SQUATTED_USER)


def _venv_key(source: Path) -> str:
    digest = hashlib.sha256((source / "pyproject.toml").read_bytes() + str(source).encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def rootless_venv(rootless_user) -> Path:
    """A venv the user can execute, with this checkout installed editable (built once): the
    clone itself, or the copy staged for other users when they cannot read the clone."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is missing: no interpreter a normal user can run")
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True)
    if version.stdout.strip() != "True":
        pytest.skip(f"{SYSTEM_PYTHON} is older than 3.11")
    CACHE.mkdir(parents=True, exist_ok=True)
    CACHE.chmod(0o755)
    source = repo_for_others()
    venv = CACHE / f"rootless-venv-{_venv_key(source)}"
    with open(CACHE / "rootless-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # a parallel run waits for the first build
        if not (venv / ".npu-installed").exists():
            shutil.rmtree(venv, ignore_errors=True)
            for cmd in ([SYSTEM_PYTHON, "-m", "venv", str(venv)],
                        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "-e", str(source)]):
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
                if done.returncode:
                    shutil.rmtree(venv, ignore_errors=True)
                    pytest.skip(f"cannot build the rootless venv ({' '.join(cmd[:3])}): {done.stderr.strip()[-500:]}")
            (venv / ".npu-installed").touch()
    return venv


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


@contextlib.contextmanager
def _workdir_of(user: pwd.struct_passwd):
    """A directory of the user's own; afterwards every process the scenario left is killed
    (by pid: only this suite runs as that user) and its state removed."""
    workdir = Path(tempfile.mkdtemp(prefix="npu-rootless-", dir="/tmp"))
    os.chown(workdir, user.pw_uid, user.pw_gid)
    try:
        yield workdir
    finally:
        for pid in _processes_of(user.pw_uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for state in Path("/dev/shm").glob(f"npu-emu-{user.pw_uid}*"):
            shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def user_dir(rootless_user):
    with _workdir_of(rootless_user) as workdir:
        yield workdir


@pytest.fixture
def squatted_dir(squatted_user):
    with _workdir_of(squatted_user) as workdir:
        yield workdir


def _fuse_node_for_everyone(workdir: Path) -> Path | None:
    """A mode-0666 node of /dev/fuse's device when /dev/fuse itself is closed to other users."""
    st = FUSE_DEVICE.stat()
    if st.st_mode & 0o006 == 0o006:
        return None
    holder = workdir / "fusedev"
    holder.mkdir(mode=0o755)
    node = holder / "fuse"
    os.mknod(node, stat.S_IFCHR | 0o666, st.st_rdev)
    node.chmod(0o666)
    return node


def _run_as_user(user: pwd.struct_passwd, venv: Path, workdir: Path, script: str, open_fuse: bool = True) -> str:
    """Run a bash script (argument $1: ``workdir``) as ``user`` with ``venv`` first on PATH;
    its stdout, once it printed DONE without a traceback. ``open_fuse``: give the user a
    /dev/fuse they may open (see the module doc) when the machine's is root's alone."""
    # The chip's C kernels built first, in the user's own cache: a chip building them while it
    # powers on (a fresh cache after a C change: 22 s at load 10) misses the driver's 20 s
    # deadline, is killed mid-build, and every later start fails the same way.
    (workdir / "scenario.sh").write_text("python -m firmware_sim.kernels.native > /dev/null 2>&1 || true\n" + script)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
               "env", "-i", f"HOME={user.pw_dir}", f"PATH={venv}/bin:/usr/bin:/bin", "LC_ALL=C",
               "bash", str(workdir / "scenario.sh"), str(workdir)]
    fuse_node = _fuse_node_for_everyone(workdir) if open_fuse else None
    if fuse_node is not None:
        inner = " ".join(f"'{arg}'" for arg in as_user)
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c",
               f"mount --bind '{fuse_node}' {FUSE_DEVICE} && exec {inner}"]
    else:
        cmd = as_user
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=workdir)
    assert done.returncode == 0 and "DONE" in done.stdout, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stdout + done.stderr
    return done.stdout


def _wait_until_gone(uid: int) -> dict[int, str]:
    """The user's processes still alive after a while (the chip's exit just after its daemon)."""
    wait_until(lambda: not _processes_of(uid))
    return {pid: _cmdline(pid) for pid in _processes_of(uid)}


SCENARIO = r"""
set -euo pipefail
D=$1
start=$(npu-kmd start --devroot "$D/dev" --sysroot "$D/sys" --memory 256M)
echo "START $start"
echo "NODE $(readlink "$D/dev/npu0")"
echo "TREE $(readlink "$D/sys/class/npu/npu0")"
echo "ACCEL $(readlink "$D/dev/accel/accel0")"
echo "NODEMODE $(stat -L -c '%a %u %g' "$D/dev/npu0")"
echo "STATUS $(npu-kmd status --devroot "$D/dev")"
echo "NICES $(ps -o ni= -u "$(id -u)" | sort -un | tr -s ' \n' ' ')"
# this user's mounts only: a new mount namespace shows other tests' mounts too
mounts() { grep ' npu-emu:' /proc/self/mountinfo | grep "user_id=$(id -u)," || true; }
mounts | sed 's/^/MOUNT /'
npu demo --devroot "$D/dev" | sed 's/^/DEMO /'
npu run "$D/model.tflite" --devroot "$D/dev" --repeat 1 --no-progress | sed 's/^/RUN /'
npu bench nop --devroot "$D/dev" -n 200 | sed 's/^/BENCH /'
python3 -c 'import os, signal, sys; os.open(sys.argv[1], os.O_RDWR); print(os.getpid(), flush=True); signal.pause()' \
    "$D/dev/npu0" > "$D/holder.pid" &
holder=$!
while [ ! -s "$D/holder.pid" ]; do sleep 0.05; done
echo "HOLDER $(cat "$D/holder.pid")"
echo "SMI $(npu smi --devroot "$D/dev" --json | tr -d '\n')"
kill "$holder"; wait "$holder" || true
echo 1 > "$D/sys/class/npu/npu0/reset"
echo "RESETS $(cat "$D/sys/class/npu/npu0/reset_count")"
npu-kmd stop --devroot "$D/dev" | sed 's/^/STOP /'
echo "AFTER-MOUNTS $(mounts | wc -l)"
echo "AFTER-DEV $(ls -A "$D/dev" | tr '\n' ' ')"
echo "AFTER-CLASS $(ls -A "$D/sys/class/npu" | tr '\n' ' ')"
echo "DONE"
"""


def _lines(out: str, tag: str) -> list[str]:
    return [line[len(tag) + 1:] for line in out.splitlines() if line.startswith(tag + " ")]


def test_a_normal_user_runs_the_whole_stack_and_leaves_nothing(rootless_user, rootless_venv, user_dir,
                                                                resnet8_path):
    uid, gid = rootless_user.pw_uid, rootless_user.pw_gid
    shutil.copy(resnet8_path, user_dir / "model.tflite")
    os.chown(user_dir / "model.tflite", uid, gid)
    out = _run_as_user(rootless_user, rootless_venv, user_dir, SCENARIO)

    state = Path(f"/dev/shm/npu-emu-{uid}")
    fuse = _lines(out, "NODE")[0].rsplit("/", 1)[0]
    assert fuse.startswith(f"{state}/") and fuse.endswith("/.fuse-npu0")
    assert _lines(out, "TREE") == [f"{fuse}/device"] and _lines(out, "ACCEL") == ["../npu0"]
    mode, node_uid, node_gid = _lines(out, "NODEMODE")[0].split()
    assert (mode, int(node_uid), int(node_gid)) == ("660", uid, gid)     # the rules' mode; render is not theirs
    assert "mounted, attributes" in _lines(out, "STATUS")[0]
    # the chip's cores ask for a raised priority (firmware_sim.priority): not the user's to take
    assert all(int(nice) >= 0 for nice in _lines(out, "NICES")[0].split())
    mount = _lines(out, "MOUNT")
    assert len(mount) == 1 and f"user_id={uid}" in mount[0]
    assert ("allow_other" in mount[0]) == owner.user_allow_other()
    assert "[done] all steps correct" in _lines(out, "DEMO") and any("[dma]" in line for line in _lines(out, "DEMO"))
    assert any(line.startswith("inference 1:") for line in _lines(out, "RUN"))
    assert any(line.startswith("NOP job") for line in _lines(out, "BENCH"))
    holder = int(_lines(out, "HOLDER")[0])
    smi = json.loads(_lines(out, "SMI")[0])
    assert [p["pid"] for p in smi["devices"][0]["processes"]] == [holder]
    assert _lines(out, "RESETS") == ["1"]
    assert _lines(out, "STOP") == [f"{user_dir}/dev/npu0: stopped"]
    assert _lines(out, "AFTER-MOUNTS") == ["0"]
    assert _lines(out, "AFTER-DEV") == [""] and _lines(out, "AFTER-CLASS") == [""]
    assert _wait_until_gone(uid) == {}
    assert not any(state.iterdir())   # the devroot's state directory is gone; the user's root stays
    assert stat.S_IMODE(state.stat().st_mode) == 0o711 and state.stat().st_uid == uid


CRASH = r"""
set -euo pipefail
D=$1
# this user's mounts only: a new mount namespace shows other tests' mounts too
mounts() { grep ' npu-emu:' /proc/self/mountinfo | grep "user_id=$(id -u)," || true; }
npu-kmd start --devroot "$D/dev" --sysroot "$D/sys" --memory 64M > /dev/null
pid=$(npu-kmd status --devroot "$D/dev" | sed -n 's/.*: pid \([0-9]*\),.*/\1/p')
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
echo "STATUS $(npu-kmd status --devroot "$D/dev" || true)"
npu-kmd stop --devroot "$D/dev" | sed 's/^/STOP /'
echo "AFTER-MOUNTS $(mounts | wc -l)"
echo "AFTER-DEV $(ls -A "$D/dev" | tr '\n' ' ')"
echo "AFTER-CLASS $(ls -A "$D/sys/class/npu" | tr '\n' ' ')"
echo "DONE"
"""


def test_stop_after_a_killed_rootless_daemon_removes_its_mount_and_links(rootless_user, rootless_venv, user_dir):
    out = _run_as_user(rootless_user, rootless_venv, user_dir, CRASH)
    assert ": pid -," in _lines(out, "STATUS")[0]
    assert _lines(out, "STOP") == [f"{user_dir}/dev/npu0: stopped"]
    assert _lines(out, "AFTER-MOUNTS") == ["0"]
    assert _lines(out, "AFTER-DEV") == [""] and _lines(out, "AFTER-CLASS") == [""]
    assert _wait_until_gone(rootless_user.pw_uid) == {}
    assert not any(Path(f"/dev/shm/npu-emu-{rootless_user.pw_uid}").iterdir())


CLOSED_FUSE = r"""
set -uo pipefail
D=$1
npu-kmd start --devroot "$D/dev" --sysroot "$D/sys" --memory 64M 2>&1 | sed 's/^/START /'
echo "RC ${PIPESTATUS[0]}"
npu-kmd stop --devroot "$D/dev" > /dev/null
echo "AFTER-DEV $(ls -A "$D/dev" | tr '\n' ' ')"
echo "DONE"
"""


def test_a_dev_fuse_closed_to_the_user_is_one_clear_error(rootless_user, rootless_venv, user_dir):
    if FUSE_DEVICE.stat().st_mode & 0o006 == 0o006:
        pytest.skip("/dev/fuse is open to every user here")
    out = _run_as_user(rootless_user, rootless_venv, user_dir, CLOSED_FUSE, open_fuse=False)
    assert _lines(out, "RC") == ["1"]
    assert any("chmod 0666 /dev/fuse" in line for line in _lines(out, "START")), out
    assert _lines(out, "AFTER-DEV") == [""]
    assert _wait_until_gone(rootless_user.pw_uid) == {}


# ---- strangers in the way (issue 24) ----

SQUATTED = r"""
set -uo pipefail
D=$1
# this user's mounts only: a new mount namespace shows other tests' mounts too
mounts() { grep ' npu-emu:' /proc/self/mountinfo | grep "user_id=$(id -u)," || true; }
npu-kmd start --devroot "$D/dev" --sysroot "$D/sys" --memory 64M 2>&1 | sed 's/^/START /'
echo "RC ${PIPESTATUS[0]}"
echo "RECORD $(cat "$D/dev/.npu-state")"
echo "NODE $(readlink "$D/dev/npu0")"
npu demo --devroot "$D/dev" | sed 's/^/DEMO /'
pid=$(npu-kmd status --devroot "$D/dev" | sed -n 's/.*: pid \([0-9]*\),.*/\1/p')
echo "MOUNTS $(mounts | wc -l)"
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
npu-kmd stop --devroot "$D/dev" 2>&1 | sed 's/^/STOP /'
echo "AFTER-MOUNTS $(mounts | wc -l)"
echo "AFTER-DEV $(ls -A "$D/dev" | tr '\n' ' ')"
echo "DONE"
"""


def test_a_state_directory_another_user_made_first_is_no_dead_end(squatted_user, rootless_venv, squatted_dir):
    """$XDG_RUNTIME_DIR unset (su, ssh, cron): `nobody` creates /dev/shm/npu-emu-<uid> before
    the user ever starts a driver; /dev/shm is sticky, so the user could never remove it."""
    uid = squatted_user.pw_uid
    squat = Path(f"/dev/shm/npu-emu-{uid}")
    sh('mkdir -m 755 "$S" && touch "$S/bait"', S=str(squat), uid=NOBODY)
    out = _run_as_user(squatted_user, rootless_venv, squatted_dir, SQUATTED)
    assert _lines(out, "RC") == ["0"], out
    (record,) = _lines(out, "RECORD")
    note, up = _lines(out, "START")
    assert f"{squat} belongs to uid {NOBODY}" in note and f"goes to {record} instead" in note
    assert record.startswith(f"{squat}-") and up.endswith("profile standard)")
    assert _lines(out, "NODE") == [f"{record}/.fuse-npu0/npu0"]
    assert "[done] all steps correct" in _lines(out, "DEMO")
    assert _lines(out, "MOUNTS") == ["1"]
    assert _lines(out, "STOP") == [f"{squatted_dir}/dev/npu0: stopped"]
    assert _lines(out, "AFTER-MOUNTS") == ["0"] and _lines(out, "AFTER-DEV") == [""]
    assert _wait_until_gone(uid) == {}
    assert not os.path.exists(record)
    assert squat.stat().st_uid == NOBODY and os.listdir(squat) == ["bait"]      # never used, never touched


PLANTED = r"""
set -uo pipefail
D=$1
R=$(cat "$D/devroot")
npu-kmd start --devroot "$R" --memory 64M 2>&1 | sed 's/^/START /'
echo "RC ${PIPESTATUS[0]}"
npu-kmd stop --devroot "$R" 2>&1 | sed 's/^/STOP /'
echo "PRECIOUS $(ls -A "$D/precious" | tr '\n' ' ')"
echo "AFTER-DEV $(ls -A "$R" | tr '\n' ' ')"
echo "DONE"
"""


def test_a_link_planted_where_a_users_tree_goes_is_refused_in_one_line(squatted_user, rootless_venv, squatted_dir):
    """The documented `--devroot $(mktemp -d)` in /tmp, for a normal user: `nobody` creates
    `<devroot>.sys/class/npu/npu0` first, a link into the user's files."""
    user_dir = squatted_dir
    uid, gid = squatted_user.pw_uid, squatted_user.pw_gid
    user_dir.chmod(0o755)                # like a home directory: others pass through it
    shared = user_dir / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    devroot = Path(tempfile.mkdtemp(prefix="tmp.", dir=shared))
    precious = user_dir / "precious"
    precious.mkdir()
    (precious / "notes").write_text("mine")
    for path in (devroot, precious, precious / "notes"):
        os.chown(path, uid, gid)
    (user_dir / "devroot").write_text(str(devroot))
    tree = shared / f"{devroot.name}.sys" / "class" / "npu" / "npu0"
    sh('mkdir -p "$(dirname "$T")" && ln -s "$V" "$T"', T=str(tree), V=str(precious), uid=NOBODY)
    out = _run_as_user(squatted_user, rootless_venv, user_dir, PLANTED)
    assert _lines(out, "RC") == ["1"]
    (refusal,) = _lines(out, "START")
    assert f"{shared / tree.parts[-4]} belongs to uid {NOBODY}" in refusal and "--sysroot" in refusal
    assert _lines(out, "PRECIOUS") == ["notes "] and _lines(out, "AFTER-DEV") == [""]
    assert os.readlink(tree) == str(precious)
    assert _wait_until_gone(uid) == {}
