"""One inference on one core against both cores (NPU_TILES 1 vs -1), side by side in one run.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.multicore [--models resnet8 vww] [--rounds 5] [--block 200]
        [--graph-threads auto 0 1] [--json]

On a 2-core device of its own (standard profile, no pacing) each model is loaded twice: with
NPU_TILES 1 (compiled as one task per layer, run in order on one core) and NPU_TILES -1 (its
large layers split by the compiler, the job run by its dependency graph on both cores:
docs/hardware.md, *Task graphs*). For each it prints the modeled device time of one
inference (PERF_COUNT), the ratio of the two, and the wall-clock p50 of synchronous
inferences (``infer`` of a request of each load), the loads alternating in blocks of
``--block`` inferences for ``--rounds`` rounds (40 of 25 by default), in a new order each
round, so the machine's load weighs on all alike (in a fixed order, at load average 11, the
one-core loads of the devices whose blocks came after a two-thread block had a p50 7-10%
lower than the others'), with the p50 of the core's own time on each job (the completion's
``exec_ns``: what the chip's replay costs, without the client's wait, which on a loaded
machine makes a load's wall p50 bimodal). The outputs are compared byte for byte on the same
inputs.

``--graph-threads``: one device per value of the chip's NPU_GRAPH_THREADS (``auto``, the
default: each graph job's plan runs on one or two threads of the core's process, whichever it
measures faster; ``0``: one thread, a layer's bands joined back into one call; ``1``: two:
``firmware_sim.graph_threads``), all up at
once, every load of every device in the same alternating rounds; a row per model and value.
The machine's load average is printed before and after.

``--baseline CHECKOUT``: each value gets a second device whose driver and chip run from
another checkout of the project (a ``git worktree`` or ``git archive`` of the code before a
change, put first on the PYTHONPATH of its processes), its rows marked ``before``: a change
to the chip measured against the code before it in one run, under the same load.

It passes (exit status 0) when, for every model and value, the two-core device time is at most
0.6x the one-core one, the outputs are identical, and the two-core wall p50 is no worse than
the one-core one by more than 5%.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path

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


def measure(devroots: dict[str, str | os.PathLike], name: str, rounds: int, block: int) -> list[dict]:
    """A row per device (its NPU_GRAPH_THREADS -> devroot) for model ``name``."""
    from libnpu.tools.models import resolve
    from libnpu.tools.run import random_inputs
    path = resolve(name)
    loads = {(mode, tiles): libnpu.load(path, devroot=root, config={"NPU_TILES": tiles})
             for mode, root in devroots.items() for tiles in (1, -1)}
    requests = {key: model.create_request() for key, model in loads.items()}
    try:
        inputs = random_inputs(next(iter(loads.values())).inputs)
        outputs = {key: model.infer(inputs) for key, model in loads.items()}
        device = {key: _device_time_ns(model, inputs) for key, model in loads.items()}
        samples: dict[tuple[str, int], list[float]] = {key: [] for key in loads}
        chip: dict[tuple[str, int], list[int]] = {key: [] for key in loads}
        order = list(requests.items())
        shuffle = random.Random(27).shuffle
        for _ in range(rounds):
            shuffle(order)          # each load after any other: no load always follows the same one
            for key, request in order:
                for _ in range(block):
                    started = time.perf_counter()
                    request.infer(inputs)
                    samples[key].append(time.perf_counter() - started)
                    chip[key].append(request.timing.chip_ns)
        rows = []
        for mode in devroots:
            one, two = (mode, 1), (mode, -1)
            p50 = {key: float(np.median(samples[key])) * 1e3 for key in (one, two)}
            chip_p50 = {key: float(np.median(chip[key])) / 1e3 for key in (one, two)}
            rows.append({
                "model": name, "graph_threads": mode,
                "tasks": {"1": len(loads[one].loadable.tasks), "2": len(loads[two].loadable.tasks)},
                "device_time_us": {"1": device[one] / 1e3, "2": device[two] / 1e3},
                "device_time_ratio": device[two] / device[one],
                "wall_p50_ms": {"1": p50[one], "2": p50[two]}, "wall_p50_ratio": p50[two] / p50[one],
                "chip_p50_us": {"1": chip_p50[one], "2": chip_p50[two]},
                "identical": all(np.array_equal(a, b) for a, b in zip(outputs[one], outputs[two], strict=True))})
        return rows
    finally:
        for request in requests.values():
            request.release()
        for model in loads.values():
            model.close()


def _device(stack: contextlib.ExitStack, graph_threads: str, checkout: str | None = None) -> ScratchDevice:
    """A scratch device whose chip runs with NPU_GRAPH_THREADS=``graph_threads``, from
    ``checkout`` if given (its processes inherit this one's environment when it starts)."""
    settings = {"NPU_GRAPH_THREADS": graph_threads}
    if checkout is not None:
        settings["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        return stack.enter_context(ScratchDevice(cores=2))
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def _load_average() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multicore", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet8", "vww"], help="model files or model-zoo names")
    ap.add_argument("--rounds", type=int, default=40, help="alternating rounds (default 40)")
    ap.add_argument("--block", type=int, default=25, help="inferences per load and round (default 25)")
    ap.add_argument("--graph-threads", nargs="+", default=["auto"], choices=["auto", "0", "1"],
                    help="the chip's NPU_GRAPH_THREADS, one device each (default: auto)")
    ap.add_argument("--baseline", metavar="CHECKOUT",
                    help="also a device per value running the driver and chip from this checkout (rows 'before')")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("multicore: mounting the device needs root", file=sys.stderr)
        return 2
    load_before = _load_average()
    with contextlib.ExitStack() as stack:
        modes = dict.fromkeys(args.graph_threads)
        devroots = {mode: _device(stack, mode).devroot for mode in modes}
        if args.baseline:
            devroots.update({f"{mode} before": _device(stack, mode, str(Path(args.baseline).resolve())).devroot
                             for mode in modes})
        rows = [row for name in args.models for row in measure(devroots, name, args.rounds, args.block)]
    load = {"before": load_before, "after": _load_average()}
    ok = all(r["identical"] and r["device_time_ratio"] <= DEVICE_TIME_RATIO and r["wall_p50_ratio"] <= WALL_SLACK
             for r in rows)
    if args.json:
        print(json.dumps({"models": rows, "load_average": load, "ok": ok}, indent=2))
        return 0 if ok else 1
    print(f"load average {load['before']} before, {load['after']} after")
    print(f"{'model':<10} {'threads':>11} {'tasks 1/2':>9} {'device us 1 core':>16} {'2 cores':>8} {'ratio':>6} "
          f"{'wall p50 ms 1 core':>18} {'2 cores':>8} {'ratio':>6} {'chip p50 us 1/2 cores':>21}  bytes")
    for r in rows:
        print(f"{Path(r['model']).stem[:10]:<10} {r['graph_threads']:>11} "
              f"{r['tasks']['1']:>4}/{r['tasks']['2']:<4} {r['device_time_us']['1']:>16.2f} "
              f"{r['device_time_us']['2']:>8.2f} {r['device_time_ratio']:>6.3f} {r['wall_p50_ms']['1']:>18.3f} "
              f"{r['wall_p50_ms']['2']:>8.3f} {r['wall_p50_ratio']:>6.3f} "
              f"{r['chip_p50_us']['1']:>13.1f}/{r['chip_p50_us']['2']:<7.1f}  "
              f"{'identical' if r['identical'] else 'DIFFER'}")
    print("OK" if ok else f"FAILED: device time <= {DEVICE_TIME_RATIO}x, wall p50 <= {WALL_SLACK}x, identical bytes")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
