"""NOP jobs/s of 1 process against 4 processes on user queues, taken alternately, with
the CPU each job cost.

The issue-15 line "aggregate NOP jobs/s with 4 processes >= 1.5x one process alone" on a
loaded, shared machine: one figure of each moves with whatever else runs, so this takes
``--pairs`` pairs (1 process, then 4, a few seconds each, back to back on one scratch
device) and prints every pair's ratio, their median and the load average at each pair.
Beside the rates it prints what a job cost in CPU time (the clients' own, measured in
their timed loop, and the device's processes': daemon, chip, cores) and in context
switches: on 2 vCPUs four clients can only go faster than one by spending less CPU per
job, and that figure moves less with the machine's load than the rates do.

Run: ``python -m benchmarks.nop_scaling [--pairs 3] [--seconds 2] [--processes 4]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks.scratch_device import ScratchDevice
from libnpu.portability import Session
from libnpu.tools import bench

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    """CPU seconds and context switches (voluntary + involuntary) of some processes."""

    cpu_s: float = 0.0
    switches: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s + other.cpu_s, self.switches + other.switches)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s - other.cpu_s, self.switches - other.switches)


def process_usage(pid: int) -> Usage:
    """What ``pid`` has used so far (nothing if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            switches = sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)
    except (OSError, IndexError, ValueError):
        return Usage()
    return Usage((int(fields[11]) + int(fields[12])) / TICKS, switches)


def _self_usage() -> Usage:
    ru = os.times()
    return Usage(ru.user + ru.system, process_usage(os.getpid()).switches)


def _client(devroot: str, seconds: float, barrier, results) -> None:
    """NOP jobs back to back through a user queue; (jobs, its own CPU and switches while timed)."""
    with Session(devroot) as session:
        device = session.open(0)
        run_one, _, _ = bench.nop_job(device, "queue")
        for _ in range(50):
            run_one()
        barrier.wait()
        before = _self_usage()
        deadline = time.perf_counter() + seconds
        completed = 0
        while time.perf_counter() < deadline:
            run_one()
            completed += 1
        used = _self_usage() - before
    results.put((completed, used.cpu_s, used.switches))


def measure(dev: ScratchDevice, processes: int, seconds: float) -> dict:
    """One timed run of ``processes`` clients: jobs/s and the CPU and switches per job."""
    device_pids = [p for p in (dev.daemon_pid, dev.chip_main(), *dev.chip_cores()) if p]
    before = sum((process_usage(p) for p in device_pids), Usage())
    outcomes, elapsed = bench.run_clients(_client, dev.devroot, processes, seconds)
    device = sum((process_usage(p) for p in device_pids), Usage()) - before
    jobs = sum(c for c, _, _ in outcomes)
    clients = Usage(sum(c for _, c, _ in outcomes), sum(s for _, _, s in outcomes))
    return {"jobs_per_s": round(jobs / elapsed, 1),
            "fairness": bench.jain_fairness([c for c, _, _ in outcomes]),
            "client_cpu_us_per_job": round(clients.cpu_s / jobs * 1e6, 1),
            # the device's processes over the whole run (a little longer than the timed loops)
            "device_cpu_us_per_job": round(device.cpu_s / jobs * 1e6, 1),
            "switches_per_job": round((clients.switches + device.switches) / jobs, 2)}


def measure_pairs(pairs: int, seconds: float, processes: int) -> list[dict]:
    """``pairs`` alternating (1 process, ``processes`` processes) runs on one scratch device."""
    rows = []
    with ScratchDevice() as dev:
        measure(dev, 1, 0.3)                                          # warm-up: cores, caches
        for _ in range(pairs):
            one = measure(dev, 1, seconds)
            many = measure(dev, processes, seconds)
            rows.append({"one": one, "many": many, "ratio": round(many["jobs_per_s"] / one["jobs_per_s"], 3),
                         "load": os.getloadavg()[0]})
    return rows


def _line(run: dict) -> str:
    return (f"{run['jobs_per_s']:7.0f} jobs/s (CPU/job: clients {run['client_cpu_us_per_job']:5.1f} us, "
            f"device {run['device_cpu_us_per_job']:5.1f} us; {run['switches_per_job']:.2f} switches)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = measure_pairs(args.pairs, args.seconds, args.processes)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    for row in rows:
        print(f"1: {_line(row['one'])}\n{args.processes}: {_line(row['many'])}\n"
              f"   ratio {row['ratio']:.2f}, fairness {row['many']['fairness']:.2f}, load {row['load']:.2f}")
    print(f"median ratio {statistics.median(r['ratio'] for r in rows):.2f} (bar 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
