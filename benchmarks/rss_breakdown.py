"""What a device's resident memory is made of, per process and per mapping.

``snapshot(dev)`` reads /proc/<pid>/smaps of the daemon, the chip's main process and each
core and sums, per mapping name (a library's file name, ``[heap]``, ``[anon]``,
``memfd:npu-bo*`` for device memory...), its resident pages split into anonymous ones
(heap, caches, a library's written data) and file-backed ones (the code and read-only
data of libraries, shared with the page cache). ``table`` prints the biggest entries of
one snapshot, ``growth`` what grew or shrank between two: after the models are unloaded
it names the pages that did not come back (issue 15: back to the idle figure).

Run: ``python -m benchmarks.rss_breakdown [--models resnet8,vww,kws] [--inferences 20]
[--requests 4] [--rounds 1]`` starts a scratch device, prints its idle table, runs each
model (one request at a time, then ``--requests`` at once, as ``npu bench model``'s
throughput loop does) and unloads it (``--rounds`` times, printing the total growth after
each round), and prints the growth per mapping.

Requests in flight at once set the high-water mark of the cores' Python objects: each
request's command buffer is a job of its own to a core (its own plan, its own operand
translations and views, see ``firmware_sim.job_plans``), all freed when the model is
unloaded, but the pages of CPython's small-object pools that held them stay resident in
arenas that still hold other objects (measured 2026-11-24, one round, per core: one
request +0.13 MB, 2 at once +0.25 MB, 4 at once +0.54 MB; more rounds add 0-0.09 MB).
A core grown that much is recycled once its last context is gone (``firmware_sim.recycling``):
``--rounds 3 --requests 4`` leaves +0.1-0.4 MB with it, +2.1 MB without it
(``NPU_CORE_RECYCLE_KB=-1``, which the chip inherits from the environment).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.scratch_device import ScratchDevice

Usage = Counter  # (mapping name, "anon" | "file") -> kB resident

__all__ = ["snapshot", "mapping_usage", "table", "growth", "total_mb"]


def _mapping_name(fields: list[str]) -> str:
    name = fields[5] if len(fields) > 5 else "[anon]"
    if name.startswith("/"):
        return os.path.basename(name)
    if name.startswith("/memfd:npu-bo") or name.startswith("memfd:npu-bo"):
        return "memfd:npu-bo*"
    return name


def mapping_usage(pid: int) -> Usage:
    """kB resident per (mapping name, "anon" | "file") of one process."""
    usage: Usage = Counter()
    name, rss = "", 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields[0].endswith(":"):          # a mapping's header line
                name = _mapping_name(fields)
            elif fields[0] == "Rss:":
                rss = int(fields[1])
            elif fields[0] == "Anonymous:":          # follows Rss: in every kernel's smaps
                anon = int(fields[1])
                usage[(name, "anon")] += anon
                usage[(name, "file")] += rss - anon
    return +usage   # drops the zeros


def snapshot(dev: ScratchDevice) -> dict[str, Usage]:
    """Every process of ``dev`` by role (daemon, chip, core0, core1...) -> its usage."""
    roles = {"daemon": dev.daemon_pid, "chip": dev.chip_main()}
    roles.update({f"core{i}": pid for i, pid in enumerate(sorted(dev.chip_cores()))})
    return {role: mapping_usage(pid) for role, pid in roles.items() if pid}


def total_mb(shot: dict[str, Usage], kind: str | None = None) -> float:
    """Summed resident MB of a snapshot (only "anon" or "file" pages with ``kind``)."""
    return sum(kb for usage in shot.values() for (_, k), kb in usage.items()
               if kind in (None, k)) / 1024


def table(shot: dict[str, Usage], rows: int = 12) -> str:
    """Each process's total and its ``rows`` biggest mappings."""
    lines = []
    for role, usage in shot.items():
        anon = sum(kb for (_, k), kb in usage.items() if k == "anon")
        lines.append(f"{role}: {sum(usage.values()) / 1024:.1f} MB "
                     f"(anonymous {anon / 1024:.1f}, file {(sum(usage.values()) - anon) / 1024:.1f})")
        for (name, kind), kb in usage.most_common(rows):
            lines.append(f"    {name[:48]:48} {kind:4} {kb:7d} kB")
    return "\n".join(lines)


def growth(before: dict[str, Usage], after: dict[str, Usage], min_kb: int = 64) -> str:
    """What changed by ``min_kb`` or more, per process and mapping."""
    lines = []
    for role in after:
        old, new = before.get(role, Counter()), after[role]
        change = (sum(new.values()) - sum(old.values())) / 1024
        lines.append(f"{role}: {sum(old.values()) / 1024:.1f} -> {sum(new.values()) / 1024:.1f} MB "
                     f"({change:+.1f})")
        keys = sorted(set(old) | set(new), key=lambda k: -abs(new[k] - old[k]))
        for key in keys:
            if abs(new[key] - old[key]) >= min_kb:
                lines.append(f"    {key[0][:48]:48} {key[1]:4} {old[key]:7d} -> {new[key]:7d} kB "
                             f"({new[key] - old[key]:+d})")
    return "\n".join(lines)


def run_concurrently(model, feeds: list, requests: int, rounds: int) -> None:
    """``rounds`` times: start ``requests`` inference requests of ``model`` at once, wait
    for all of them."""
    pool = [model.create_request() for _ in range(requests)]
    try:
        for request in pool:
            request.set_inputs(feeds)
        for _ in range(rounds):
            for request in pool:
                request.start()
            for request in pool:
                request.wait()
    finally:
        for request in pool:
            request.release()


def main(argv: list[str] | None = None) -> int:
    import libnpu
    from libnpu.tools.models import resolve
    from libnpu.tools.run import random_inputs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet8,vww,kws", help="comma-separated model-zoo names or files")
    ap.add_argument("--inferences", type=int, default=20, help="inferences per model before it is unloaded")
    ap.add_argument("--requests", type=int, default=4,
                    help="requests in flight at once after the one-at-a-time inferences (1: none)")
    ap.add_argument("--rows", type=int, default=12, help="mappings listed per process in the idle table")
    ap.add_argument("--rounds", type=int, default=1,
                    help="load, run and unload the models this many times (a leak grows every round; "
                         "pages touched once do not)")
    args = ap.parse_args(argv)
    with ScratchDevice(cores=2) as dev:
        time.sleep(1.0)
        idle = snapshot(dev)
        print(f"idle: {total_mb(idle):.1f} MB\n{table(idle, args.rows)}")
        cache = Path(dev.tmp) / "cache"
        for round_ in range(1, args.rounds + 1):
            for name in args.models.split(","):
                model = libnpu.load(resolve(name), devroot=dev.devroot, cache_dir=cache)
                try:
                    for seed in range(args.inferences):
                        model.infer(random_inputs(model.inputs, seed=seed))
                    if args.requests > 1:
                        run_concurrently(model, random_inputs(model.inputs, seed=0), args.requests,
                                         args.inferences)
                finally:
                    model.close()
            time.sleep(1.0)
            after = snapshot(dev)
            print(f"round {round_}: {total_mb(after) - total_mb(idle):+.2f} MB over idle "
                  f"(anonymous {total_mb(after, 'anon') - total_mb(idle, 'anon'):+.2f})", flush=True)
        print(f"\nafter the models were unloaded: {total_mb(after):.1f} MB "
              f"({total_mb(after) - total_mb(idle):+.1f}; anonymous "
              f"{total_mb(after, 'anon') - total_mb(idle, 'anon'):+.1f}, file "
              f"{total_mb(after, 'file') - total_mb(idle, 'file'):+.1f})\n{growth(idle, after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
