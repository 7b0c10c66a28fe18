"""One inference on one core against both cores (NPU_TILES 1 vs -1), side by side in one run.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.multicore [--models resnet8 vww] [--rounds 5] [--block 200] [--json]

On a 2-core device of its own (standard profile, no pacing) each model is loaded twice: with
NPU_TILES 1 (compiled as one task per layer, run in order on one core) and NPU_TILES -1 (its
large layers split by the compiler, the job run by its dependency graph on both cores:
docs/hardware.md, *Task graphs*). For each it prints the modeled device time of one
inference (PERF_COUNT), the ratio of the two, and the wall-clock p50 of synchronous
inferences (``infer``), the two loads alternating in blocks of ``--block`` inferences for
``--rounds`` rounds (40 of 25 by default), so the machine's load weighs on both alike. The outputs of the two
are compared byte for byte on the same inputs.

It passes (exit status 0) when, for every model, the two-core device time is at most 0.6x
the one-core one, the outputs are identical, and the two-core wall p50 is no worse than the
one-core one by more than 5% (the emulator runs a job's tasks on the core that took it:
the wall time is one core's either way).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import libnpu

from .scratch_device import ScratchDevice

DEVICE_TIME_RATIO = 0.6
WALL_SLACK = 1.05


def _device_time_ns(model: libnpu.CompiledModel, inputs: list[np.ndarray]) -> int:
    model.set_property({"PERF_COUNT": True})
    model.infer(inputs)
    profile = model.get_profiling_info()
    model.set_property({"PERF_COUNT": False})
    assert profile is not None
    return profile.device_time_ns


def measure(devroot: str | os.PathLike, name: str, rounds: int, block: int) -> dict:
    from libnpu.tools.models import resolve
    from libnpu.tools.run import random_inputs
    path = resolve(name)
    loads = {tiles: libnpu.load(path, devroot=devroot, config={"NPU_TILES": tiles}) for tiles in (1, -1)}
    try:
        inputs = random_inputs(loads[1].inputs)
        outputs = {tiles: model.infer(inputs) for tiles, model in loads.items()}
        identical = all(np.array_equal(a, b) for a, b in zip(outputs[1], outputs[-1], strict=True))
        device = {tiles: _device_time_ns(model, inputs) for tiles, model in loads.items()}
        samples: dict[int, list[float]] = {1: [], -1: []}
        for _ in range(rounds):
            for tiles, model in loads.items():
                for _ in range(block):
                    started = time.perf_counter()
                    model.infer(inputs)
                    samples[tiles].append(time.perf_counter() - started)
        p50 = {tiles: float(np.median(s)) * 1e3 for tiles, s in samples.items()}
        return {"model": name, "tasks": {"1": len(loads[1].loadable.tasks), "2": len(loads[-1].loadable.tasks)},
                "device_time_us": {"1": device[1] / 1e3, "2": device[-1] / 1e3},
                "device_time_ratio": device[-1] / device[1],
                "wall_p50_ms": {"1": p50[1], "2": p50[-1]}, "wall_p50_ratio": p50[-1] / p50[1],
                "identical": identical}
    finally:
        for model in loads.values():
            model.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multicore", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet8", "vww"], help="model files or model-zoo names")
    ap.add_argument("--rounds", type=int, default=40, help="alternating rounds (default 40)")
    ap.add_argument("--block", type=int, default=25, help="inferences per load and round (default 25)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("multicore: mounting the device needs root", file=sys.stderr)
        return 2
    with ScratchDevice(cores=2) as device:
        rows = [measure(device.devroot, name, args.rounds, args.block) for name in args.models]
    ok = all(r["identical"] and r["device_time_ratio"] <= DEVICE_TIME_RATIO and r["wall_p50_ratio"] <= WALL_SLACK
             for r in rows)
    if args.json:
        print(json.dumps({"models": rows, "ok": ok}, indent=2))
        return 0 if ok else 1
    print(f"{'model':<10} {'tasks 1/2':>9} {'device us 1 core':>16} {'2 cores':>8} {'ratio':>6} "
          f"{'wall p50 ms 1 core':>18} {'2 cores':>8} {'ratio':>6}  bytes")
    for r in rows:
        print(f"{r['model']:<10} {r['tasks']['1']:>4}/{r['tasks']['2']:<4} {r['device_time_us']['1']:>16.2f} "
              f"{r['device_time_us']['2']:>8.2f} {r['device_time_ratio']:>6.3f} {r['wall_p50_ms']['1']:>18.3f} "
              f"{r['wall_p50_ms']['2']:>8.3f} {r['wall_p50_ratio']:>6.3f}  "
              f"{'identical' if r['identical'] else 'DIFFER'}")
    print("OK" if ok else f"FAILED: device time <= {DEVICE_TIME_RATIO}x, wall p50 <= {WALL_SLACK}x, identical bytes")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
