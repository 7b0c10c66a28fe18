"""Issue 15's "Done when" lines, measured side by side in one run on a device of its own.

Starts a scratch device (``npu-kmd start`` under a temporary devroot, two cores) and
measures, printing one line per criterion with its figure, its bar and PASS/FAIL:

1. ResNet-8, VWW and KWS: ``npu bench model`` p50 over LiteRT XNNPACK p50 (interleaved in
   the same loop) <= 6 (goal 3), and the device's outputs byte-identical to LiteRT
   BUILTIN_REF on ``--inputs`` random inputs each;
2. the chip's busy time (GET_STATS, the cores' own clock) per task of a 256-NOP job
   <= 5 us, and per KWS job <= 1 ms;
3. NOPs from 4 processes at once, each through a user-mode submission queue (the fastest
   path; SUBMIT when the device offers none): their p50 <= 1.5x the raw GET_INFO round trip
   that 4 processes measure right after under the same load, and the aggregate jobs/s >=
   1.5x one process alone;
4. the summed RSS of the device's processes (daemon, chip, cores): idle <= 150 MB, and
   back to that idle figure (within ``--rss-slack-mb``) once the models are unloaded;
   the same for their anonymous memory alone (heap and caches, without the file pages
   of the libraries the kernels touched, which stay mapped).

The machine is shared: every ratio is taken from figures measured in the same run, but
a loaded machine moves them; the load average is printed with the results.

Run: ``python -m benchmarks.perf_acceptance [--seconds 2] [--inputs 20] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from benchmarks.scratch_device import ScratchDevice, rss_bytes
from libnpu.portability import Session
from libnpu.tools import bench
from libnpu.tools.model_bench import bench_model
from libnpu.tools.models import LiteRT, resolve
from libnpu.tools.run import random_inputs

MODELS = ("resnet8", "vww", "kws")


class Report:
    """The criteria measured so far: name, figure, bar, passed."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def check(self, name: str, value: float, bar: float, passed: bool, unit: str = "",
              note: str = "") -> None:
        self.rows.append({"criterion": name, "value": round(value, 3), "bar": bar, "unit": unit,
                          "passed": bool(passed), "note": note})
        status = "PASS" if passed else "FAIL"
        print(f"{status:4}  {name}: {value:.3f}{unit} (bar {bar}{unit}){'; ' + note if note else ''}",
              flush=True)


def _pids(dev: ScratchDevice) -> list[int]:
    return [p for p in (dev.daemon_pid, dev.chip_main(), *dev.chip_cores()) if p]


def _rss_mb(dev: ScratchDevice) -> float:
    return sum(rss_bytes(p) for p in _pids(dev)) / 2 ** 20


def _anonymous_mb(dev: ScratchDevice) -> float:
    """Summed anonymous memory (heap, caches; not the libraries' file pages)."""
    total = 0
    for pid in _pids(dev):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total += sum(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))
    return total / 1024


def check_models(dev: ScratchDevice, report: Report, seconds: float, inputs: int,
                 cache: Path) -> None:
    for name in MODELS:
        r = bench_model(name, seconds=seconds, devroot=dev.devroot, cache_dir=cache)
        ratio = r["ratios"]["npu_p50_over_litert_xnnpack_p50"]
        report.check(f"{name}: npu p50 / XNNPACK p50", ratio, 6, ratio <= 6, "x",
                     f"npu {r['latency']['p50_ms']:.3f} ms, XNNPACK {r['litert']['xnnpack']['p50_ms']:.3f} ms, "
                     f"BUILTIN_REF {r['litert']['builtin_ref']['p50_ms']:.3f} ms; goal 3x: "
                     f"{'met' if ratio <= 3 else 'not met'}; chip {r['chip']['busy_per_job_us']:.0f} us "
                     f"per job ({r['chip']['tasks_per_job']} tasks)")
        if name == "kws":
            busy_ms = r["chip"]["busy_per_job_us"] / 1e3
            report.check("kws: chip busy time per job", busy_ms, 1, busy_ms <= 1, " ms")
        path = resolve(name)
        reference = LiteRT(path, "reference", threads=1)
        model = libnpu.load(path, devroot=dev.devroot, cache_dir=cache)
        try:
            differ = 0
            for seed in range(inputs):
                feeds = random_inputs(model.inputs, seed=100 + seed)
                got = model.infer(feeds)
                want = reference.run(feeds)
                differ += sum(not np.array_equal(g, w) for g, w in zip(got, want))
        finally:
            model.close()
        report.check(f"{name}: outputs differing from BUILTIN_REF", differ, 0, differ == 0, "",
                     f"{inputs} random inputs")


def check_nop_tasks(dev: ScratchDevice, report: Report) -> None:
    with Session(dev.devroot) as session:
        device = session.open(0)
        cmds = device.command_buffer(capacity=256 * 64)
        for _ in range(256):
            cmds.add("NOP")
        device.run(cmds)                                    # the first run decodes the job
        before = device.stats()
        for _ in range(50):
            device.run(cmds)
        after = device.stats()
    per_task_us = (after["busy_time_ns"] - before["busy_time_ns"]) / 50 / 256 / 1e3
    report.check("256-NOP job: chip busy time per task", per_task_us, 5, per_task_us <= 5, " us")


def _nop_client(devroot: str, seconds: float, barrier, results) -> None:
    """NOP jobs back to back on the fastest path the device offers (a user queue)."""
    samples = []
    with Session(devroot) as session:
        device = session.open(0)
        run_one, _, _ = bench.nop_job(device, "queue")
        for _ in range(50):
            run_one()
        barrier.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            run_one()
            samples.append(time.perf_counter() - start)
    results.put(samples)


def _rtt_client(devroot: str, seconds: float, barrier, results) -> None:
    node = Path(devroot) / "npu0"
    barrier.wait()
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        samples += bench.raw_rtt_samples(node, 100)
    results.put(samples)


def _run_clients(target, devroot: Path, processes: int, seconds: float) -> tuple[list[float], float]:
    per_client, elapsed = bench.run_clients(target, devroot, processes, seconds, grace=120)
    return [s for samples in per_client for s in samples], elapsed


def check_nop_load(dev: ScratchDevice, report: Report, seconds: float) -> None:
    one, one_s = _run_clients(_nop_client, dev.devroot, 1, seconds)
    four, four_s = _run_clients(_nop_client, dev.devroot, 4, seconds)
    rtt, _ = _run_clients(_rtt_client, dev.devroot, 4, seconds)
    nop_p50, rtt_p50 = bench.percentile(four, 0.5) * 1e6, bench.percentile(rtt, 0.5) * 1e6
    report.check("4 processes: NOP p50 / raw RTT p50 under the same load", nop_p50 / rtt_p50, 1.5,
                 nop_p50 / rtt_p50 <= 1.5, "x", f"NOP {nop_p50:.0f} us, RTT {rtt_p50:.0f} us")
    scale = (len(four) / four_s) / (len(one) / one_s)
    report.check("NOP jobs/s: 4 processes / 1 process", scale, 1.5, scale >= 1.5, "x",
                 f"{len(one) / one_s:.0f} -> {len(four) / four_s:.0f} jobs/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each timed loop")
    ap.add_argument("--inputs", type=int, default=20, help="random inputs per model checked against LiteRT")
    ap.add_argument("--rss-slack-mb", type=float, default=5.0, help="RSS growth still 'back to idle'")
    ap.add_argument("--json", action="store_true", help="print the criteria as JSON at the end")
    args = ap.parse_args(argv)
    report = Report()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    with ScratchDevice(cores=2) as dev:
        time.sleep(1.0)
        idle, idle_anon = _rss_mb(dev), _anonymous_mb(dev)
        report.check("idle RSS of the device's processes (daemon, chip, cores)", idle, 150, idle <= 150, " MB")
        cache = dev.tmp / "cache"
        check_models(dev, report, args.seconds, args.inputs, cache)
        check_nop_tasks(dev, report)
        check_nop_load(dev, report, args.seconds)
        time.sleep(1.0)                     # the models are closed: their buffers freed
        after, after_anon = _rss_mb(dev), _anonymous_mb(dev)
        report.check("RSS after the models were unloaded, over idle", after - idle, args.rss_slack_mb,
                     after - idle <= args.rss_slack_mb, " MB", f"idle {idle:.1f} MB, after {after:.1f} MB "
                     "(includes the file pages of libraries the kernels touched, e.g. libdnnl)")
        report.check("anonymous memory after the models were unloaded, over idle", after_anon - idle_anon,
                     args.rss_slack_mb, after_anon - idle_anon <= args.rss_slack_mb, " MB",
                     f"idle {idle_anon:.1f} MB, after {after_anon:.1f} MB")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    passed = sum(r["passed"] for r in report.rows)
    print(f"{passed} of {len(report.rows)} criteria passed")
    if args.json:
        print(json.dumps(report.rows, indent=2))
    return 0 if passed == len(report.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
