"""The synchronous inference's wait of this checkout against another's, side by side in one run.

Run from the repository root (not in CI; mounting needs root)::

    .venv/bin/python -m benchmarks.hinted_wait --baseline [LABEL=]CHECKOUT [--baseline ...]
        [--models resnet8 vww mww-okay-nabu] [--rounds 40] [--block 25] [--unhinted] [--json]

One scratch device (2 cores, this checkout's driver and chip) serves one client process per
side (``benchmarks/wait_worker.py``): ``this`` runs this checkout's libnpu and C queue
client, each ``--baseline`` the one of another checkout (e.g. a ``git worktree`` or ``git
archive`` of main; labelled ``before`` unless given as ``LABEL=CHECKOUT``) put first on its
PYTHONPATH, and with ``--unhinted`` a third, this checkout without the sleep ahead
(``NPU_QUEUE_SLEEP_AHEAD=0``). Each loads every model (model-zoo names, or work-half corpus
models compiled as ``benchmarks.corpus_bench`` compiles them) and times blocks of ``--block``
``infer`` calls on command, every (side, model) once a round in a new random order, so the
machine's load weighs on all alike. Per model and side it prints the wall p50 and p90, the
share of the waits that ended asleep on the completion line, and the CPU per inference of
the client thread and of the whole stack (the client, the chip's processes and the
driver's daemon, over that side's blocks only). The load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from benchmarks.corpus_manifest import BY_NAME
from benchmarks.fixed_cost import _compiled
from benchmarks.nop_scaling import process_usage
from benchmarks.scratch_device import ScratchDevice

WORKER = Path(__file__).with_name("wait_worker.py")
HERE = Path(__file__).resolve().parent.parent


class Side:
    """One client process (a checkout's libnpu) answering block requests over pipes."""

    def __init__(self, label: str, checkout: Path, devroot: str, models: list[Path], env: dict[str, str]):
        self.label = label
        environment = os.environ | env | {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, str(WORKER), devroot, *map(str, models)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment)
        self.pid = self._reply()["pid"]

    def _reply(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        line = stdout.readline() if stdout is not None else ""
        if not line:
            raise RuntimeError(f"{self.label}: the client process ended (status {self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def block(self, index: int, count: int) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{index} {count}\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _stack_cpu_s(dev: ScratchDevice) -> float:
    """CPU seconds used so far by the chip's cores and main process and the driver's daemon."""
    pids = [*dev.chip_cores(), dev.daemon_pid, *[p for p in [dev.chip_main()] if p]]
    return sum(process_usage(pid).cpu_s for pid in pids)


def measure(sides: list[Side], dev: ScratchDevice, models: list[str], rounds: int, block: int) -> list[dict]:
    """A row per (model, side)."""
    keys = [(side, index) for side in sides for index in range(len(models))]
    wall: dict[Any, list[float]] = {key: [] for key in keys}
    cpu = dict.fromkeys(keys, 0.0)
    stack = dict.fromkeys(keys, 0.0)
    waits: dict[Any, dict[str, int]] = {key: {"at_once": 0, "spun": 0, "slept": 0} for key in keys}
    shuffle = random.Random(27).shuffle
    for _ in range(rounds):
        shuffle(keys)
        for key in keys:
            side, index = key
            before = _stack_cpu_s(dev)
            reply = side.block(index, block)
            stack[key] += _stack_cpu_s(dev) - before
            wall[key] += reply["wall"]
            cpu[key] += reply["cpu_s"]
            for way, n in reply["waits"].items():
                waits[key][way] += n
    rows = []
    for index, name in enumerate(models):
        for side in sides:
            key = (side, index)
            n = len(wall[key])
            waited = sum(waits[key].values()) or 1
            rows.append({
                "model": name, "side": side.label,
                "wall_p50_ms": float(np.percentile(wall[key], 50)) * 1e3,
                "wall_p90_ms": float(np.percentile(wall[key], 90)) * 1e3,
                "asleep": waits[key]["slept"] / waited, "spun": waits[key]["spun"] / waited,
                "client_cpu_us": cpu[key] / n * 1e6, "stack_cpu_us": (cpu[key] + stack[key]) / n * 1e6})
    return rows


def _load_average() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.hinted_wait", description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", action="append", default=[], metavar="[LABEL=]CHECKOUT",
                    help="another checkout, a side of its own (label: 'before')")
    ap.add_argument("--models", nargs="+", default=["resnet8", "vww", "mww-okay-nabu"])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--unhinted", action="store_true", help="a third side: this checkout, no sleep ahead")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("hinted_wait: mounting the device needs root", file=sys.stderr)
        return 2
    held_out = [m for m in args.models if m in BY_NAME and BY_NAME[m].half != "work"]
    if held_out:
        ap.error(f"held-out models are measured by the lead only: {', '.join(held_out)}")
    load_before = _load_average()
    with tempfile.TemporaryDirectory(prefix="hinted-wait-") as tmp, ScratchDevice(cores=2) as dev:
        paths = [_compiled(name, Path(tmp))[1] for name in args.models]
        plan: list[tuple[str, Path, dict[str, str]]] = [("this", HERE, {})]
        for baseline in args.baseline:
            label, _, checkout = baseline.rpartition("=")
            plan.append((label or "before", Path(checkout).resolve(), {}))
        if args.unhinted:
            plan.append(("unhinted", HERE, {"NPU_QUEUE_SLEEP_AHEAD": "0"}))
        sides: list[Side] = []
        try:
            for label, checkout, env in plan:
                sides.append(Side(label, checkout, dev.devroot, paths, env))
            rows = measure(sides, dev, args.models, args.rounds, args.block)
        finally:
            for side in sides:
                side.close()
    load = {"before": load_before, "after": _load_average()}
    if args.json:
        print(json.dumps({"rows": rows, "load_average": load}, indent=2))
        return 0
    print(f"load average {load['before']} before, {load['after']} after; "
          f"{args.rounds} rounds of {args.block} per model and side")
    print(f"{'model':<14} {'side':<9} {'p50 ms':>7} {'p90 ms':>7} {'asleep':>7} {'spun':>6} "
          f"{'client CPU us':>13} {'stack CPU us':>12}")
    for r in rows:
        print(f"{Path(r['model']).stem[:14]:<14} {r['side']:<9} {r['wall_p50_ms']:>7.3f} {r['wall_p90_ms']:>7.3f} "
              f"{r['asleep']:>7.0%} {r['spun']:>6.0%} {r['client_cpu_us']:>13.1f} {r['stack_cpu_us']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
