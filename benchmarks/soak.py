"""Acceptance script: ten minutes of clients, jobs, allocations and kills on a device of its own.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.soak [--seconds 600] [--clients 4] [--kills client,core,chip] [--json]

Four client processes (:mod:`benchmarks.chaos_client`) mix DMA copies, inferences of a
small int8 layer through ``libnpu.load``, async jobs and allocations; every 0.5-2 s a
client, a chip core or the chip's main process is SIGKILLed.  Passes (exit status 0)
with 0 daemon exits, 0 hung operations (each ends with success or an errno before its
job timeout + ``--margin`` seconds), no wrong data, and memory flat once the clients are
gone: device memory back to 0, the daemon's fds and /dev/shm files back to the
baseline, its RSS within ``--rss-slack-mib``.  The checks are :mod:`benchmarks.chaos`'s,
the same as ``tests/kmd_fuse/test_chaos.py``'s.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

from .chaos import KILL_KINDS, ChaosConfig, run_chaos
from .scratch_device import ScratchDevice


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--kills", default=",".join(KILL_KINDS),
                    help=f"comma-separated kinds of kill among {', '.join(KILL_KINDS)} ('' for none)")
    ap.add_argument("--job-timeout-ms", type=int, default=2000, help="each job's timeout and the watchdog's")
    ap.add_argument("--margin", type=float, default=15.0, help="seconds past its timeout an operation is hung")
    ap.add_argument("--rss-slack-mib", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    kills = tuple(k for k in args.kills.split(",") if k)
    unknown = set(kills) - set(KILL_KINDS)
    if unknown:
        ap.error(f"unknown kinds of kill: {', '.join(sorted(unknown))}")
    if os.geteuid() != 0:
        print("soak: mounting the device needs root", file=sys.stderr)
        return 2
    config = ChaosConfig(seconds=args.seconds, clients=args.clients, kills=kills, job_timeout_ms=args.job_timeout_ms,
                         margin_s=args.margin, rss_slack=args.rss_slack_mib << 20, seed=args.seed)
    log = (lambda *_: None) if args.json else functools.partial(print, flush=True)   # progress when piped too
    device = ScratchDevice(watchdog_ms=args.job_timeout_ms).start()
    try:
        log(f"soak: {args.seconds:.0f} s, {args.clients} clients, kills {kills or 'none'}, device {device.devroot}")
        report = run_chaos(device, config, log)
    finally:
        left = device.stop()
    problems = report.problems() + left
    if args.json:
        print(json.dumps({"seconds": round(report.seconds, 1), "operations": report.operations,
                          "operations_per_s": round(report.operations / max(report.seconds, 1e-9), 1),
                          "kills": dict(report.kills), "resets": report.resets, "daemon_exits": report.daemon_exits,
                          "hung": report.hung, "outcomes": dict(report.outcomes),
                          "baseline": report.baseline.__dict__ if report.baseline else None,
                          "final": report.final.__dict__ if report.final else None, "problems": problems}, indent=2))
    else:
        print(report.summary())
        for problem in left:
            print(f"PROBLEM: {problem}")
        print("OK" if not problems else "FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
