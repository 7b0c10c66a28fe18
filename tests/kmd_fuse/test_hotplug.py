"""The device appearing, changing and going as udev sees it: symlinks from the rules,
uevents in order (add, change per reset, remove), a crashed driver cleaned up by
`npu-kmd stop`, and the shell tools (scripts/, npu smi) on the live tree."""
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kmd_fuse import paths
from kmd_fuse.udev.uevent import Uevent
from tests.support.device import MountedNpu, stop_npu, wait_until
from tests.support.shell import REPO, attr_dir, kv, sh

LINKS = {"accel/accel0": "../npu0", "npu/by-path/platform-npu-emu.npu0": "../../npu0",
         "npu/by-model/npu-emu-0": "../../npu0"}


class Monitor:
    """`npu-kmd monitor --all` in the background; events() parses what it printed."""

    def __init__(self, devroot: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "kmd_fuse.cli", "monitor", "--devroot", str(devroot),
                                      "--all"], stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                       daemon=True)
        self.reader.start()

    def records(self) -> list[str]:
        complete = "".join(self.lines).split("\n\n")[:-1]    # the last part is "" or still being written
        return [r for r in complete if r.startswith("KERNEL[")]

    def events(self, count: int, timeout: float = 15) -> list[Uevent]:
        assert wait_until(lambda: len(self.records()) >= count, timeout), "".join(self.lines)
        return [Uevent.parse(r) for r in self.records()]

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=10)
        self.reader.join(timeout=10)
        self.proc.stdout.close()


def links(devroot: Path) -> dict[str, str]:
    out = sh('cd "$R"; find . -type l -printf "%P %l\\n"', R=str(devroot)).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_rules_made_the_symlinks(npu):
    assert links(npu.devroot) == LINKS
    same = sh('stat -L -c %i "$R/accel/accel0" "$R/npu/by-path/platform-npu-emu.npu0" "$R/npu0"',
              R=str(npu.devroot)).stdout.split()
    assert len(set(same)) == 1
    report = npu.kmd("udev-test").stdout
    assert f"npu0: Setting permissions {npu.node}, uid=0, gid=" in report and "mode=0660" in report
    for link, target in LINKS.items():
        assert f"Creating symlink '{npu.devroot / link}' to '{target}'" in report
    assert "ID_PATH=platform-npu-emu.npu0" in report


@pytest.mark.recovery
def test_resets_are_counted_and_announced_in_order(fresh_npu):
    npu, d = fresh_npu, str(attr_dir(fresh_npu))
    monitor = Monitor(npu.devroot)
    try:
        sh('echo 1 > "$D/reset"', D=d)
        assert sh('cat "$D/reset_count"', D=d).stdout == "1\n"
        assert kv(sh('"$PY" "$FRAME" "$N" reset', N=str(npu.node)).stdout)["RESET_COUNT"] == "2"
        assert sh('cat "$D/reset_count"', D=d).stdout == "2\n"
        assert kv(sh('"$PY" "$FRAME" "$N" info', N=str(npu.node)).stdout)["RESET_COUNT"] == "2"
        # "change" re-applies the rules: a hand-made chmod is undone, like udevadm trigger does.
        sh('chmod 666 "$N"; echo change > "$D/uevent"', N=str(npu.node), D=d)
        assert sh('stat -c %a "$N"', N=str(npu.node)).stdout == "660\n"
        events = monitor.events(4)
        assert [(e.action, e.extra.get("RESET_COUNT")) for e in events] == [
            ("add", None), ("change", "1"), ("change", "2"), ("change", None)]
        assert [e.seqnum for e in events] == [1, 2, 3, 4]
        first = events[0]
        assert (first.devpath, first.subsystem, first.devname, first.major, first.minor) == (
            "/devices/platform/npu-emu.0/npu/npu0", "npu", "npu0", 261, 0)
        stop_npu(npu)
        events = monitor.events(5)
        assert events[4].action == "remove" and events[4].seqnum == 5
    finally:
        monitor.close()
    assert links(npu.devroot) == {}
    assert not attr_dir(npu).exists()


def test_stop_cleans_up_after_a_killed_driver(fresh_npu):
    npu = fresh_npu
    monitor = Monitor(npu.devroot)
    try:
        monitor.events(1)
        pid = int(paths.pid_file(npu.devroot, 0).read_text())
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}/status")
                          or "State:\tZ" in open(f"/proc/{pid}/status").read())
        fuse_dir = paths.fuse_dir(npu.devroot, 0)
        assert paths.is_mounted(npu.node) and paths.is_mounted(fuse_dir)   # stale mounts, nobody serving
        stop_npu(npu)
        assert not any(paths.is_mounted(p) for p in (npu.node, attr_dir(npu), fuse_dir))
        removed = monitor.events(2)[1]
        assert (removed.action, removed.extra) == ("remove", {"REASON": "driver-died"})
    finally:
        monitor.close()
    assert links(npu.devroot) == {}


def test_scripts_and_smi_find_a_custom_sysroot(tmp_path, holder_factory):
    devroot, sysroot = tmp_path / "dev", tmp_path / "elsewhere" / "sys"
    npu = MountedNpu(devroot, 1)
    try:
        sh('"$S/npu-mount" --devroot "$R" --sysroot "$Y" --memory 256M', S=str(REPO / "scripts"), R=str(devroot),
           Y=str(sysroot), PATH=f"{REPO / '.venv' / 'bin'}:/usr/bin:/bin")
        status = sh('"$S/npu-status" --devroot "$R"', S=str(REPO / "scripts"), R=str(devroot)).stdout
        assert f"attributes {sysroot}/class/npu/npu0" in status
        holder = holder_factory(npu.node, alloc=1 << 20)
        out = sh('"$PY" -m libnpu.tools smi --devroot "$R" --json --interval 0.1', R=str(devroot)).stdout
        (dev,) = json.loads(out)["devices"]
        attrs = kv(sh('cd "$D"; for f in model cores memory_total_bytes memory_used_bytes; do '
                      'echo "$f=$(cat $f)"; done',
                      D=str(sysroot / "class" / "npu" / "npu0")).stdout)
        assert (dev["model"], dev["cores"], dev["memory_total_bytes"], dev["memory_used_bytes"]) == (
            attrs["model"], 2, 256 << 20, int(attrs["memory_used_bytes"]))
        assert dev["node"] == str(npu.node) and dev["utilization_pct"] == 0.0
        (row,) = [p for p in dev["processes"] if p["pid"] == holder.pid]
        assert row["clients"] == [holder.context_id] and row["fds"] == 1 and row["memory_bytes"] == 1 << 20
        holder.close()
        sh('"$S/npu-unmount" --devroot "$R"', S=str(REPO / "scripts"), R=str(devroot))
        assert not (sysroot / "class" / "npu" / "npu0").exists()
        assert not (devroot / paths.SYSROOT_MARKER).exists()
    finally:
        stop_npu(npu)
