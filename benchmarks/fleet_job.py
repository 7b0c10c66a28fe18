"""One job of the Slurm and Ray acceptance scripts: ResNet-8 on the device a scheduler
gave it (``NPU_DEVROOT``/``npu<NPU_VISIBLE_DEVICES>``), its output checked against
LiteRT's BUILTIN_REF kernels, reported as one JSON line.

The jobs of one run hold their devices until all of them have started (a barrier of
marker files, waited on with a deadline): the devices they report were held at the same
time, so distinct devices mean the scheduler kept them apart.

Run inside a job: ``python -m benchmarks.fleet_job MODEL.nlb MODEL.tflite BARRIER_DIR COUNT``.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np

import libnpu
from libnpu.portability import Device
from tests.support.litert import ReferenceModel

BARRIER_S = 300.0


def wait_for_all(barrier: Path, count: int, name: str) -> None:
    """Mark this job started and wait until ``count`` jobs have (polled, with a deadline)."""
    (barrier / name).touch()
    deadline = time.monotonic() + BARRIER_S
    while len(list(barrier.iterdir())) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{barrier}: {len(list(barrier.iterdir()))} of {count} jobs started")
        time.sleep(0.05)          # the poll interval


def run_job(nlb: str, tflite: str, barrier: str, count: int, name: str) -> dict:
    """Run ResNet-8 on this job's device once every job holds its own; what happened."""
    devroot, number = Path(os.environ["NPU_DEVROOT"]), int(os.environ["NPU_VISIBLE_DEVICES"])
    reference = ReferenceModel(Path(tflite))
    x = np.random.default_rng(number).integers(-128, 128, reference.shape, dtype=np.int8)
    with Device(devroot / f"npu{number}", number) as device:
        model = libnpu.load(nlb, device)
        wait_for_all(Path(barrier), count, name)
        started = time.perf_counter()
        (y,) = model.infer([x])
        took = time.perf_counter() - started
        model.close()
    return {"job": name, "host": socket.gethostname(), "devroot": str(devroot), "device": number,
            "identical": bool(np.array_equal(y, reference(x))), "infer_ms": round(took * 1e3, 2)}


if __name__ == "__main__":
    nlb, tflite, barrier, count = sys.argv[1:5]
    name = os.environ.get("SLURM_ARRAY_TASK_ID", str(os.getpid()))
    print(json.dumps(run_job(nlb, tflite, barrier, int(count), f"task-{name}")), flush=True)
