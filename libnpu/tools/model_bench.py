"""``npu bench model``: a model's latency and throughput on the device, in the style of
OpenVINO's benchmark_app, next to LiteRT's time for the same model in the same run.

- latency: one request, synchronous inferences back to back; p50/p99 of the wall time
  per inference (set inputs, submit, wait, read outputs) and the device time of each job;
  ``latency_stages`` splits it (inputs, job, chip, transport, outputs: see
  ``_StagedInference``) and ``cpu_per_inference_us`` gives this process's CPU time per
  call of each contender (less noisy than wall time on a shared machine);
- throughput: N requests in flight (default: the model's ``optimal_requests``), each
  restarted as soon as it completes; inferences per second over the run;
- LiteRT (when ``ai-edge-litert`` is installed and the model is a .tflite file): the
  same inputs with BUILTIN_REF reference kernels (what our chip is bit-exact with) and
  with the default kernels (XNNPACK), one thread each, timed interleaved with the
  device's latency loop (one call of each per round) so all see the same machine load;
- chip: the cores' wall-clock busy time over the latency loop (GET_STATS), per job, per
  task and per MAC: what the chip itself costs, without the transport;
  LiteRT's throughput is taken as 1 / its p50 latency (one thread, one request).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import libnpu
from libnpu.profiling import InferenceProfile
from libnpu.tools.models import LiteRT, ModelSpecError, litert_available, resolve
from libnpu.tools.run import MakeInputs, load_timed, random_inputs

__all__ = ["bench_model", "format_report", "percentiles_ms"]


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99/mean/min/max of samples in seconds, as milliseconds."""
    a = np.asarray(samples) * 1e3
    return {"p50_ms": round(float(np.percentile(a, 50)), 4), "p90_ms": round(float(np.percentile(a, 90)), 4),
            "p99_ms": round(float(np.percentile(a, 99)), 4), "mean_ms": round(float(a.mean()), 4),
            "min_ms": round(float(a.min()), 4), "max_ms": round(float(a.max()), 4), "count": len(samples)}


def time_side_by_side(npu: _StagedInference, reference: Callable[[], Any], seconds: float) -> dict[str, list[float]]:
    """``npu`` and ``reference`` warmed up (3 calls each, ``npu``'s stages cleared after),
    then timed in turn (:func:`_interleaved`): seconds per call under ``"npu"`` and ``"reference"``."""
    steps: dict[str, Callable[[], Any]] = {"npu": npu, "reference": reference}
    for step in steps.values():
        for _ in range(3):
            step()
    npu.clear()
    return _interleaved(steps, seconds)


def _interleaved(steps: dict[str, Callable[[], Any]], seconds: float, min_count: int = 20,
                 cpu: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Time each step in turn, round after round, so every contender sees the same
    background load (the machine is shared); returns seconds per call for each, and adds
    each step's CPU seconds per call (this process's, all threads) to ``cpu``."""
    samples: dict[str, list[float]] = {name: [] for name in steps}
    spent = dict.fromkeys(steps, 0.0)
    deadline = time.perf_counter() + seconds
    rounds = 0
    while rounds < min_count or time.perf_counter() < deadline:
        for name, step in steps.items():
            cpu_started, started = time.process_time(), time.perf_counter()
            step()
            samples[name].append(time.perf_counter() - started)
            spent[name] += time.process_time() - cpu_started
        rounds += 1
    if cpu is not None:
        cpu.update({name: total / rounds for name, total in spent.items()})
    return samples


STAGES = ("inputs", "job", "chip", "transport", "outputs")


class _StagedInference:
    """One synchronous inference (``InferRequest.infer``) with its wall time split at the
    stage boundaries: ``inputs`` (``set_inputs``: checks, quantization, the copy into the
    request's device memory), ``job`` (``run_sync``: submit, the chip, the wake-up),
    ``chip`` (the core's own wall time on the job, reported by user-queue jobs),
    ``transport`` (``job`` minus ``chip``: the core picking the job up and the client
    seeing its completion) and ``outputs`` (reading them back)."""

    def __init__(self, request: libnpu.InferRequest, inputs: list[np.ndarray]):
        self.request, self.inputs = request, inputs
        self.samples: dict[str, list[float]] = {name: [] for name in STAGES}
        self.device_ns: list[int] = []

    def __call__(self) -> None:
        request, clock = self.request, time.perf_counter
        t0 = clock()
        request.set_inputs(self.inputs)
        t1 = clock()
        request.run_sync(t1)
        t2 = clock()
        request.outputs()
        t3 = clock()
        chip = request.timing.chip_ns / 1e9
        for name, value in zip(STAGES, (t1 - t0, t2 - t1, chip, t2 - t1 - chip if chip else 0.0, t3 - t2)):
            self.samples[name].append(value)
        self.device_ns.append(request.timing.device_time_ns)

    def clear(self) -> None:
        for values in self.samples.values():
            values.clear()
        self.device_ns.clear()

    def report(self) -> dict[str, dict[str, float]]:
        """p50 and mean of each stage in microseconds (the means add up to the mean latency)."""
        return {name: {"p50_us": round(float(np.median(v)) * 1e6, 1), "mean_us": round(float(np.mean(v)) * 1e6, 1)}
                for name, v in self.samples.items()}


def _throughput(model: libnpu.CompiledModel, inputs: list[np.ndarray], requests: int,
                seconds: float, iterations: int | None = None) -> dict[str, Any]:
    """``requests`` in flight, each restarted as it completes, for ``seconds`` or, given
    ``iterations``, until that many inferences were started."""
    pool = [model.create_request() for _ in range(requests)]
    done = 0
    latencies: list[float] = []
    try:
        for r in pool:
            r.set_inputs(inputs)
        started = time.perf_counter()
        for r in pool:
            r.start()
        deadline = started + seconds
        i = 0
        begun = requests

        def more() -> bool:
            return begun < iterations if iterations is not None else time.perf_counter() < deadline
        while more():
            r = pool[i]
            r.wait()
            latencies.append(r.timing.latency_s)
            done += 1
            r.outputs()
            r.start()
            begun += 1
            i = (i + 1) % requests
        for r in pool[i:] + pool[:i]:
            r.wait()
            latencies.append(r.timing.latency_s)
            done += 1
        elapsed = time.perf_counter() - started
    finally:
        for r in pool:
            r.release()
    return {"requests": requests, "inferences": done, "seconds": round(elapsed, 3),
            "fps": round(done / elapsed, 2), "latency_in_flight": percentiles_ms(latencies)}


def _chip_busy(before: dict, after: dict, tasks: int, macs: int) -> dict[str, Any]:
    """The chip's wall-clock busy time over the latency loop (GET_STATS of the model's
    context: the cores' own clock from job start to completion, no transport), per job,
    per task and per MAC."""
    jobs = after["jobs_completed"] - before["jobs_completed"]
    busy_ns = after["busy_time_ns"] - before["busy_time_ns"]
    per_job = busy_ns / jobs if jobs else 0.0
    return {"jobs": jobs, "tasks_per_job": tasks, "busy_per_job_us": round(per_job / 1e3, 2),
            "busy_per_task_us": round(per_job / max(tasks, 1) / 1e3, 3),
            "busy_per_mac_ps": round(per_job / max(macs, 1) * 1e3, 3)}


def _profiled(model: libnpu.CompiledModel, inputs: list[np.ndarray]) -> InferenceProfile:
    """One inference under PERF_COUNT: its per-layer profile (``-pc``)."""
    model.set_property({"PERF_COUNT": True})
    request = model.create_request()
    try:
        request.infer(inputs)
        assert request.profile is not None, "PERF_COUNT records a profile"
        return request.profile
    finally:
        request.release()
        model.set_property({"PERF_COUNT": False})


def bench_model(spec: str | os.PathLike, *, requests: int | None = None, seconds: float = 3.0,
                devroot: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                litert: bool = True, delegate: bool = False, job_path: str = "queue",
                reference_loop: str = "shared", iterations: int | None = None,
                inputs: MakeInputs | None = None, hint: str | None = None, perf_counts: bool = False,
                progress: Callable[[str], None] | None = None, input_shapes: Any = None) -> dict[str, Any]:
    """Measure ``spec`` (a model file or model-zoo name); returns the report as a dict.

    As OpenVINO's benchmark_app: ``iterations`` (``-niter``) runs that many latency rounds
    and throughput inferences instead of ``seconds`` each; ``inputs`` makes the input
    arrays from the model's descriptions (default: random); ``hint`` (``latency`` or
    ``throughput``) sets PERFORMANCE_HINT, whose OPTIMAL_NUMBER_OF_INFER_REQUESTS is then
    the default ``requests``; ``perf_counts`` (``-pc``) adds one profiled inference's
    per-layer table (``profile``). ``progress(line)`` hears each phase as it starts.

    ``job_path``: ``queue`` (jobs through a user-mode submission queue when the device offers
    one) or ``ioctl`` (SUBMIT requests); the report's ``path`` says which ran.

    ``delegate``: also time LiteRT with our external delegate (label ``delegate``), whose
    partitions run on the same device.

    ``input_shapes``: for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`);
    LiteRT is resized to the same shapes.

    ``reference_loop``: ``shared`` times BUILTIN_REF in the device's latency loop with the
    others; ``separate`` times it after, in a loop of its own with the device (the device's
    latency and every other ratio then come from a loop without it). A BUILTIN_REF call
    is 2-9 ms of CPU between two inferences, after which the device's path runs cold and
    the client, having used its share, waits for its CPU back at the hand-over to the core
    (docs/hardware.md, *Where a synchronous inference's time goes*):
    measured 2026-11-24 (2-vCPU VM), the device's p50 went from 0.25-0.32 to 0.58-1.34 ms on
    ResNet-8 with it in the loop, XNNPACK's from 0.094-0.102 to 0.12-0.20 ms. The report's
    ``reference_loop`` says which ran; a ratio always divides p50s from one loop."""
    if reference_loop not in ("shared", "separate"):
        raise ModelSpecError(f"reference loop must be shared or separate, not {reference_loop!r}")
    if seconds <= 0:
        raise ModelSpecError("--seconds must be positive")
    if requests is not None and requests < 1:
        raise ModelSpecError("--requests must be at least 1")
    if iterations is not None and iterations < 1:
        raise ModelSpecError("--iterations must be at least 1")
    if hint is not None and hint not in ("latency", "throughput"):
        raise ModelSpecError(f"hint must be latency or throughput, not {hint!r}")
    say = progress or (lambda line: None)
    path = resolve(spec)
    say(f"loading {path.name}")
    shaped = {"input_shapes": input_shapes} if input_shapes else {}     # unset: the default's cache key
    model, load, inputs = load_timed(path, inputs or (lambda descs: random_inputs(descs, seed=1)),
                                     devroot=devroot, cache_dir=cache_dir, **shaped)
    report: dict[str, Any] = {}
    model.device.use_queues = job_path == "queue"
    try:
        if hint is not None:
            model.set_property({"PERFORMANCE_HINT": hint.upper()})
        n = requests or (model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") if hint else model.optimal_requests)
        info = model.device.info()
        report.update({
            "model": str(path), "device": str(model.device.path), "cores": info["num_cores"],
            "inputs": [{"name": d.name, "shape": list(d.shape), "dtype": d.dtype} for d in model.inputs],
            "macs": int(sum(t.macs for t in model.loadable.tasks)),
            "load": load.as_dict(), "optimal_requests": model.optimal_requests})
        request = model.create_request()
        npu_step = _StagedInference(request, inputs)
        steps: dict[str, Callable[[], Any]] = {"npu": npu_step}
        if litert and path.suffix == ".tflite" and litert_available():
            kinds = [("reference", "builtin_ref"), ("default", "xnnpack")] + ([("delegate", "delegate")] if delegate
                                                                               else [])
            delegate_options = {"devroot": str(devroot)} if devroot else {}
            if cache_dir:
                delegate_options["cache_dir"] = str(cache_dir)
            for kernels, label in kinds:
                it = LiteRT(path, kernels, threads=1, delegate_options=delegate_options)
                feeds = [np.asarray(x, d["dtype"]) for x, d in zip(inputs, it.input_details)]
                steps[label] = (lambda it=it, feeds=feeds: it.run(feeds))
        elif litert:
            report["litert_skipped"] = ("ai-edge-litert is not installed" if not litert_available()
                                        else f"LiteRT runs .tflite files only (model is {path.suffix})")
        try:
            for step in steps.values():                # warm up
                for _ in range(3):
                    step()
            later = {"builtin_ref": steps.pop("builtin_ref")} if reference_loop == "separate" and \
                "builtin_ref" in steps else {}
            npu_step.clear()
            before = model.device.stats()
            cpu: dict[str, float] = {}
            say(f"latency: {iterations} rounds" if iterations else f"latency: {seconds:g} s")
            samples = (_interleaved(steps, 0.0, min_count=iterations, cpu=cpu) if iterations
                       else _interleaved(steps, seconds, cpu=cpu))
            after = model.device.stats()
            npu_cpu = cpu["npu"]
            npu_p50 = {label: float(np.percentile(samples["npu"], 50)) for label in samples if label != "npu"}
            if later:
                separate = (_interleaved({"npu": lambda: request.infer(inputs), **later}, 0.0, min_count=iterations,
                                         cpu=cpu) if iterations else
                            _interleaved({"npu": lambda: request.infer(inputs), **later}, seconds, cpu=cpu))
                samples["builtin_ref"] = separate["builtin_ref"]
                npu_p50["builtin_ref"] = float(np.percentile(separate["npu"], 50))
        finally:
            request.release()
        report["path"] = "queue" if job_path == "queue" and model.device.queues else "ioctl"
        report["reference_loop"] = reference_loop
        report["latency"] = {**percentiles_ms(samples.pop("npu")),
                             "device_time_p50_ms": round(float(np.median(npu_step.device_ns)) / 1e6, 4)}
        report["latency_stages"] = npu_step.report()
        report["cpu_per_inference_us"] = {name: round(value * 1e6, 1) for name, value in cpu.items()}
        if later:
            report["cpu_per_inference_us"]["npu"] = round(npu_cpu * 1e6, 1)
        report["chip"] = _chip_busy(before, after, len(model.loadable.tasks), report["macs"])
        report["litert"] = {label: percentiles_ms(v) for label, v in samples.items()}
        say(f"throughput: {n} requests, " + (f"{iterations} inferences" if iterations else f"{seconds:g} s"))
        report["throughput"] = _throughput(model, inputs, n, seconds, iterations)
        if hint is not None:
            report["hint"] = hint
        if perf_counts:
            profile = _profiled(model, inputs)
            report["profile"], report["profile_table"] = profile.as_dict(), profile.table()
    finally:
        model.close()
    if report["litert"]:
        report["ratios"] = {f"npu_p50_over_litert_{k}_p50": round(npu_p50[k] * 1e3 / v["p50_ms"], 3)
                            for k, v in report["litert"].items()}
        fps = report["throughput"]["fps"]
        report["ratios"].update({f"npu_fps_over_litert_{k}_fps": round(fps * v["p50_ms"] / 1e3, 3)
                                 for k, v in report["litert"].items()})
    return report


def format_report(r: dict[str, Any]) -> str:
    """The report as benchmark_app-style text."""
    lat, thr = r["latency"], r["throughput"]
    compiled = {True: "cache hit", False: "cache miss", None: "none (loadable)"}[r["load"]["cache_hit"]]
    lines = [f"model {r['model']} on {r['device']} ({r['cores']} cores), {r['macs']:,} MACs per inference",
             f"load: compile {compiled} {r['load']['compile_s'] * 1e3:.1f} ms, "
             f"load {r['load']['load_s'] * 1e3:.1f} ms, "
             f"first inference {r['load']['first_inference_s'] * 1e3:.1f} ms",
             f"latency (1 request, {lat['count']} inferences, measured wall time): p50 {lat['p50_ms']:.3f} ms, "
             f"p90 {lat['p90_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms, min {lat['min_ms']:.3f} ms, "
             f"max {lat.get('max_ms', float('nan')):.3f} ms",
             f"modeled device time p50 {lat['device_time_p50_ms']:.3f} ms (the timing model: what the chip "
             f"would take at its clock)",
             "stages p50 (mean) us: " + ", ".join(f"{name} {v['p50_us']:.1f} ({v['mean_us']:.1f})"
                                                  for name, v in r["latency_stages"].items()),
             "CPU per inference in this process: " + ", ".join(f"{name} {v:.1f} us"
                                                              for name, v in r["cpu_per_inference_us"].items()),
             f"measured chip busy per job {r['chip']['busy_per_job_us']:.1f} us (the emulator's wall time) "
             f"({r['chip']['tasks_per_job']} tasks: {r['chip']['busy_per_task_us']:.2f} us per task, "
             f"{r['chip']['busy_per_mac_ps']:.2f} ps per MAC)",
             f"throughput ({thr['requests']} requests in flight, {thr['inferences']} inferences "
             f"in {thr['seconds']} s): "
             f"{thr['fps']:.1f} inferences/s, latency p50 {thr['latency_in_flight']['p50_ms']:.3f} ms"]
    for label, v in r.get("litert", {}).items():
        loop = "in a loop of its own with the device's" if label == "builtin_ref" and \
            r.get("reference_loop") == "separate" else "interleaved with the device's"
        lines.append(f"LiteRT {label} (1 thread, {v['count']} runs, {loop}): "
                     f"p50 {v['p50_ms']:.3f} ms, p99 {v['p99_ms']:.3f} ms")
    for k, v in r.get("ratios", {}).items():
        lines.append(f"  {k.replace('_', ' ')}: {v}")
    if "litert_skipped" in r:
        lines.append(f"LiteRT: skipped ({r['litert_skipped']})")
    if "profile" in r:
        lines.append("per-layer counters (one inference, PERF_COUNT):")
        lines.append(r["profile_table"])
    return "\n".join(lines)
