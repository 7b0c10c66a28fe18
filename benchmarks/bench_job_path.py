"""The fixed cost of one job through the device, broken down.

On a mounted device (``npu-kmd start --devroot DIR``) this times, interleaved round by
round so every figure sees the same load:

- ``rtt``: one raw GET_INFO frame written and its reply read (no libnpu): the FUSE floor;
- ``nop``: a one-NOP job through libnpu, submit + wait in one request (``Device.run``);
- ``nop_queue``: the same job through a user-mode submission queue (no request at all);
- ``infer`` of one-layer models (FC 16->16 by default, ``--fc`` adds FC 1024->1000):
  ``InferRequest.infer`` as users call it (through the device's user queue when it offers
  one), and the same steps timed one by one (``set_inputs``, ``device.run``, ``outputs``).

The chip's own time per job (``exec``: wall time in ``run_job``, from the context's
GET_STATS busy time) is subtracted to give the path's overhead (``infer - exec``).

Run: ``python -m benchmarks.bench_job_path --devroot /tmp/fx/dev [--n 2000] [--fc]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import libnpu
from kmd_fuse import uapi
from libnpu.compiler.lower import lower
from libnpu.portability import Session
from libnpu.tools.ops_bench import Layer, build_graph


def p50(samples: list[int]) -> float:
    return round(float(np.median(samples)) / 1e3, 1)


def p99(samples: list[int]) -> float:
    return round(float(np.percentile(samples, 99)) / 1e3, 1)


def busy_ns(device) -> tuple[int, int]:
    stats = device.stats()
    return stats["busy_time_ns"], stats["jobs_completed"]


def bench(devroot: Path, n: int, layers: list[Layer]) -> dict:
    rng = np.random.default_rng(0)
    get_info = uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO))
    raw_fd = os.open(devroot / "npu0", os.O_RDWR)
    with Session(devroot) as session:
        device = session.open(0)
        nop = device.command_buffer()
        nop.add("NOP")
        queue = device.create_queue()
        models = []
        for layer in layers:
            graph = build_graph(layer, rng)
            model = libnpu.load(lower(graph), device)
            request = model.create_request()
            x = rng.integers(-128, 128, graph.tensors["x"].shape, dtype=np.int8)
            models.append((layer, model, request, x))

        def rtt() -> None:
            os.write(raw_fd, get_info)
            os.read(raw_fd, uapi.NPU_MAX_FRAME)

        samples: dict[str, list[int]] = {"rtt": [], "nop": [], "nop_queue": []}
        for layer, *_ in models:
            for part in ("infer", "set_inputs", "run", "outputs"):
                samples[f"{layer.name}/{part}"] = []
        chip: dict[str, list[int]] = {layer.name: [0, 0] for layer, *_ in models}
        for round_ in range(n + n // 10):
            timed = round_ >= n // 10          # the first tenth warms up
            t0 = time.perf_counter_ns()
            rtt()
            t1 = time.perf_counter_ns()
            device.run(nop)
            t2 = time.perf_counter_ns()
            device.queue_submit(queue, nop).wait()
            t3 = time.perf_counter_ns()
            if timed:
                samples["rtt"].append(t1 - t0)
                samples["nop"].append(t2 - t1)
                samples["nop_queue"].append(t3 - t2)
            for layer, model, request, x in models:
                before = busy_ns(device) if timed and round_ % 10 == 0 else None
                t0 = time.perf_counter_ns()
                request.infer([x])
                t1 = time.perf_counter_ns()
                if before is not None:
                    after = busy_ns(device)
                    chip[layer.name][0] += after[0] - before[0]
                    chip[layer.name][1] += after[1] - before[1]
                # the same steps one by one
                t2 = time.perf_counter_ns()
                request.set_inputs([x])
                t3 = time.perf_counter_ns()
                model.device.run(request.command, request.buffers, size=request.command_size)
                t4 = time.perf_counter_ns()
                request.outputs()
                t5 = time.perf_counter_ns()
                if timed:
                    samples[f"{layer.name}/infer"].append(t1 - t0)
                    samples[f"{layer.name}/set_inputs"].append(t3 - t2)
                    samples[f"{layer.name}/run"].append(t4 - t3)
                    samples[f"{layer.name}/outputs"].append(t5 - t4)
        for _, model, request, _ in models:
            request.release()
            model.close()
    os.close(raw_fd)
    result: dict = {"rounds": n}
    for name, values in samples.items():
        result[f"{name}_p50_us"] = p50(values)
        if "/" not in name or name.endswith("/infer"):
            result[f"{name}_p99_us"] = p99(values)
    for name, (total, jobs) in chip.items():
        exec_us = round(total / max(jobs, 1) / 1e3, 1)
        result[f"{name}/chip_exec_mean_us"] = exec_us
        result[f"{name}/infer_minus_exec_us"] = round(result[f"{name}/infer_p50_us"] - exec_us, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devroot", required=True, type=Path)
    ap.add_argument("--n", type=int, default=2000, help="timed rounds")
    ap.add_argument("--fc", action="store_true", help="also FC 1024->1000 (batch 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    layers = [Layer("fc16", "fc", 1, 16, 16)]
    if args.fc:
        layers.append(Layer("fc1024", "fc", 1, 1024, 1000))
    result = bench(args.devroot, args.n, layers)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
