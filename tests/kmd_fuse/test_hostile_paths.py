"""A local user planting links and directories where root's driver puts its device tree
(issue 24, finding 1). The devroot is the documented `--devroot $(mktemp -d)`: a private
directory inside a world-writable sticky one, where anyone may create
`<devroot>.sys/class/npu/npu0` first. Root's driver must refuse in one line, mount over
nothing it did not make, and `stop` must leave no mount, also after a SIGKILL, and never
unmount a mount it did not make."""
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kmd_fuse import paths
from tests.support.device import detach_mounts_under, mount_table, wait_until
from tests.support.shell import NOBODY, sh


def kmd(devroot: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(devroot)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared_tmp():
    """A world-writable sticky directory like /tmp (the test's own); afterwards the driver of
    every devroot in it is stopped and every mount under it detached, also on failure."""
    if os.geteuid() != 0:
        pytest.skip("root's driver is what is attacked: the test needs root")
    shared = Path(tempfile.mkdtemp(prefix="npu-shared-", dir="/tmp"))
    shared.chmod(0o1777)
    yield shared
    for name in os.listdir(shared):      # by name: a stat may hit a dead daemon's mount (ENOTCONN)
        if name.startswith("tmp.") and not name.endswith(".sys"):
            kmd(shared / name, "stop")
    detach_mounts_under(shared)
    subprocess.run(["rm", "-rf", "--one-file-system", str(shared)], check=False)


def devroot_in(shared: Path) -> Path:
    """`mktemp -d` there: a fresh private directory of root's."""
    return Path(tempfile.mkdtemp(prefix="tmp.", dir=shared))


def victim_in(shared: Path) -> Path:
    victim = shared / "victim"
    victim.mkdir(mode=0o700)
    (victim / "precious").write_text("keep me")
    return victim


def mounts_of(devroot: Path) -> list[str]:
    """Mount points carrying the devroot's device's source name."""
    source = paths.mount_source(devroot, 0)
    return sorted(point for point, seen in mount_table() if seen == source)


def kill_daemon(devroot: Path) -> None:
    pid = int(paths.pid_file(devroot, 0).read_text())
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}/status")
                      or "State:\tZ" in open(f"/proc/{pid}/status").read(), 60)


@pytest.mark.parametrize("plant, refusal", [
    # the finding: the tree's directory a link to the victim, in directories of the attacker's
    ('mkdir -p "$S/class/npu" && ln -s "$V" "$S/class/npu/npu0"', "belongs to uid 65534"),
    ('ln -s "$V" "$S"', "is a symbolic link"),                       # the whole sysroot a link
    ('mkdir -m 1777 "$S"', "belongs to uid 65534"),                  # a sysroot anyone may write
])
def test_a_link_planted_where_the_tree_goes_is_refused_in_one_line_and_nothing_is_mounted(shared_tmp, plant,
                                                                                          refusal):
    devroot, victim = devroot_in(shared_tmp), victim_in(shared_tmp)
    sysroot = devroot.parent / f"{devroot.name}.sys"
    sh(plant, S=str(sysroot), V=str(victim), uid=NOBODY)
    started = kmd(devroot, "start", "--memory", "64M")
    lines = started.stderr.splitlines()
    assert started.returncode == 1 and len(lines) == 1, started.stdout + started.stderr
    assert refusal in lines[0] and "--sysroot" in lines[0] and "Traceback" not in lines[0]
    if os.path.exists(paths.pid_file(devroot, 0)):
        kill_daemon(devroot)              # (the unfixed driver started one: stop must still clean up)
    stopped = kmd(devroot, "stop")
    assert stopped.returncode == 0 and "Traceback" not in stopped.stderr
    assert str(victim) not in {point for point, _ in mount_table()}
    assert os.listdir(victim) == ["precious"] and (victim / "precious").read_text() == "keep me"
    assert mounts_of(devroot) == []
    assert sorted(os.listdir(devroot)) == []                     # nor any record left behind


def test_a_mount_the_driver_did_not_make_is_never_unmounted_and_stop_after_a_kill_removes_the_rest(shared_tmp):
    devroot = devroot_in(shared_tmp)
    tree = devroot.parent / f"{devroot.name}.sys" / "class" / "npu" / "npu0"
    source = paths.mount_source(devroot, 0)
    tree.mkdir(parents=True)
    # A mount named like the device's, that the driver did not make, where its tree goes:
    sh('mount -t tmpfs -o size=1m "$N" "$T" && echo mine > "$T/file"', N=source, T=str(tree))
    started = kmd(devroot, "start", "--memory", "64M")
    assert started.returncode == 1 and len(started.stderr.splitlines()) == 1, started.stdout + started.stderr
    assert "did not make" in started.stderr and (tree / "file").read_text() == "mine\n"
    sh('umount "$T"', T=str(tree))

    assert kmd(devroot, "start", "--memory", "64M").returncode == 0
    record = (paths.state_dir(devroot) / "npu0.mounts").read_text().splitlines()
    recorded = {Path(json.loads(line)["point"]) for line in record if "id" in json.loads(line)}
    assert recorded == {devroot / "npu0", tree, paths.fuse_dir(devroot, 0)}
    assert mounts_of(devroot) == sorted(map(str, recorded))
    kill_daemon(devroot)
    state = paths.state_dir(devroot)
    # ... and one stacked on the dead daemon's tree: stop takes the rest, leaves it alone
    sh('mount -t tmpfs -o size=1m "$N" "$T" && echo mine > "$T/file"', N=source, T=str(tree))
    stopped = kmd(devroot, "stop")
    assert stopped.returncode == 1 and "did not make" in stopped.stderr and "Traceback" not in stopped.stderr
    assert (tree / "file").read_text() == "mine\n"
    assert mounts_of(devroot) == sorted([str(tree), str(tree)])   # the stranger's on the dead daemon's
    assert state.is_dir() and paths.state_dir(devroot) == state   # the record stays for the next stop
    sh('umount "$T"', T=str(tree))
    stopped = kmd(devroot, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert mounts_of(devroot) == [] and not state.exists() and os.listdir(devroot) == []


def test_open_dir_follows_no_link_and_trusts_only_roots_or_the_drivers_directories(shared_tmp):
    """The rule every path the driver creates or mounts on goes through (paths.open_dir)."""
    mine = shared_tmp / "mine"
    old_umask = os.umask(0o077)
    try:
        os.close(paths.open_dir(mine / "a" / "b", create_mode=0o755))
    finally:
        os.umask(old_umask)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o755 for p in (mine, mine / "a", mine / "a" / "b"))
    os.close(paths.open_dir(mine / "a"))                      # /tmp and the sticky dir on the way: fine

    def refusal(path: Path, **kwargs) -> str:
        with pytest.raises(paths.UnsafePathError) as caught:
            os.close(paths.open_dir(path, **kwargs))
        return str(caught.value)

    assert "writable by others (mode 1777)" in refusal(shared_tmp)    # a sticky directory as our own
    os.close(paths.open_dir(shared_tmp, private=False))                # ... or only to make a name in it
    (mine / "link").symlink_to(mine / "a")
    linked = refusal(mine / "link" / "c", create_mode=0o755)
    assert linked == f"{mine / 'link'} is a symbolic link: refusing to follow it"
    assert not (mine / "a" / "c").exists()                             # nothing made through the link
    (mine / "file").write_text("")
    assert refusal(mine / "file" / "x") == f"{mine / 'file'} is not a directory"
    (mine / "a").chmod(0o775)
    assert "writable by others (mode 775)" in refusal(mine / "a" / "b")
    (mine / "a").chmod(0o755)
    sh('mkdir -m 755 "$D"', D=str(shared_tmp / "theirs"), uid=NOBODY)
    assert refusal(shared_tmp / "theirs", hint="give another --sysroot") == (
        f"{shared_tmp / 'theirs'} belongs to uid {NOBODY}, not to root or uid 0 who runs the driver: "
        "refusing to use it (give another --sysroot)")
    os.close(paths.open_dir(shared_tmp / "theirs", uid=NOBODY))        # checked for that user: theirs
