"""The chip's own time per job, without the transport: a model's command buffer replayed
in this process by the chip's real executor.

`npu bench model` times an inference through the driver and the cores' processes; on a
shared 2-vCPU machine most of that is the client -> driver -> core hops and their
wake-ups, and its chip figure (GET_STATS busy time) is wall time, which the other
processes' preemptions inflate. This runs the same job plans (decoded once, then replayed
with the C kernels bound to the operands) on one buffer object through the real DMA
engine and `firmware_sim.executor.run_job`, and reports the CPU time per job
(``time.thread_time``, which a preempted thread does not accrue) next to the wall time,
best of ``--rounds``: the figure to compare kernel changes by.

A model may also be a compiled ``.nlb`` (``corpus_bench --workdir DIR`` keeps each corpus
model's as ``DIR/<name>/model.nlb``, compiled with the defaults and its calibration inputs).

Run: ``python -m benchmarks.chip_replay [resnet8 vww kws | FILE.nlb ...] [--jobs 200] [--rounds 5]``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from firmware_sim import job_plans
from firmware_sim.executor import run_job
from firmware_sim.timing import HardwareProfile
from libnpu.compiler.cache import CompileCache, compile_cached
from libnpu.loadable import Loadable
from libnpu.tools.models import resolve
from libnpu.tools.run import random_inputs
from npu_hw import iommu
from tests.support.chip_memory import ASID, ChipMemory


def _write(memory: ChipMemory, iova: int, data: np.ndarray) -> None:
    offset = iova - iommu.IOVA_BASE
    memory.bytes[offset:offset + data.size] = data


def replay(spec: str, jobs: int, rounds: int, cache: CompileCache | None = None) -> dict[str, Any]:
    """CPU and wall microseconds per job (best of ``rounds`` runs of ``jobs`` jobs) of model
    ``spec``'s inference on random inputs, after a first run that decodes the job; raises
    RuntimeError if the job fails or its replays write other outputs than that first run."""
    path = resolve(spec)
    loadable = Loadable.load(path) if path.suffix == ".nlb" else compile_cached(path, cache=cache)[0]
    return replay_loadable(loadable, jobs, rounds, spec)


def loaded_job(memory: ChipMemory, loadable: Loadable, name: str = "the model") -> tuple[list[int], int, bytes]:
    """``loadable`` placed in ``memory`` (its regions, random inputs) and its job run once
    (the run that decodes it): the regions' addresses, the command buffer's, its bytes."""
    bases = [memory.alloc(max(region.size, 1)) for region in loadable.regions]
    for index, region in enumerate(loadable.regions):
        if region.content is not None:
            _write(memory, bases[index], np.frombuffer(loadable.region_image(index, bases), np.uint8))
    # floats in [-1, 1) (random bytes would be NaNs and denormals), ids valid in any table
    for desc, values in zip(loadable.inputs(), random_inputs(loadable.inputs(), seed=1)):
        _write(memory, bases[desc.region] + desc.offset, np.ascontiguousarray(values).reshape(-1).view(np.uint8))
    command = loadable.command_buffer(bases)
    at = memory.put(np.frombuffer(command, np.uint8))
    first = run_job(memory.dma, ASID, at, len(command), HardwareProfile())
    if first.status:
        raise RuntimeError(f"{name}: the job failed with status {first.status}")
    return bases, at, command


def replay_loadable(loadable: Loadable, jobs: int, rounds: int, name: str = "the model") -> dict[str, Any]:
    """``replay`` of a compiled model; also says the job plan's kind (``native``: one C call
    for the whole job; ``mixed``: runs of C calls with ``python_steps`` tasks from Python
    between them; ``python``: every task from Python)."""
    with tempfile.TemporaryDirectory() as bus:
        memory = ChipMemory(Path(bus), size=64 << 20)
        bases, at, command = loaded_job(memory, loadable, name)
        profile = HardwareProfile()
        outputs = [(bases[d.region] + d.offset, d.nbytes) for d in loadable.outputs()]
        decoded = [memory.get(iova, np.uint8, (size,)) for iova, size in outputs]
        for iova, size in outputs:
            _write(memory, iova, np.zeros(size, np.uint8))
        cpu, wall = [], []
        for _ in range(rounds):
            cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
            for _ in range(jobs):
                run_job(memory.dma, ASID, at, len(command), profile)
            cpu.append((time.thread_time_ns() - cpu0) / jobs / 1e3)
            wall.append((time.perf_counter_ns() - wall0) / jobs / 1e3)
        replayed = [memory.get(iova, np.uint8, (size,)) for iova, size in outputs]
        if any(not np.array_equal(a, b) for a, b in zip(decoded, replayed)):
            raise RuntimeError(f"{name}: the replayed job's outputs differ from the first run's")
        plan = job_plans.lookup(memory.dma, ASID, at, np.frombuffer(command, np.uint8))
    kind, python_steps = "python", len(loadable.tasks)
    if plan is not None and plan.native is not None:
        kind, python_steps = "native", 0
    elif plan is not None and plan.mixed is not None:
        kind = "mixed"
        python_steps = sum(not isinstance(s, job_plans.NativeSteps) for _, s in plan.mixed.segments)
    return {"tasks": len(loadable.tasks), "cpu_us": round(min(cpu), 1), "wall_us": round(min(wall), 1),
            "plan": kind, "python_steps": python_steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet8", "vww", "kws"],
                    help="model-zoo names, model files or .nlb files")
    ap.add_argument("--jobs", type=int, default=200, help="jobs per round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (the best is reported)")
    ap.add_argument("--cache-dir", help="compile cache directory (default: the user's)")
    args = ap.parse_args(argv)
    cache = CompileCache(args.cache_dir) if args.cache_dir else None
    for spec in args.models:
        r = replay(spec, args.jobs, args.rounds, cache)
        print(f"{spec:10} {r['tasks']:4} tasks  chip CPU {r['cpu_us']:7.1f} us/job  wall {r['wall_us']:7.1f} us/job",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
