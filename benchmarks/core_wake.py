"""The CPU a core spends on a NOP job that wakes it: one client, one job at a time, a pause
between jobs longer than the core's idle poll, so every job finds the core asleep.

What an idle spell costs the chip, per job: the core's sleep on its doorbells, its wake-up,
the job and the way back to sleep (``/proc/<pid>/schedstat`` of the cores; the daemon's and
the chip main process's beside it). Issue 27's four NOP processes on two CPUs put the cores
to sleep about every other job; before the idle path went to C (branch nopwake) a woken
core spent 47-62 us of CPU per such job, most of it Python.

Run: ``python -m benchmarks.core_wake [--jobs 1000] [--gap-ms 2] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.nop_scaling import DeviceMeter
from benchmarks.scratch_device import ScratchDevice
from libnpu import user_queue
from libnpu.portability import Session
from libnpu.tools import bench


def measure(jobs: int, gap_s: float) -> dict:
    """Per job: the cores' CPU (us), their sleeps and preemptions, the daemon's and the chip
    main process's CPU (us), over ``jobs`` NOP jobs each ``gap_s`` after the last."""
    user_queue.set_wait_mode("sleep")
    with ScratchDevice() as dev, Session(dev.devroot) as session:
        run_one, _, path = bench.nop_job(session.open(0), "queue")
        for _ in range(50):                                   # warm-up: the plan taken, the window shrunk
            run_one()
            time.sleep(gap_s)
        with DeviceMeter(dev) as device:
            for _ in range(jobs):
                run_one()
                time.sleep(gap_s)          # the pause the benchmark is about: the core goes back to sleep
        cores = device.cores_used
        return {"path": path, "jobs": jobs, "gap_ms": gap_s * 1e3,
                "cores_cpu_us_per_job": round(cores.cpu_s / jobs * 1e6, 1),
                "cores_sleeps_per_job": round(cores.sleeps / jobs, 2),
                "cores_preemptions_per_job": round(cores.preemptions / jobs, 2),
                "daemon_chip_main_cpu_us_per_job": round(device.others_used.cpu_s / jobs * 1e6, 1),
                "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    run = measure(args.jobs, args.gap_ms / 1e3)
    if args.json:
        json.dump(run, sys.stdout, indent=1)
        print()
        return 0
    print(f"{run['jobs']} NOP jobs, {run['gap_ms']:.1f} ms apart [{run['path']}]: cores "
          f"{run['cores_cpu_us_per_job']:.1f} us of CPU per job ({run['cores_sleeps_per_job']:.2f} sleeps, "
          f"{run['cores_preemptions_per_job']:.2f} preemptions/job), daemon and chip main "
          f"{run['daemon_chip_main_cpu_us_per_job']:.1f} us; load {run['load']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
