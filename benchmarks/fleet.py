"""Issue 28's fleet figures: ``npu-kmd start --devices N`` on one host, what it costs.

For each N (``--devices 1,16,64,128``) under a temporary devroot of its own, one after the
other: the time ``npu-kmd start --devices N`` takes; the processes of the stack (every
daemon serving that devroot and its descendants: the chips and their cores); their summed
PSS (a page shared by the chip's forked cores counted once); their idle CPU (utime +
stime of every one of them over ``--idle-seconds`` s, starting ``--settle`` s after start
returned, as % of one core); the NOP p50 on the last device (user queue, as ``npu bench
nop``); a ResNet-8 inference on the last device (its top class, checked against LiteRT's
reference kernels unless ``--no-reference``); and the time ``npu-kmd stop`` takes.
Goals (issue 28, for 128): up in <= 60 s, idle <= 3 % of one core, PSS <= 40 MiB per
device, stop <= 15 s.

Run: ``python -m benchmarks.fleet [--devices 1,16,64,128] [--idle-seconds 10] [--json]``.
Heavy for large N (128 devices are ~400 processes): on a shared machine run it alone.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

GOALS = {"start_s": 60.0, "idle_cpu_pct": 3.0, "pss_mib_per_device": 40.0, "stop_s": 15.0}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, ...], None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _cmdline(pid: int) -> list[str]:
    try:
        return [p.decode(errors="replace") for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]
    except OSError:
        return []


def stack_processes(devroot: Path) -> list[int]:
    """The daemons serving ``devroot`` (by their command line) and all their descendants."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields and fields[0] not in ("Z", "X"):
                parents[int(name)] = int(fields[1])
    found = {pid for pid in parents
             if "kmd_fuse.daemon" in _cmdline(pid) and str(devroot) in _cmdline(pid)}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of ``pids`` (clock ticks; a process gone counts nothing)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += int(fields[11]) + int(fields[12])
    return total


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return total


def _kmd(devroot: Path, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(devroot)],
                            capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def nop_p50_us(devroot: Path, device: int, count: int) -> float:
    from libnpu.portability import Session
    from libnpu.tools.bench import nop_job
    with Session(devroot) as session:
        run_one, _, _ = nop_job(session.open(device))
        for _ in range(50):
            run_one()
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            run_one()
            samples.append(time.perf_counter() - started)
    return float(np.percentile(samples, 50)) * 1e6


def resnet8_on(devroot: Path, device: int, reference: bool) -> dict[str, Any]:
    """One ResNet-8 inference on ``device``: its top class, and whether its output is
    byte-identical to LiteRT's reference kernels (None without ``reference``)."""
    import libnpu
    from libnpu import model_zoo
    from libnpu.tools.run import random_inputs
    with libnpu.load("resnet8", device, devroot=devroot) as model:
        inputs = random_inputs(model.inputs)
        out = np.asarray(model.infer(inputs)[0])
    same = None
    if reference:
        from libnpu.tools.models import LiteRT
        ref = LiteRT(model_zoo.model_file("resnet8"), "reference").run(inputs)
        same = bool(np.array_equal(np.asarray(ref[0]), out))
    return {"top_class": int(np.argmax(out)), "same_as_litert": same}


def measure(count: int, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="npu-fleet-"))
    devroot = tmp / "dev"
    devroot.mkdir()
    row: dict[str, Any] = {"devices": count}
    try:
        result, row["start_s"] = _kmd(devroot, "start", "--devices", str(count), "--cores", str(args.cores))
        if result.returncode:
            row["error"] = (result.stderr.strip().splitlines() or ["?"])[-1]
            return row
        pids = stack_processes(devroot)
        row["processes"] = len(pids)
        time.sleep(args.settle)             # the window starts 3 s after start returned
        before = cpu_ticks(pids)
        time.sleep(args.idle_seconds)
        row["idle_cpu_pct"] = 100 * (cpu_ticks(pids) - before) / CLK_TCK / args.idle_seconds
        row["pss_mib"] = pss_kib(stack_processes(devroot)) / 1024
        row["pss_mib_per_device"] = row["pss_mib"] / count
        row["nop_p50_us"] = nop_p50_us(devroot, count - 1, args.nops)
        row["resnet8"] = resnet8_on(devroot, count - 1, not args.no_reference)
    finally:
        result, row["stop_s"] = _kmd(devroot, "stop")
        if result.returncode:
            row["stop_error"] = (result.stderr.strip().splitlines() or ["?"])[-1]
        left = stack_processes(devroot)
        if left:
            row["left_behind"] = left
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| devices | start | processes | PSS (per device) | idle CPU (% of one core) | NOP p50 | "
             "ResNet-8 on the last | stop |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['devices']} | fails: {r['error']} | | | | | | {r['stop_s']:.1f} s |")
            continue
        net = r.get("resnet8", {})
        same = {True: ", = LiteRT", False: ", DIFFERS from LiteRT", None: ""}[net.get("same_as_litert")]
        lines.append(f"| {r['devices']} | {r['start_s']:.1f} s | {r['processes']} | {r['pss_mib']:.0f} MiB "
                     f"({r['pss_mib_per_device']:.1f}) | {r['idle_cpu_pct']:.1f} | {r['nop_p50_us']:.0f} us | "
                     f"class {net.get('top_class')}{same} | {r['stop_s']:.1f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1,16,64,128", help="comma-separated device counts")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after start before the idle window")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--nops", type=int, default=500)
    parser.add_argument("--no-reference", action="store_true", help="skip LiteRT's reference run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for count in (int(n) for n in args.devices.split(",")):
        rows.append(measure(count, args))
        if not args.json:
            print(table(rows[-1:]).splitlines()[-1] if len(rows) > 1 else table(rows), flush=True)
    print(json.dumps(rows, indent=2) if args.json else "\n" + table(rows))
    big = [r for r in rows if "error" not in r]
    failed = 0
    if big:
        last = big[-1]
        for key, bar in GOALS.items():
            value = last[key]
            ok = value <= bar
            failed += not ok
            if not args.json:
                print(f"{'PASS' if ok else 'FAIL'}  {last['devices']} devices: {key} {value:.2f} (goal <= {bar})")
    return 1 if failed or len(big) < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
