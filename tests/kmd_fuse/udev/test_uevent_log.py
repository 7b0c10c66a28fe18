"""The uevent record, the shared event log (two writer processes at once) and the monitor."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kmd_fuse.udev.uevent import LOG_NAME, SEQ_NAME, Uevent, UeventError, UeventLog, UeventMonitor, emit, monitor
from tests.support.device import WAIT_S, wait_for

DEVPATH = "/devices/platform/npu-emu.0/npu/npu0"


def add(log: UeventLog, **extra: object) -> Uevent:
    return log.emit("add", DEVPATH, "npu", devname="npu0", major=240, minor=0, extra=extra)


def test_record_format_and_parse_round_trip() -> None:
    event = Uevent("change", DEVPATH, "npu", "npu0", 240, 0, 42, {"RESET_COUNT": "3"}, 12.5)
    text = event.format()
    assert text == ("KERNEL[12.500000] change   /devices/platform/npu-emu.0/npu/npu0 (npu)\n"
                    "ACTION=change\nDEVPATH=/devices/platform/npu-emu.0/npu/npu0\nSUBSYSTEM=npu\n"
                    "DEVNAME=npu0\nMAJOR=240\nMINOR=0\nSEQNUM=42\nRESET_COUNT=3\n\n")
    assert Uevent.parse(text) == event
    assert event.kernel == "npu0"
    bare = Uevent("remove", "/devices/virtual/npu/npu9", "npu", timestamp=1.0)
    assert Uevent.parse(bare.format()) == bare
    assert list(bare.properties()) == ["ACTION", "DEVPATH", "SUBSYSTEM"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(action="explode"), "unknown ACTION"),
    (dict(devpath="devices/x"), "DEVPATH must be an absolute"),
    (dict(devpath="/devices/x/"), "DEVPATH must be an absolute"),
    (dict(subsystem="n p u"), "bad SUBSYSTEM"),
    (dict(devname="/dev/npu0"), "DEVNAME must be relative"),
    (dict(devname="../npu0"), "DEVNAME must be relative"),
    (dict(major=240), "MAJOR and MINOR go together"),
    (dict(extra={"lower": "x"}), "bad extra uevent key"),
    (dict(extra={"SEQNUM": "9"}), "bad extra uevent key"),
    (dict(extra={"K": "a\nb"}), "contains a newline"),
])
def test_record_validation(kwargs: dict, message: str) -> None:
    args = dict(action="add", devpath=DEVPATH, subsystem="npu")
    args.update(kwargs)
    with pytest.raises(UeventError, match=message):
        Uevent(**args)


@pytest.mark.parametrize("record, message", [
    ("garbage\nACTION=add\n", "bad uevent header"),
    ("KERNEL[1.000000] add      /d (npu)\nACTION=add\nDEVPATH=/d\nSUBSYSTEM=npu\nnot a property\n",
     "bad uevent property line"),
    ("KERNEL[1.000000] add      /d (npu)\nACTION=add\nSUBSYSTEM=npu\n", "lacks DEVPATH"),
    ("KERNEL[1.000000] add      /d (npu)\nACTION=add\nDEVPATH=/d\nSUBSYSTEM=npu\nSEQNUM=x\n", "bad number"),
])
def test_parse_errors(record: str, message: str) -> None:
    with pytest.raises(UeventError, match=message):
        Uevent.parse(record)


def test_emit_assigns_monotonic_seqnums_and_persists_them(tmp_path: Path) -> None:
    with UeventLog(tmp_path) as log:
        assert [add(log).seqnum for _ in range(3)] == [1, 2, 3]
    assert (tmp_path / SEQ_NAME).read_text() == "3\n"
    event = emit(tmp_path, "change", DEVPATH, "npu", devname="npu0", major=240, minor=0,
                 extra={"RESET_COUNT": 1})
    assert event.seqnum == 4 and event.extra == {"RESET_COUNT": "1"}
    records = (tmp_path / LOG_NAME).read_text().split("\n\n")
    assert [Uevent.parse(r).seqnum for r in records if r] == [1, 2, 3, 4]


def test_bad_or_oversized_event_takes_no_seqnum(tmp_path: Path) -> None:
    with UeventLog(tmp_path) as log:
        add(log)
        with pytest.raises(UeventError, match="exceeds 2048"):
            add(log, BIG="x" * 3000)
        with pytest.raises(UeventError, match="bad extra uevent key"):
            add(log, bad_key="1")
        assert add(log).seqnum == 2
    with pytest.raises(UeventError, match="closed"):
        add(log)


def test_corrupt_seq_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / SEQ_NAME).write_text("banana\n")
    with UeventLog(tmp_path) as log, pytest.raises(UeventError, match="corrupt SEQNUM file"):
        add(log)


def test_emit_gives_up_when_the_lock_stays_busy(tmp_path: Path) -> None:
    with UeventLog(tmp_path, lock_timeout=0.05) as log:
        holder = os.open(tmp_path / SEQ_NAME, os.O_RDWR)
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)
            t0 = time.monotonic()
            with pytest.raises(UeventError, match="busy"):
                add(log)
            assert time.monotonic() - t0 >= 0.04      # it waited for the lock first (no upper bound: load)
        finally:
            os.close(holder)
        assert add(log).seqnum == 1


WRITER = """
import os, sys, time
from kmd_fuse.udev.uevent import UeventLog
runroot, dev, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
log = UeventLog(runroot)
open(go + "." + dev, "w").close()      # imported and waiting
while not os.path.exists(go):
    time.sleep(0.001)                  # the poll interval of this wait for the go file
for i in range(count):
    log.emit("change", f"/devices/platform/npu-emu.{dev}/npu/npu{dev}", "npu", devname=f"npu{dev}",
             major=240, minor=int(dev), extra={"WRITER": dev, "I": i, "PAD": "p" * (i % 50)})
"""


def test_two_writer_processes_append_whole_records_in_seqnum_order(tmp_path: Path) -> None:
    count = 400
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), dev, str(count), str(go)])
             for dev in ("0", "1")]
    wait_for(lambda: all(Path(f"{go}.{dev}").exists() for dev in ("0", "1")), "both writers imported and waiting")
    mon = UeventMonitor(tmp_path, timeout=WAIT_S)
    go.touch()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    got = [next(mon) for _ in range(2 * count)]
    records = [r for r in (tmp_path / LOG_NAME).read_text().split("\n\n") if r]
    logged = [Uevent.parse(r) for r in records]
    assert [e.seqnum for e in logged] == list(range(1, 2 * count + 1))
    assert got == logged
    for dev in ("0", "1"):
        mine = [e for e in logged if e.extra["WRITER"] == dev]
        assert [int(e.extra["I"]) for e in mine] == list(range(count))
        assert all(e.devname == f"npu{dev}" and e.minor == int(dev) for e in mine)
    stamps = [e.timestamp for e in logged]
    assert stamps == sorted(stamps)  # the lock orders the writers' clocks too


def test_monitor_starts_now_or_from_start_or_after_seqnum(tmp_path: Path) -> None:
    with UeventLog(tmp_path) as log:
        for _ in range(3):
            add(log)
        now = UeventMonitor(tmp_path, timeout=0.1)
        everything = UeventMonitor(tmp_path, from_start=True, timeout=0.1)
        after2 = UeventMonitor(tmp_path, since_seqnum=2, timeout=0.1)
        log.emit("add", "/devices/virtual/block/loop0", "block")
        add(log)
    assert [e.seqnum for e in now] == [4, 5]
    assert [e.seqnum for e in everything] == [1, 2, 3, 4, 5]
    assert [e.seqnum for e in after2] == [3, 4, 5]
    only_npu = UeventMonitor(tmp_path, from_start=True, subsystem="npu", timeout=0.1)
    assert [e.seqnum for e in only_npu] == [1, 2, 3, 5]


def test_monitor_waits_for_whole_records_and_follows_truncation_and_replacement(tmp_path: Path) -> None:
    mon = UeventMonitor(tmp_path, timeout=0.1)  # before the log exists
    assert list(mon) == []
    record = Uevent("add", DEVPATH, "npu", "npu0", 240, 0, 1, {}, 5.0).format().encode()
    with open(tmp_path / LOG_NAME, "ab") as f:
        f.write(record[:30])
        f.flush()
        assert list(mon) == []  # half a record is not an event
        f.write(record[30:])
    assert [e.seqnum for e in mon] == [1]
    os.truncate(tmp_path / LOG_NAME, 0)
    assert list(mon) == []  # noticed the truncation
    with UeventLog(tmp_path) as log:
        add(log)
    assert [e.seqnum for e in mon] == [1]  # no SEQNUM file yet: the writer starts at 1
    # A log replaced by a new file (a new daemon recreating the runroot) is read from its start.
    os.unlink(tmp_path / LOG_NAME)
    with UeventLog(tmp_path) as log:
        for _ in range(3):
            add(log)
    assert [e.seqnum for e in mon] == [2, 3, 4]
    mon.close()


def test_monitor_blocks_until_an_event_arrives(tmp_path: Path) -> None:
    UeventLog(tmp_path).close()

    def later() -> None:
        time.sleep(0.2)    # not a wait: the event likely comes while the monitor blocks (passes either way)
        with UeventLog(tmp_path) as log:
            add(log, LATE="1")

    thread = threading.Thread(target=later)
    with monitor(tmp_path, timeout=WAIT_S) as mon:      # following from now on
        thread.start()
        event = next(mon)
    thread.join()
    assert event.extra == {"LATE": "1"}


def test_cli_monitor_prints_events_emitted_by_the_cli(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "kmd_fuse.udev.udevadm"]
    mon = subprocess.Popen(cmd + ["monitor", str(tmp_path), "--count", "2", "--timeout", "20",
                                  "-s", "npu"], stdout=subprocess.PIPE, text=True)
    assert mon.stdout is not None
    assert mon.stdout.readline().startswith("monitor will print")  # the monitor is following now
    seqs = []
    for action, extra in (("add", []), ("change", ["-p", "RESET_COUNT=1"])):
        done = subprocess.run(cmd + ["emit", str(tmp_path), action, DEVPATH, "npu", "--devname", "npu0",
                                     "--devnum", "240:0", *extra], capture_output=True, text=True, check=True)
        seqs.append(int(done.stdout))
    out, _ = mon.communicate(timeout=30)
    assert mon.returncode == 0 and seqs == [1, 2]
    assert "ACTION=add\n" in out and "ACTION=change\n" in out and "RESET_COUNT=1\n" in out
    assert "SEQNUM=2\n" in out and " change   /devices/platform/npu-emu.0/npu/npu0 (npu)" in out
    bad = subprocess.run(cmd + ["emit", str(tmp_path), "add", "relative", "npu"], capture_output=True, text=True)
    assert bad.returncode == 1 and "DEVPATH must be an absolute" in bad.stderr
