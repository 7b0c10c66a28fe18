"""``npu bench nop``: job latency through libnpu next to the raw request round
trip on the same node, measured in one run.

- ``nop``: a job of one NOP task, submitted and waited for through libnpu in one
  round trip (``Device.run``: SUBMIT with NPU_SUBMIT_WAIT) - the sync path.
- ``nop_submit_wait``: the same job as two requests (``submit`` then ``wait``).
- ``rtt``: one GET_INFO frame written and its reply read on the node, no libnpu.
- ``jobs_per_s_one_by_one`` / ``jobs_per_s_batched_8``: NOP jobs per second run one
  by one (``run``) and queued eight per request (SUBMIT_BATCH) then waited for at once.
RTT samples are taken before and after the job samples, with the chip idle, so
neither figure borrows from the other.

``path`` chooses how jobs go to the chip: ``queue`` (the default) through a user-mode
submission queue (``Device.create_queue``: no request to the driver per job; "submit+wait"
and "submit then wait" are then the same thing, and "batched" is eight submissions then
one wait), ``ioctl`` through SUBMIT / WAIT requests on the node. A device that offers no
queue (an older driver, a limit reached) is measured on ``ioctl``; ``path`` in the result
says which was used.
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kmd_fuse import uapi
from kmd_fuse.uapi import NpuError
from libnpu.portability import Device, Session

PATHS = ("queue", "ioctl")


def nop_job(device: Device, path: str = "queue") -> tuple[Callable[[], object], Callable[[int], None], str]:
    """(run one NOP job and wait, run n NOP jobs submitted back to back then wait, the path
    actually used): ``queue`` falls back to ``ioctl`` when the device offers no queue."""
    nop = device.command_buffer()
    nop.add("NOP")
    if path == "queue":
        try:
            queue = device.create_queue()
        except NpuError:
            path = "ioctl"
        else:
            def queued(n: int) -> None:
                fence = None
                for _ in range(n):
                    fence = device.queue_submit(queue, nop)
                assert fence is not None
                fence.wait()
            return (lambda: device.queue_run(queue, nop)), queued, path
    batch = [device.prepare_submit(nop) for _ in range(8)]

    def batched(n: int) -> None:
        for start in range(0, n, 8):
            device.wait(device.submit_batch(batch[:min(8, n - start)]))
    return (lambda: device.run(nop)), batched, path


def percentile(samples: list[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of ``samples``, numpy's linear interpolation."""
    return float(np.percentile(samples, q * 100))


def raw_rtt_samples(node: Path, count: int) -> list[float]:
    fd = os.open(node, os.O_RDWR)
    frame = uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO))
    samples = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, frame)
            os.read(fd, uapi.NPU_MAX_FRAME)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return samples


def nop_latency(devroot: Path, count: int, path: str = "queue") -> dict:
    with Session(devroot) as session:
        device = session.open()         # --device / $NPU_DEVICE, else 0
        run_one, run_many, path = nop_job(device, path)
        nop = device.command_buffer()
        nop.add("NOP")
        for _ in range(min(200, count)):                 # warm up
            run_one()
        rtt = raw_rtt_samples(device.path, count // 2)
        sync, split = [], []
        for _ in range(count):
            start = time.perf_counter()
            run_one()
            sync.append(time.perf_counter() - start)
        for _ in range(count):
            start = time.perf_counter()
            if path == "ioctl":
                device.submit(nop).wait()
            else:
                run_one()
            split.append(time.perf_counter() - start)
        started = time.perf_counter()
        for _ in range(max(1, count // 8)):
            run_many(8)
        batched_s = (time.perf_counter() - started) / (max(1, count // 8) * 8)
        time.sleep(0.01)                                 # let the chip go idle again
        rtt += raw_rtt_samples(device.path, count - count // 2)
    us = 1e6
    result = {
        "path": path,
        "jobs": count,
        "nop_p50_us": round(percentile(sync, 0.5) * us, 1),
        "nop_p99_us": round(percentile(sync, 0.99) * us, 1),
        "nop_submit_wait_p50_us": round(percentile(split, 0.5) * us, 1),
        "nop_submit_wait_p99_us": round(percentile(split, 0.99) * us, 1),
        "rtt_p50_us": round(percentile(rtt, 0.5) * us, 1),
    }
    result["jobs_per_s_one_by_one"] = round(len(sync) / sum(sync), 1)
    result["jobs_per_s_batched_8"] = round(1 / batched_s, 1)     # SUBMIT_BATCH of 8, then one WAIT
    result["ratio"] = round(result["nop_p50_us"] / result["rtt_p50_us"], 2)
    result["ratio_submit_wait"] = round(result["nop_submit_wait_p50_us"] / result["rtt_p50_us"], 2)
    return result


def _client(devroot: str, seconds: float, barrier, results, path: str = "queue") -> None:
    completed, errors = 0, 0
    with Session(devroot) as session:
        device = session.open()         # --device / $NPU_DEVICE, else 0
        run_one, _, _ = nop_job(device, path)
        barrier.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            try:
                run_one()
                completed += 1
            except OSError:
                errors += 1
    results.put((completed, errors))


def jain_fairness(values: list[int]) -> float:
    """(sum x)^2 / (n * sum x^2): 1.0 when every client got the same share."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return round(total * total / (len(values) * squares), 4) if squares else 0.0


def run_clients(target: Callable[[str, float, Any, Any], None], devroot: Path, processes: int,
                seconds: float, grace: float = 60) -> tuple[list[Any], float]:
    """Run ``target(devroot, seconds, barrier, results)`` in ``processes`` spawned processes,
    all let go at once by the barrier; each puts one result on ``results``. The results
    (waiting up to ``seconds + grace`` for each) and the seconds from release to the last."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes + 1), ctx.Queue()
    workers = [ctx.Process(target=target, args=(str(devroot), seconds, barrier, results))
               for _ in range(processes)]
    # A Ctrl-C reaches the workers too (the terminal signals the whole process group): they
    # start with SIGINT ignored (kept across exec; only this process's own Ctrl-C in these
    # few milliseconds is lost), and this process stops them when it is interrupted.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for worker in workers:
            worker.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        barrier.wait()
        start = time.perf_counter()
        outcomes = [results.get(timeout=seconds + grace) for _ in workers]
        elapsed = time.perf_counter() - start
    finally:
        stopped = sys.exc_info()[0] is not None      # interrupted or failed: the workers end now
        for worker in workers:
            if stopped:
                worker.terminate()
            worker.join()
    return outcomes, elapsed


def nop_throughput(devroot: Path, processes: int, seconds: float, path: str = "queue") -> dict:
    outcomes, elapsed = run_clients(functools.partial(_client, path=path), devroot, processes, seconds)
    completed = [c for c, _ in outcomes]
    return {
        "processes": processes,
        "seconds": round(elapsed, 2),
        "jobs_per_s": round(sum(completed) / elapsed, 1),
        "completed": completed,
        "errors": sum(e for _, e in outcomes),
        "jain_fairness": jain_fairness(completed),
    }
