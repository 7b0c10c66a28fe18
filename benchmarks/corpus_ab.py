"""Two compiles of the same corpus models timed side by side: before and after a compiler change.

``benchmarks.corpus_bench --workdir DIR`` keeps each model's loadable (``DIR/<model>/model.nlb``,
compiled by that checkout's ``npu compile`` with its defaults). Given two such directories,
one from the base checkout (``--before``) and one from the branch (``--after``), this loads
both loadables of each model on one scratch device and times them in ONE interleaved loop
with the model file on the CPU (LiteRT XNNPACK for a .tflite, onnxruntime for an .onnx, one
thread: corpus_bench's contenders), on the model's first evaluation input, so the two
figures see the same load on a shared machine (separate runs of corpus_bench minutes apart
swing by 2x there). Per model it prints what each compile left to the host (operators
placed on the CPU, host calls and chip jobs per inference), each side's npu p50 and its
ratio to the CPU's p50. The loadables run on this checkout's runtime (the runtime reads
both: the change compared is the compiler's).

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.corpus_bench --models M1 M2 --workdir /tmp/wd-main   # base checkout
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.corpus_bench --models M1 M2 --workdir /tmp/wd-branch  # branch
    OPENBLAS_NUM_THREADS=1 python -m benchmarks.corpus_ab --before /tmp/wd-main --after /tmp/wd-branch --models M1 M2
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import libnpu
from benchmarks.corpus_bench import _device_inputs, _reference_step
from benchmarks.corpus_feeds import prepare
from benchmarks.corpus_inputs import model_inputs
from benchmarks.corpus_manifest import BY_NAME, fetch
from benchmarks.models_in_the_wild import cpu_ops
from benchmarks.scratch_device import ScratchDevice
from libnpu.loadable import Loadable
from libnpu.tools.model_bench import _interleaved, _StagedInference  # npu bench model's own loop
from npu_hw.regs import DEFAULT_JOB_TIMEOUT_MS


def host_work(nlb: Path) -> str:
    """``cpu ops / host calls / chip jobs`` per inference of a loadable."""
    loadable = Loadable.load(nlb)
    jobs = sum(1 for tasks, _ in loadable.partitions() if len(tasks))
    return f"{len(cpu_ops(loadable))}/{len(loadable.host_steps)}/{jobs}"


def compare(name: str, before: Path, after: Path, devroot: str, seconds: float) -> str:
    """One model's row: host work and p50 of each side, and the CPU's p50, from one loop."""
    corpus_model = BY_NAME[name]
    path = fetch(corpus_model)
    feed = prepare(corpus_model, path).evaluation[0]
    order = [i.name for i in model_inputs(path)]
    nlbs = {"before": before / name / "model.nlb", "after": after / name / "model.nlb"}
    models = {side: libnpu.load(nlb, devroot=devroot) for side, nlb in nlbs.items()}
    requests = {side: m.create_request() for side, m in models.items()}
    try:
        steps = {side: _StagedInference(r, _device_inputs(models[side], feed, order)) for side, r in requests.items()}
        reference = _reference_step(path, feed)
        for step in (*steps.values(), reference):
            for _ in range(3):            # warm-up, as time_side_by_side does
                step()
        samples = _interleaved({**steps, "reference": reference}, seconds)
    finally:
        for side, request in requests.items():
            request.release()
            models[side].close()
    p50 = {side: float(np.median(values)) * 1e6 for side, values in samples.items()}
    ref = p50["reference"]
    return (f"{name:<22} {host_work(nlbs['before']):>9} {host_work(nlbs['after']):>9} {ref:>10.1f} "
            f"{p50['before']:>10.1f} {p50['before'] / ref:>6.2f}x {p50['after']:>10.1f} {p50['after'] / ref:>6.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.corpus_ab", description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, type=Path, help="corpus_bench --workdir of the base checkout")
    p.add_argument("--after", required=True, type=Path, help="corpus_bench --workdir of the checkout under test")
    p.add_argument("--models", nargs="+", required=True, metavar="NAME")
    p.add_argument("--seconds", type=float, default=2.0, help="timed loop per model, at least 20 rounds (default 2)")
    args = p.parse_args(argv)
    unknown = [m for m in args.models if m not in BY_NAME]
    if unknown:
        p.error(f"unknown corpus models: {', '.join(unknown)}")
    load_before = os.getloadavg()
    print(f"{'model':<22} {'before':>9} {'after':>9} {'cpu p50':>10} {'before p50':>10} {'ratio':>7} "
          f"{'after p50':>10} {'ratio':>7}\n{'':<22} {'(cpu ops / host calls / chip jobs)':>19}", flush=True)
    failed = 0
    with ScratchDevice(cores=2, memory="2G", watchdog_ms=DEFAULT_JOB_TIMEOUT_MS) as device:
        for name in args.models:
            try:
                print(compare(name, args.before, args.after, str(device.devroot), args.seconds), flush=True)
            except Exception as exc:  # a model that fails is reported, and the run goes on
                failed += 1
                print(f"{name:<22} FAILED {type(exc).__name__}: {exc}", flush=True)
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load_before)} at the start, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
