"""Where one synchronous inference's wall time goes, stage by stage, on a device of its own.

``npu bench model`` gives a request's p50; this splits it. Each inference of the latency
loop is timed at the stage boundaries of ``InferRequest.infer`` through a user queue:

- ``inputs``: ``set_inputs`` (shape/dtype checks, quantization, the copy into the DMA buffer);
- ``submit``: the queue entry, tail and doorbell (``UserQueue.submit``);
- ``chip``: the core's own wall time for the job (the completion's ``exec_ns``);
- ``transport``: the rest of the wait, i.e. the core picking the job up plus the client
  seeing its completion (wake-ups, preemption on a shared machine);
- ``outputs``: reading the outputs back (``outputs()``).

It also reports CPU time per inference (less noisy than wall time on a shared machine):
the client's (``time.process_time``, LiteRT's calls taken out), the chip cores' and the
driver's (/proc stat), the context switches per inference of each (the client's count
LiteRT's too), and
LiteRT's XNNPACK and BUILTIN_REF p50 timed interleaved with the device (one call of each
per round), as ``npu bench model`` does.

Run: ``python -m benchmarks.latency_breakdown [resnet8 vww kws] [--seconds 2] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

import libnpu
from benchmarks.scratch_device import ScratchDevice
from libnpu.tools.models import LiteRT, litert_available, resolve
from libnpu.tools.run import random_inputs

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (and of its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of ``pid``'s main thread so far."""
    total = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def _p50_us(values: list[float]) -> float:
    return round(float(np.median(values)) * 1e6, 1)


def breakdown(model: libnpu.CompiledModel, inputs: list[np.ndarray], seconds: float,
              others: dict[str, Any], pids: dict[str, list[int]]) -> dict[str, Any]:
    """The stage p50s (microseconds) of ``model``'s synchronous inferences, with the CPU
    time per inference of this process and of ``pids`` (label -> processes)."""
    request = model.create_request()
    queue = model.device.shared_queue(request._priority)
    if queue is None or request.partitioned or request.command is None:
        request.release()
        raise SystemExit("the breakdown needs a user queue and a model without host steps")
    stages: dict[str, list[float]] = {k: [] for k in ("inputs", "submit", "wait", "chip", "transport", "outputs",
                                                        "total")}
    litert: dict[str, list[float]] = {name: [] for name in others}
    clock = time.perf_counter
    try:
        for _ in range(5):
            request.infer(inputs)
            for run in others.values():
                run()
        pids = {"client": [os.getpid()], **pids}
        cpu_before = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
        switches_before = {k: sum(context_switches(p) for p in v) for k, v in pids.items()}
        own_before = time.process_time()
        count, deadline = 0, clock() + seconds
        npu_wall = 0.0
        while count < 20 or clock() < deadline:
            t0 = clock()
            request.set_inputs(inputs)
            t1 = clock()
            fence = queue.submit(request.command.address, request.command_size)
            t2 = clock()
            fence.wait()
            t3 = clock()
            request.outputs()
            t4 = clock()
            npu_wall += t4 - t0
            chip = fence.exec_ns / 1e9
            for name, value in (("inputs", t1 - t0), ("submit", t2 - t1), ("wait", t3 - t2), ("chip", chip),
                                ("transport", t3 - t2 - chip), ("outputs", t4 - t3), ("total", t4 - t0)):
                stages[name].append(value)
            count += 1
            own_before += sum(_timed(run, litert[name]) for name, run in others.items())
        own = time.process_time() - own_before
        cpu = {k: sum(cpu_seconds(p) for p in v) - cpu_before[k] for k, v in pids.items() if k != "client"}
        switches = {k: sum(context_switches(p) for p in v) - switches_before[k] for k, v in pids.items()}
    finally:
        request.release()
    result: dict[str, Any] = {"inferences": count,
                              "p50_us": {k: _p50_us(v) for k, v in stages.items()},
                              "mean_us": {k: round(float(np.mean(v)) * 1e6, 1) for k, v in stages.items()},
                              "switches_per_inference": {k: round(v / count, 2) for k, v in switches.items()},
                              "cpu_per_inference_us": {"client": round(own / count * 1e6, 1),
                                                       **{k: round(v / count * 1e6, 1) for k, v in cpu.items()}}}
    if litert:
        result["litert_p50_us"] = {k: _p50_us(v) for k, v in litert.items()}
        xnn = result["litert_p50_us"].get("xnnpack")
        if xnn:
            result["npu_p50_over_xnnpack_p50"] = round(result["p50_us"]["total"] / xnn, 2)
    return result


def _timed(run: Any, samples: list[float]) -> float:
    """Run ``run`` once, append its wall time to ``samples``; returns its CPU time (taken
    out of the client's own figure)."""
    cpu, started = time.process_time(), time.perf_counter()
    run()
    samples.append(time.perf_counter() - started)
    return time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["resnet8", "vww", "kws"])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--no-litert", action="store_true", help="time the device alone")
    parser.add_argument("--litert", nargs="+", choices=["xnnpack", "builtin_ref"], default=["xnnpack", "builtin_ref"],
                        help="LiteRT's kernels interleaved with the device (default both, as npu bench model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    with ScratchDevice(cores=2) as dev:
        for spec in args.models:
            path = resolve(spec)
            model = libnpu.load(path, devroot=dev.devroot, cache_dir=dev.tmp / "cache")
            try:
                inputs = random_inputs(model.inputs, seed=1)
                others: dict[str, Any] = {}
                if not args.no_litert and path.suffix == ".tflite" and litert_available():
                    for kernels, label in (("default", "xnnpack"), ("reference", "builtin_ref")):
                        if label not in args.litert:
                            continue
                        it = LiteRT(path, kernels, threads=1)
                        feeds = [np.asarray(x, d["dtype"]) for x, d in zip(inputs, it.input_details)]
                        others[label] = (lambda it=it, feeds=feeds: it.run(feeds))
                pids = {"cores": dev.chip_cores(), "driver": [dev.daemon_pid]}
                results[spec] = breakdown(model, inputs, args.seconds, others, pids)
            finally:
                model.close()
            if not args.json:
                r = results[spec]
                stages = ", ".join(f"{k} {v}" for k, v in r["p50_us"].items())
                means = ", ".join(f"{k} {v}" for k, v in r["mean_us"].items())
                print(f"{spec}: p50 us: {stages}; mean us: {means}; CPU us per inference: "
                      f"{r['cpu_per_inference_us']}; context switches per inference: {r['switches_per_inference']}"
                      + (f"; LiteRT p50 us {r['litert_p50_us']}" if "litert_p50_us" in r else "")
                      + (f", npu/XNNPACK {r['npu_p50_over_xnnpack_p50']}" if "npu_p50_over_xnnpack_p50" in r else ""),
                      flush=True)
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
