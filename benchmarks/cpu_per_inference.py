"""The CPU work of one inference, chip and host, next to LiteRT XNNPACK's, in thread time.

On the shared 2-vCPU VM ``corpus_bench``'s wall p50s swing with the load: a chip job of a few
milliseconds of CPU is preempted (at load 12, 5.5 ms of chip CPU took 19-25 ms of wall time)
while the XNNPACK call beside it often runs within one time slice. This measures what a
change saves whatever the load: interleaved, round after round, in one process and one thread
(``time.thread_time``, which a preempted thread does not accrue):

- each loadable's command buffer replayed by the chip's own executor (as
  ``benchmarks.chip_replay``: every partition's tasks, job plans decoded once) and its host
  steps run by the runtime's host kernels (``libnpu.partitions.host_kernels``) on values of
  the types the chip stores at their boundaries: a partitioned model's CPU side;
- the corpus model's file on LiteRT's default kernels (XNNPACK), one thread, its first
  evaluation input as ``corpus_bench`` prepares it.

It prints, per loadable, the medians of chip and host CPU per inference, their sum and the
sum over XNNPACK's CPU. Left out: the transport (submit, wake-ups, the copies of inputs and
outputs), which ``corpus_bench``'s stages report, and the device trips a host step costs.

Run: ``python -m benchmarks.cpu_per_inference mps-selfie-seg BEFORE.nlb AFTER.nlb [--rounds 20]``
(``corpus_bench --workdir DIR`` keeps each model's loadable as ``DIR/<name>/model.nlb``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.chip_replay import loaded_job
from benchmarks.corpus_feeds import prepare
from benchmarks.corpus_manifest import BY_NAME, fetch
from firmware_sim.executor import run_job
from firmware_sim.timing import HardwareProfile
from libnpu.loadable import Loadable
from libnpu.partitions import boundary, host_kernels
from libnpu.tools.models import LiteRT
from tests.support.chip_memory import ASID, ChipMemory


def _host_steps(loadable: Loadable) -> Callable[[], None]:
    """The loadable's host steps, one after the other, on random values of their stored types."""
    rng = np.random.default_rng(2)
    runs = []
    for step, kernel in zip(loadable.host_steps, host_kernels(loadable)):
        ins = [loadable.tensors[i] for i in step.inputs]
        values = [rng.uniform(-1, 1, d.shape).astype(d.dtype) if np.dtype(d.dtype).kind == "f"
                  else rng.integers(-100, 100, d.shape).astype(d.dtype) for d in ins]
        sources = [boundary(d) for d in ins]
        targets = [boundary(loadable.tensors[i]) for i in step.outputs]
        runs.append(lambda k=kernel, v=values, s=sources, t=targets: k.run([x.copy() for x in v], s, t))

    def run_all() -> None:
        for run in runs:
            run()
    return run_all


def _thread_us(fn: Callable[[], object]) -> float:
    start = time.thread_time_ns()
    fn()
    return (time.thread_time_ns() - start) / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a corpus model's name (benchmarks.corpus --list)")
    ap.add_argument("loadables", nargs="+", help=".nlb files compiled from it")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    corpus_model = BY_NAME[args.model]
    path = fetch(corpus_model)
    if path.suffix != ".tflite":
        ap.error("XNNPACK runs .tflite models only")
    feed = prepare(corpus_model, path).evaluation[0]
    xnnpack = LiteRT(path, "default", threads=1)
    values = [np.asarray(feed[d["name"]], d["dtype"]) for d in xnnpack.input_details]
    with tempfile.TemporaryDirectory() as bus:
        chips, hosts = [], []
        for k, nlb in enumerate(args.loadables):
            loadable = Loadable.load(nlb)
            (Path(bus) / str(k)).mkdir()
            memory = ChipMemory(Path(bus) / str(k), size=64 << 20)
            _, at, command = loaded_job(memory, loadable, nlb)
            size, profile = len(command), HardwareProfile()
            chips.append(lambda m=memory, a=at, n=size, p=profile: run_job(m.dma, ASID, a, n, p))
            hosts.append(_host_steps(loadable))
        samples: dict[str, list[float]] = {"xnnpack": []}
        for _ in range(args.rounds):
            samples["xnnpack"].append(_thread_us(lambda: xnnpack.run(values)))
            for k, (chip, host) in enumerate(zip(chips, hosts)):
                samples.setdefault(f"chip{k}", []).append(_thread_us(chip))
                samples.setdefault(f"host{k}", []).append(_thread_us(host))
    xnn = statistics.median(samples["xnnpack"])
    print(f"{args.model}: LiteRT XNNPACK {xnn:9.1f} us of CPU per inference (median of {args.rounds})")
    for k, nlb in enumerate(args.loadables):
        chip, host = statistics.median(samples[f"chip{k}"]), statistics.median(samples[f"host{k}"])
        print(f"  {nlb}: chip {chip:9.1f} us + host {host:8.1f} us = {chip + host:9.1f} us, "
              f"{(chip + host) / xnn:5.2f}x XNNPACK's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
