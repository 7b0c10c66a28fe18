"""How each inference of a tiny model waited: the client's wait and the core's state at the submit.

A tiny model's job takes 1-8 us on the core; its p50 is decided by who sleeps. Each
inference of the timed loop (``InferRequest.infer``, then LiteRT XNNPACK on the same input
with ``--xnnpack``, as ``corpus_bench`` interleaves them: the client's own work between two
inferences) is put in one class by:

- how the client's wait ended (``UserQueue.wait_counts``: ``at_once``, done before the wait;
  ``spun``, in a spin; ``slept``, asleep on the futex or the completion line);
- whether the lead core polled the queue just before the inference (``HDR_POLLING``: the
  submit then rings no doorbell) or slept (the doorbell wakes it).

It prints each class's share and p50 beside the loop's p50 and the load average: a p50 near
the chip time needs ``spun`` or ``at_once`` with the core polling; ``slept`` with the core asleep
is two wake-ups (the client's and the core's), about 35-50 us on the 2-vCPU VM at load 10-18.
Work-half corpus models only (``benchmarks.fixed_cost``'s rule), or model-zoo names.

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.tiny_waits [--models gesture-hagrid] [--seconds 3] [--xnnpack]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from benchmarks.corpus_bench import _device_inputs, _reference_step
from benchmarks.fixed_cost import _compiled
from benchmarks.scratch_device import ScratchDevice
from libnpu.tools.run import random_inputs
from npu_hw import queues


def measure(name: str, dev: ScratchDevice, workdir: Path, seconds: float, xnnpack: bool) -> dict[str, Any]:
    """One model's classes (see the module's docstring)."""
    path, nlb, feed, order = _compiled(name, workdir)
    model = libnpu.load(nlb, devroot=str(dev.devroot))
    request = model.create_request()
    try:
        inputs = _device_inputs(model, feed, order) if feed is not None else random_inputs(model)
        reference = _reference_step(path, feed) if xnnpack and feed is not None and path.suffix == ".tflite" else None
        for _ in range(5):
            request.infer(inputs)
        queue = request._job.queue
        if queue is None:
            raise SystemExit(f"{name}: the request runs on no queue of its own (host steps, or no user queue)")
        latencies: list[float] = []
        classes: dict[str, list[float]] = defaultdict(list)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(latencies) < 50:
            polling = queue.header.read32(queues.HDR_POLLING)
            before = queue.wait_counts()
            started = time.perf_counter()
            request.infer(inputs)
            took = time.perf_counter() - started
            after = queue.wait_counts()
            ended = next((k for k in after if after[k] != before[k]), "?")
            latencies.append(took)
            classes[f"{ended}, core {'polling' if polling else 'asleep'}"].append(took)
            if reference is not None:
                reference()
        return {"model": name, "inferences": len(latencies), "p50_us": round(float(np.median(latencies)) * 1e6, 1),
                "chip_p50_us": round(request.timing.chip_ns / 1e3, 1), "load": os.getloadavg()[0],
                "classes": {k: {"share": round(len(v) / len(latencies), 3),
                                "p50_us": round(float(np.median(v)) * 1e6, 1)} for k, v in sorted(classes.items())}}
    finally:
        request.release()
        model.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gesture-hagrid"])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--xnnpack", action="store_true", help="LiteRT XNNPACK between inferences, as corpus_bench")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="npu-tiny-waits-") as work, ScratchDevice() as dev:
        for name in args.models:
            results.append(r := measure(name, dev, Path(work), args.seconds, args.xnnpack))
            if not args.json:
                print(f"{name}: {r['inferences']} inferences, p50 {r['p50_us']} us (chip {r['chip_p50_us']} us), "
                      f"load {r['load']:.1f}")
                for k, v in r["classes"].items():
                    print(f"   {k:28s} {v['share'] * 100:5.1f}%  p50 {v['p50_us']} us")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
