"""Fixed cost per inference of the tiny corpus models: npu beside XNNPACK and the transport floor, and where it goes.

For each tiny model of the corpus's work half (the held-out half is the lead's to measure,
and refused here), on one scratch device (2 cores), compiled as ``benchmarks.corpus_bench``
compiles it (``npu compile`` with its defaults, the package's own inputs), one loop times,
one call of each per round, round after round, in a new random order each round (the
machine is shared: every contender sees the same load and the same neighbours):

- ``npu``: ``InferRequest.infer`` (inputs in to outputs out: what ``npu bench model``'s
  latency measures), in each wait mode given (``--modes``: ``libnpu.user_queue.set_wait_mode``'s
  adaptive, spin and sleep, all with the request's sleep ahead; ``unhinted``: adaptive without
  it, ``set_sleep_ahead(False)``);
- ``xnnpack``: LiteRT's default kernels, one thread (TFLite models);
- ``nop``: a NOP job through a user queue, the transport's floor;
- ``staged``: the same inference cut at its stage boundaries: ``inputs`` (``set_inputs``),
  ``submit`` (the queue entry and doorbell), ``wait`` (to the completion), split into
  ``chip`` (the core's own wall time for the job, the completion's ``exec_ns``) and
  ``transport`` (the rest: the core picking the job up, the client seeing it done), and
  ``outputs`` (the copies back); ``python`` is the npu p50 minus the staged p50s' sum
  (the runtime's own steps around them, when positive).

Beside the loop, per model:

- ``replay``: the job replayed by the chip's executor in this process (``benchmarks.chip_replay``):
  the kernels' own CPU per job, and the job plan's kind (``native``: one C call, no
  Python per task; ``mixed``: with ``python_steps`` tasks run from Python);
- ``core_overhead``: the chip time p50 minus that replay: the core's own steps per job
  (entry, registers, completion, plan lookup);
- ``cpu_us``: CPU per inference of every process of the stack over ``infer`` alone (a loop of
  its own, the first mode): the client (this thread, ``time.thread_time``), the cores, the
  driver's daemon and the chip's main process (``/proc/<pid>/schedstat``);
- ``client_cpu_us``: the client thread's CPU per call of every step of the loop (each
  mode's: a spin counts, a sleep does not).

Every line carries the load average, since on the shared 2-vCPU VM the figures move with it.

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.fixed_cost [--models mltk-autoencoder ...] [--seconds 2]
        [--modes adaptive spin sleep] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from benchmarks import chip_replay
from benchmarks.corpus import compile_cli, is_int8
from benchmarks.corpus_bench import _device_inputs, _reference_step
from benchmarks.corpus_feeds import prepare
from benchmarks.corpus_inputs import model_inputs
from benchmarks.corpus_manifest import BY_NAME, fetch
from benchmarks.nop_scaling import process_usage
from benchmarks.scratch_device import ScratchDevice
from libnpu import model_zoo, user_queue
from libnpu.tools import bench
from libnpu.tools.models import LiteRT, resolve
from libnpu.tools.run import random_inputs

# The work half's models whose XNNPACK p50 is within a few times 10 us (issue 27's "under
# 10 us" line; on a loaded machine XNNPACK's own p50 doubles or triples).
TINY_MODELS = ("mltk-autoencoder", "mltk-magic-wand", "mww-okay-nabu", "poww-okay-nabu", "mltk-speech",
               "mltk-audio-example1")
MODES = ("adaptive", "spin", "sleep", "unhinted")   # unhinted: adaptive without the sleep ahead
STAGES = ("inputs", "submit", "wait", "chip", "transport", "outputs")


def _p50_us(values: list[float]) -> float:
    return round(float(np.median(values)) * 1e6, 1)


class StagedInference:
    """``InferRequest.infer`` cut at its stage boundaries, through the request's user queue."""

    def __init__(self, request: libnpu.InferRequest, inputs: Any):
        self.request, self.inputs = request, inputs
        queue = request.model.device.shared_queue(request._priority)
        if queue is None or request.partitioned or request.command is None:
            raise SystemExit("the breakdown needs a user queue and a model without host steps")
        self.queue = queue
        self.samples: dict[str, list[float]] = {name: [] for name in STAGES}

    def __call__(self) -> None:
        request, clock = self.request, time.perf_counter
        assert request.command is not None, "checked in __init__"
        t0 = clock()
        request.set_inputs(self.inputs)
        t1 = clock()
        fence = self.queue.submit(request.command.address, request.command_size)
        t2 = clock()
        fence.wait()
        t3 = clock()
        request.outputs()
        t4 = clock()
        chip = fence.exec_ns / 1e9
        for name, value in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, chip, t3 - t2 - chip, t4 - t3)):
            self.samples[name].append(value)

    def clear(self) -> None:
        for values in self.samples.values():
            values.clear()


def shuffled_rounds(steps: dict[str, Callable[[], Any]], seconds: float,
                    min_rounds: int = 50, cpu: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Each step once a round, round after round for ``seconds``, in a new random order every
    round (a step's neighbours matter: in a fixed order the same inference measured 15-25 us
    apart at load 18 depending on the step before it); seconds per call. ``cpu`` gets each
    step's CPU seconds per call in this thread (``time.thread_time``: a spin counts, a sleep
    does not)."""
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(27)
    spent = dict.fromkeys(names, 0.0)
    clock, deadline, rounds = time.perf_counter, time.perf_counter() + seconds, 0
    while rounds < min_rounds or clock() < deadline:
        order.shuffle(names)
        for name in names:
            started, used = clock(), time.thread_time()
            steps[name]()
            samples[name].append(clock() - started)
            spent[name] += time.thread_time() - used
        rounds += 1
    if cpu is not None:
        cpu.update({name: total / rounds for name, total in spent.items()})
    return samples


def _set_sleep_ahead(on: bool) -> None:
    """``user_queue.set_sleep_ahead``, absent from a checkout before it (copied there for an A/B run)."""
    setter = getattr(user_queue, "set_sleep_ahead", None)
    if setter is not None:
        setter(on)


def _in_mode(mode: str, run: Callable[[], Any]) -> Callable[[], Any]:
    def step() -> Any:
        user_queue.set_wait_mode("adaptive" if mode == "unhinted" else mode)
        _set_sleep_ahead(mode != "unhinted")
        return run()
    return step


def cpu_per_inference(dev: ScratchDevice, run: Callable[[], Any], count: int) -> dict[str, float]:
    """CPU microseconds per call of ``run`` of every process of the stack: this thread, the
    chip's cores, the driver's daemon and the chip's main process."""
    pids = {"cores": dev.chip_cores(), "daemon": [dev.daemon_pid], "chip_main": [p for p in [dev.chip_main()] if p]}

    def used() -> dict[str, float]:
        return {k: sum(process_usage(p).cpu_s for p in v) for k, v in pids.items()}
    before, own = used(), time.thread_time()
    for _ in range(count):
        run()
    own = time.thread_time() - own
    after = used()
    return {"client": round(own / count * 1e6, 1),
            **{k: round((after[k] - before[k]) / count * 1e6, 1) for k in pids}}


def _compiled(name: str, workdir: Path) -> tuple[Path, Path, dict[str, np.ndarray] | None, list[str]]:
    """(model file, loadable, the package's evaluation feed or None, input order) of a work-half
    corpus model compiled as ``corpus_bench`` compiles it, or of a model-zoo name (the
    default compile, random inputs: e.g. ResNet-8, whose job is long enough for the sleep ahead)."""
    if name not in BY_NAME:
        path = resolve(name)
        return path, path, None, []
    corpus_model = BY_NAME[name]
    if corpus_model.half != "work":
        raise SystemExit(f"{name} is in the held-out half: measured by the lead only")
    path = fetch(corpus_model)
    feeds = prepare(corpus_model, path)
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    nlb, reason, _ = compile_cli(path, feeds, is_int8(path), None, folder, 600)
    if nlb is None:
        raise RuntimeError(f"compile: {reason}")
    return path, nlb, feeds.evaluation[0], [i.name for i in model_inputs(path)]


def _litert_in_order(path: Path, inputs: list[np.ndarray]) -> Callable[[], Any]:
    """LiteRT XNNPACK on ``inputs`` in the file's input order, as ``npu bench model`` calls it."""
    it = LiteRT(path, "default", threads=1)
    feeds = [np.asarray(x, d["dtype"]) for x, d in zip(inputs, it.input_details)]
    return lambda: it.run(feeds)


def measure(name: str, dev: ScratchDevice, workdir: Path, seconds: float, modes: list[str]) -> dict[str, Any]:
    """One model's figures (see the module's docstring)."""
    try:
        path, nlb, inputs_feed, order = _compiled(name, workdir)
    except RuntimeError as exc:
        return {"model": name, "reason": str(exc)}
    load_before = os.getloadavg()[0]
    model = libnpu.load(nlb, devroot=dev.devroot, cache_dir=workdir / "cache")
    loadable = model.loadable
    try:
        request = model.create_request()
        if inputs_feed is None:
            inputs = random_inputs(model.inputs, seed=1)
            inputs_feed = {d.name: x for d, x in zip(model.inputs, inputs)}
        else:
            inputs = _device_inputs(model, inputs_feed, order)
        try:
            staged = StagedInference(request, inputs)
            nop, _, _ = bench.nop_job(model.device, "queue")
            steps: dict[str, Callable[[], Any]] = {
                f"npu_{mode}": _in_mode(mode, lambda: request.infer(inputs)) for mode in modes}
            if path.suffix == ".tflite":
                steps["xnnpack"] = (_reference_step(path, inputs_feed) if name in BY_NAME
                                    else _litert_in_order(path, inputs))
            steps["nop"] = _in_mode(modes[0], nop)
            steps["staged"] = _in_mode(modes[0], staged)
            for step in steps.values():           # warm up
                for _ in range(20):
                    step()
            staged.clear()
            thread_cpu: dict[str, float] = {}
            samples = shuffled_rounds(steps, seconds, cpu=thread_cpu)
            cpu = cpu_per_inference(dev, _in_mode(modes[0], lambda: request.infer(inputs)),
                                    max(200, len(samples["nop"]) // 2))
        finally:
            user_queue.set_wait_mode("adaptive")
            _set_sleep_ahead(True)
            request.release()
    finally:
        model.close()
    replay = chip_replay.replay_loadable(loadable, jobs=200, rounds=5)
    p50 = {label: _p50_us(values) for label, values in samples.items()}
    stages = {label: _p50_us(values) for label, values in staged.samples.items()}
    npu = p50[f"npu_{modes[0]}"]
    parts = stages["inputs"] + stages["submit"] + stages["wait"] + stages["outputs"]
    result: dict[str, Any] = {
        "model": name, "modes": modes, "rounds": len(samples["nop"]), "p50_us": p50,
        "stages_p50_us": {**stages, "python": round(max(0.0, npu - parts), 1)},
        "replay": replay, "core_overhead_us": round(max(0.0, stages["chip"] - replay["cpu_us"]), 1),
        "cpu_us": cpu, "client_cpu_us": {k: round(v * 1e6, 1) for k, v in thread_cpu.items()},
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    if "xnnpack" in p50:
        result["npu_over_xnnpack"] = {mode: round(p50[f"npu_{mode}"] / p50["xnnpack"], 2) for mode in modes}
    return result


def describe(r: dict[str, Any]) -> str:
    """One model in a few lines."""
    if "reason" in r:
        return f"{r['model']}: not measured ({r['reason']})"
    p50, st = r["p50_us"], r["stages_p50_us"]
    npu = "  ".join(f"{k[4:]} {v}" for k, v in p50.items() if k.startswith("npu_"))
    head = (f"{r['model']}: npu p50 us [{npu}]  xnnpack {p50.get('xnnpack', '-')}  nop {p50['nop']}"
            + (f"  npu/xnnpack {r['npu_over_xnnpack']}" if "npu_over_xnnpack" in r else "")
            + f"  (load {r['load'][0]} -> {r['load'][1]}, {r['rounds']} rounds)")
    stages = "  ".join(f"{k} {v}" for k, v in st.items())
    replay = r["replay"]
    chip = (f"chip replay {replay['cpu_us']} us CPU/job ({replay['plan']}, {replay['tasks']} tasks, "
            f"{replay['python_steps']} Python steps); core's own steps {r['core_overhead_us']} us")
    cpu = "  ".join(f"{k} {v}" for k, v in r["cpu_us"].items())
    client = "  ".join(f"{k} {v}" for k, v in r["client_cpu_us"].items())
    return (f"{head}\n   stages p50 us: {stages}\n   {chip}\n   CPU us per inference ({r['modes'][0]}): {cpu}\n"
            f"   the client thread's CPU us per call, per step: {client}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(TINY_MODELS))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                    help="wait modes timed side by side (the first one for the breakdown)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    unknown = [m for m in args.models if m not in BY_NAME and m not in model_zoo.model_names()]
    if unknown:
        ap.error(f"neither corpus models nor model-zoo names: {', '.join(unknown)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="fixed-cost-") as tmp, ScratchDevice(cores=2) as dev:
        for name in args.models:
            results.append(measure(name, dev, Path(tmp), args.seconds, args.modes))
            if not args.json:
                print(describe(results[-1]), flush=True)
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
