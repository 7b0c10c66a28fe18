"""npu smi / npu top on an attribute tree of plain files and real processes holding nodes."""
from __future__ import annotations

import fcntl
import io
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from kmd_fuse.uapi.usage_stats import ClientStats, render
from libnpu.tools import commands
from libnpu.tools.cli import build_parser
from libnpu.tools.cli import main as npu_main
from libnpu.tools.npu_sysfs import Sampler, list_devices, scan_processes, summarize
from tests.support.device import wait_for

ATTRS = dict(dev="240:{n}", model="npu-emu-v1", abi_version="1.0", cores="4", clock_mhz="1000",
             memory_total_bytes=str(256 << 20), memory_used_bytes=str(12 << 20), busy_time_us="0",
             jobs_completed="5", jobs_failed="1", reset_count="0")


def smi_main(argv: list[str], out=None, err=None) -> int:  # type: ignore[no-untyped-def]
    """``npu smi ARGV`` with its output in ``out``/``err``."""
    return commands.smi(build_parser().parse_args(["smi", *argv]), out, err)


def top_main(argv: list[str], out=None, err=None) -> int:  # type: ignore[no-untyped-def]
    """``npu top ARGV`` with its output in ``out``/``err``."""
    return commands.top(build_parser().parse_args(["top", *argv]), out, err)


def make_device(sysroot: Path, devroot: Path, n: int) -> Path:
    base = sysroot / "class" / "npu" / f"npu{n}"
    (base / "clients").mkdir(parents=True)
    for name, value in ATTRS.items():
        (base / name).write_text(value.format(n=n) + "\n")
    (base / "uevent").write_text(f"MAJOR=240\nMINOR={n}\nDEVNAME=npu{n}\n")
    (devroot / f"npu{n}").touch()
    return base


def set_attr(base: Path, name: str, value: int) -> None:
    (base / name).write_text(f"{value}\n")


def set_client(base: Path, cid: int, pid: int, ns: int, mem: int = 1 << 20, cap: int | None = None,
               comm: str = "worker") -> None:
    stats = ClientStats("npu_emu", cid, pid, comm, "platform:npu-emu.0", {"npu": ns},
                        {"npu": cap} if cap else {}, {"npu": {"total": mem, "resident": mem}})
    (base / "clients" / str(cid)).write_text(render(stats))


class Clock:
    """Deterministic sample times, so utilization checks are exact."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    sysroot, devroot = tmp_path / "sys", tmp_path / "dev"
    devroot.mkdir()
    sysroot.mkdir()
    return sysroot, devroot


@pytest.fixture
def holder(tree: tuple[Path, Path]) -> Iterator[subprocess.Popen]:
    """A real process with npu0 open twice (once through a symlink) and npu1 once."""
    sysroot, devroot = tree
    make_device(sysroot, devroot, 0)
    make_device(sysroot, devroot, 1)
    (devroot / "accel").mkdir()
    (devroot / "accel" / "accel0").symlink_to("../npu0")
    code = ("import sys; a = open(sys.argv[1]); b = open(sys.argv[2]); c = open(sys.argv[3]); "
            "print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(devroot / "npu0"), str(devroot / "accel" / "accel0"),
                             str(devroot / "npu1")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc
    proc.communicate(timeout=10)


def test_list_devices_sorts_by_index(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    for n in (10, 2, 0):
        make_device(sysroot, devroot, n)
    (sysroot / "class" / "npu" / "npufoo").mkdir()
    assert list_devices(str(sysroot)) == ["npu0", "npu2", "npu10"]
    assert list_devices(str(devroot)) == []


def test_utilization_from_busy_time_deltas(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    base = make_device(sysroot, devroot, 0)
    clock = Clock()
    sampler = Sampler(str(sysroot), str(devroot), clock=clock)
    set_attr(base, "busy_time_us", 1000)
    set_client(base, 1, 999_999_999, ns=0)
    first = sampler.sample()
    assert summarize(None, first)[0]["utilization_pct"] is None
    clock.t += 2.0
    set_attr(base, "busy_time_us", 1000 + 2_000_000)  # 2 core-seconds in 2 s on 4 cores
    set_client(base, 1, 999_999_999, ns=300_000_000)  # 0.3 s of engine time
    set_client(base, 2, 999_999_999, ns=100_000_000, cap=4)  # new client on a 4-core engine group
    second = sampler.sample()
    (dev,) = summarize(first, second)
    assert dev["utilization_pct"] == 25.0
    (proc,) = dev["processes"]
    assert proc["clients"] == [1, 2] and proc["fds"] is None and proc["comm"] == "worker"
    # 0.3 s / 2 s on one engine + 0.1 s / (2 s * 4) for the new client
    assert proc["utilization_pct"] == pytest.approx(16.2, abs=0.05)
    assert proc["engine_ns"] == {"npu": 400_000_000} and proc["memory_bytes"] == 2 << 20


def test_counters_going_backwards_keep_the_larger_value(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    base = make_device(sysroot, devroot, 0)
    clock = Clock()
    sampler = Sampler(str(sysroot), str(devroot), clock=clock)
    samples = []
    for busy, ns in ((5000, 9_000_000), (3000, 4_000_000), (8000, 9_500_000)):
        set_attr(base, "busy_time_us", busy)
        set_client(base, 7, 999_999_999, ns=ns)
        samples.append(sampler.sample())
        clock.t += 1.0
    back = summarize(samples[0], samples[1])[0]
    assert back["busy_time_us"] == 5000 and back["utilization_pct"] == 0.0
    assert back["processes"][0]["engine_ns"] == {"npu": 9_000_000}
    assert back["processes"][0]["utilization_pct"] == 0.0
    ahead = summarize(samples[1], samples[2])[0]
    assert ahead["busy_time_us"] == 8000 and ahead["utilization_pct"] == 0.1  # 3000 us over 1 s x 4 cores
    assert ahead["processes"][0]["utilization_pct"] == 0.1  # 0.5 ms over 1 s (9.0 -> 9.5 ms)


def test_utilization_is_clamped_to_100(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    base = make_device(sysroot, devroot, 0)
    clock = Clock()
    sampler = Sampler(str(sysroot), str(devroot), clock=clock)
    first = sampler.sample()
    clock.t += 1.0
    set_attr(base, "busy_time_us", 5_000_000)  # more than 4 cores x 1 s
    assert summarize(first, sampler.sample())[0]["utilization_pct"] == 100.0


def test_processes_found_through_proc_fd_links(tree: tuple[Path, Path], holder: subprocess.Popen) -> None:
    sysroot, devroot = tree
    found = scan_processes({str(devroot / "npu0"): "npu0", str(devroot / "npu1"): "npu1",
                            str(devroot / "npu9"): "npu9"})
    assert found["npu0"][holder.pid].fds == 2  # the symlinked open resolves to the node
    assert found["npu1"][holder.pid].fds == 1
    assert found["npu9"] == {} and os.getpid() not in found["npu0"]
    assert found["npu0"][holder.pid].comm == "python" or found["npu0"][holder.pid].comm.startswith("python")
    base0 = sysroot / "class" / "npu" / "npu0"
    set_client(base0, 3, holder.pid, ns=10, comm="from-stats")
    set_client(base0, 4, holder.pid, ns=20, comm="from-stats")
    (dev0, dev1) = summarize(None, Sampler(str(sysroot), str(devroot)).sample())
    (row,) = dev0["processes"]
    assert row["pid"] == holder.pid and row["fds"] == 2 and row["clients"] == [3, 4]
    assert row["engine_ns"] == {"npu": 30} and row["comm"] != "from-stats"  # /proc wins
    assert [(r["pid"], r["fds"], r["clients"]) for r in dev1["processes"]] == [(holder.pid, 1, [])]


def test_smi_table_and_json(tree: tuple[Path, Path], holder: subprocess.Popen) -> None:
    sysroot, devroot = tree
    set_client(sysroot / "class" / "npu" / "npu0", 3, holder.pid, ns=2_500_000_000, mem=3 << 20)
    out = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "--devroot", str(devroot), "--interval", "0.05"], out=out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["NPU", "Model", "Cores", "Clock", "Util"]
    assert lines[1].split()[:6] == ["0", "npu-emu-v1", "4", "1000", "MHz", "0%"]
    assert "12.0MiB/256.0MiB" in lines[1] and lines[1].endswith(str(devroot / "npu0"))
    node_width = len(str(devroot / "npu0"))    # every line fits 80 columns but for the node's path
    assert all(len(line) <= 80 + max(0, node_width - len("/dev/npu0")) for line in lines), lines
    row = next(line for line in lines if line.split()[:2] == ["0", str(holder.pid)])
    assert "2.500 s" in row and "3.0 MiB" in row
    out = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "--devroot", str(devroot), "--json", "--interval", "0",
                     "-i", "1"], out=out) == 0
    data = json.loads(out.getvalue())
    (dev,) = data["devices"]
    assert dev["name"] == "npu1" and dev["utilization_pct"] is None and dev["jobs_failed"] == 1
    assert dev["processes"] == [{"pid": holder.pid, "comm": dev["processes"][0]["comm"], "fds": 1,
                                 "clients": [], "engine_ns": {}, "utilization_pct": None, "memory_bytes": 0}]


def test_smi_errors(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    err = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot)], out=io.StringIO(), err=err) == 1
    assert "no NPU devices under" in err.getvalue() and "class/npu" in err.getvalue()
    base = make_device(sysroot, devroot, 0)
    err = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "-i", "3"], out=io.StringIO(), err=err) == 1
    assert "no device npu3" in err.getvalue()
    (base / "cores").write_text("four\n")
    err = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "--interval", "0"], out=io.StringIO(), err=err) == 1
    assert f"{base}/cores: want an unsigned integer, got 'four'" in err.getvalue()
    set_attr(base, "cores", 4)
    (base / "busy_time_us").unlink()
    err = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "--interval", "0"], out=io.StringIO(), err=err) == 1
    assert f"cannot read {base}/busy_time_us" in err.getvalue()
    set_attr(base, "busy_time_us", 0)
    (base / "clients" / "5").write_text("not usage stats\n")
    err = io.StringIO()
    assert smi_main(["--sysroot", str(sysroot), "--interval", "0"], out=io.StringIO(), err=err) == 1
    assert f"{base}/clients/5: not DRM usage-stats" in err.getvalue()


def test_top_batch_frames_and_json(tree: tuple[Path, Path]) -> None:
    sysroot, devroot = tree
    make_device(sysroot, devroot, 0)
    out = io.StringIO()
    assert top_main(["--sysroot", str(sysroot), "--devroot", str(devroot), "-b", "-n", "2", "-d", "0.05"],
                    out=out) == 0
    text = out.getvalue()
    assert text.count("npu top - ") == 2 and "frame 2" in text and "\x1b[" not in text
    assert "(no processes are using an NPU)" in text
    out = io.StringIO()
    assert top_main(["--sysroot", str(sysroot), "--json", "-n", "3", "-d", "0.02"], out=out) == 0
    frames = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [f["frame"] for f in frames] == [1, 2, 3]
    assert all(f["devices"][0]["utilization_pct"] == 0.0 for f in frames)
    assert frames[0]["t"] < frames[1]["t"] < frames[2]["t"]


def test_top_sees_load_appear_between_frames(tree: tuple[Path, Path]) -> None:
    """A writer raises busy_time_us by 2 core-seconds per second on 4 cores: top must say ~50%."""
    sysroot, devroot = tree
    base = make_device(sysroot, devroot, 0)
    # Replace the file atomically, as a sysfs read never sees a half-written value.
    writer = ("import os, sys, time\nt0 = time.monotonic()\nend = t0 + float(sys.argv[2])\n"
              "first = True\n"
              "while time.monotonic() < end:\n"
              "    open(sys.argv[1] + '.tmp', 'w').write(str(int((time.monotonic() - t0) * 2e6)) + '\\n')\n"
              "    os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
              "    if first:\n"
              "        print('ready', flush=True)\n"
              "        first = False\n"
              "    time.sleep(0.005)\n")   # the writer's pace (not a wait of the test)
    proc = subprocess.Popen([sys.executable, "-c", writer, str(base / "busy_time_us"), "3"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    try:
        out = io.StringIO()
        assert top_main(["--sysroot", str(sysroot), "--json", "-n", "2", "-d", "0.4"], out=out) == 0
    finally:
        proc.kill()
        proc.wait()
    utils = [json.loads(line)["devices"][0]["utilization_pct"] for line in out.getvalue().splitlines()]
    assert all(40.0 <= u <= 60.0 for u in utils), utils


@pytest.mark.parametrize("argv, message", [
    (["smi", "--interval", "-1"], "--interval must be >= 0"),
    (["top", "-d", "0"], "--delay must be > 0"),
    (["top", "-n", "0"], "--iterations must be >= 1"),
])
def test_bad_arguments(argv: list[str], message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert npu_main(argv) == 2
    assert f"npu {argv[0]}: error: {message}" in capsys.readouterr().err


def _set_window(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def test_top_on_a_terminal_fits_the_window_follows_a_resize_and_quits_on_q(tree: tuple[Path, Path]) -> None:
    """`npu top` under a pseudo-terminal, its screen read back by a terminal emulator (pyte)."""
    sysroot, devroot = tree
    make_device(sysroot, devroot, 0)
    master, slave = os.openpty()
    _set_window(slave, 24, 80)
    proc = subprocess.Popen([sys.executable, "-m", "libnpu.tools", "top", "--sysroot", str(sysroot),
                             "--devroot", "/dev", "-d", "0.2"], stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "TERM": "xterm"}, start_new_session=True)
    os.close(slave)
    screen = pyte.Screen(80, 24)
    stream = pyte.ByteStream(screen)

    def shows(text: str) -> bool:
        while select.select([master], [], [], 0)[0]:   # what is there now; wait_for polls again
            try:
                stream.feed(os.read(master, 65536))
            except OSError:          # EIO: the program closed the terminal
                break
        return any(text in row for row in screen.display)
    try:
        wait_for(lambda: shows("frame 2"), "npu top's second frame on the terminal")
        rows = [row.rstrip() for row in screen.display]
        header = next(i for i, row in enumerate(rows) if row.startswith("NPU Model"))
        assert rows[header + 1].startswith("  0 npu-emu-v1") and rows[header + 1].endswith("/dev/npu0"), rows
        assert "(q quits)" in rows[0]
        # a narrower window: every line is clipped to it (a wrapped line would start a row with its tail)
        _set_window(master, 24, 60)
        os.kill(proc.pid, signal.SIGWINCH)
        screen.resize(24, 60)
        screen.reset()
        wait_for(lambda: shows("frame"), "a redraw after the resize")
        wait_for(lambda: shows("  0 npu-emu-v1"), "the device row in the narrower window")
        rows = [row.rstrip() for row in screen.display]
        row = next(i for i, r in enumerate(rows) if r.startswith("  0 npu-emu-v1"))
        assert rows[row - 1].startswith("NPU Model") and not rows[row + 1].strip(), rows
        os.write(master, b"q")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
