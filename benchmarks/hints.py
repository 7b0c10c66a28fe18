"""Acceptance script: performance hints, through the property API only.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.hints [--model resnet8] [--profile edge] [--seconds 6] [--sweep] [--json]

On a device of its own (``npu-kmd start --profile edge``, once with ``--pacing`` and once
without) the script discovers the device (AVAILABLE_DEVICES, FULL_DEVICE_NAME,
NPU_MAX_TILES), then for each PERFORMANCE_HINT (LATENCY, THROUGHPUT) loads the model,
reads OPTIMAL_NUMBER_OF_INFER_REQUESTS and keeps that many requests in flight through a
request pool for ``--seconds`` (the two hints take three turns each, so a change in the
machine's load weighs on both alike), recording inferences/s and the latency of each
inference (start to fence signalled).  ``--sweep`` also runs 1..2x the optimal number of requests
under THROUGHPUT, to show where the knee is.

It passes (exit status 0) when, with pacing on (the modeled chip's timing: on 2 vCPUs the
emulator's own speed may hide the difference), THROUGHPUT gives more inferences/s than
LATENCY and LATENCY the lower p50 latency.  The figures without pacing are reported next
to them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

import libnpu

from .scratch_device import ScratchDevice


@dataclass
class Measurement:
    hint: str
    requests: int
    inferences: int
    seconds: float
    p50_ms: float
    p90_ms: float
    device_time_ms: float

    @property
    def per_second(self) -> float:
        return self.inferences / self.seconds

    def line(self) -> str:
        return (f"{self.hint:<11} {self.requests:>2} requests: {self.per_second:8.1f} inferences/s, "
                f"latency p50 {self.p50_ms:7.3f} ms, p90 {self.p90_ms:7.3f} ms "
                f"(device time {self.device_time_ms:.3f} ms)")


def run_pool(model: libnpu.CompiledModel, hint: str, requests: int, seconds: float) -> Measurement:
    """Keep ``requests`` inferences in flight for ``seconds`` (after a short warm-up)."""
    return _summary(hint, requests, [_pool_round(model, requests, seconds)])


def _summary(hint: str, requests: int, rounds: list[tuple[list[float], list[int], float]]) -> Measurement:
    latencies = [x for r in rounds for x in r[0]]
    device_ns = [x for r in rounds for x in r[1]]
    elapsed = sum(r[2] for r in rounds)
    ms = np.array(latencies) * 1e3
    return Measurement(hint, requests, len(latencies), elapsed, float(np.percentile(ms, 50)),
                       float(np.percentile(ms, 90)), float(np.mean(device_ns)) / 1e6)


def _pool_round(model: libnpu.CompiledModel, requests: int, seconds: float) -> tuple[list[float], list[int], float]:
    latencies: list[float] = []
    device_ns: list[int] = []
    lock = threading.Lock()
    recording = threading.Event()

    def finished(task) -> None:
        if recording.is_set() and task.error is None:
            with lock:
                latencies.append(task.timing.latency_s)
                device_ns.append(task.timing.device_time_ns)

    x = np.random.default_rng(0).integers(-128, 128, model.inputs[0].shape).astype(model.inputs[0].dtype)
    with model.create_pool(requests, on_finish=finished) as pool:
        warm_until = time.perf_counter() + min(0.5, seconds / 4)
        while time.perf_counter() < warm_until:
            pool.get_task().run(x)
        pool.wait_all()
        recording.set()
        started = time.perf_counter()
        stop = started + seconds
        while time.perf_counter() < stop:
            pool.get_task().run(x)
        pool.wait_all()
        elapsed = time.perf_counter() - started
    return latencies, device_ns, elapsed


def measure(devroot: str | os.PathLike, model_path: str, seconds: float, sweep: bool, log, rounds: int = 3) -> dict:
    """Discover the device and measure each hint, using only properties to choose.  The
    hints take turns (``rounds`` times, ``seconds`` in all each), so a change in the
    machine's load meanwhile weighs on both alike."""
    with libnpu.initialize(devroot) as session:
        first = session.open(0)
        devices = first.get_property("AVAILABLE_DEVICES")
        device = session.open(int(devices[0]))
        facts = {key: device.get_property(key) for key in ("FULL_DEVICE_NAME", "NPU_MAX_TILES", "DEVICE_GOPS",
                                                          "DEVICE_ARCHITECTURE")}
        log(f"  device {devices[0]} of {devices}: {facts['FULL_DEVICE_NAME']}")
        models, optimal = {}, {}
        for hint in ("LATENCY", "THROUGHPUT"):
            device.set_property({"PERFORMANCE_HINT": hint})
            models[hint] = libnpu.load(model_path, device)
            optimal[hint] = models[hint].get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
        taken: dict[str, list] = {hint: [] for hint in models}
        try:
            for _ in range(rounds):
                for hint, model in models.items():
                    taken[hint].append(_pool_round(model, optimal[hint], seconds / rounds))
        finally:
            for model in models.values():
                model.close()
        results = {hint: _summary(hint, optimal[hint], taken[hint]) for hint in models}
        for hint in models:
            log("  " + results[hint].line())
        swept = []
        if sweep:
            device.set_property({"PERFORMANCE_HINT": "THROUGHPUT"})
            with libnpu.load(model_path, device) as model:
                for n in range(1, 2 * results["THROUGHPUT"].requests + 1):
                    swept.append(run_pool(model, "sweep", n, seconds))
                    log("  " + swept[-1].line())
    return {"device": facts, "hints": results, "sweep": swept}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.hints", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet8", help="a model file or model-zoo name (default resnet8)")
    ap.add_argument("--profile", default="edge", help="the device's hardware profile (default edge)")
    ap.add_argument("--seconds", type=float, default=6.0, help="per hint, in 3 turns each (default 6)")
    ap.add_argument("--sweep", action="store_true", help="also 1..2x the optimal number of requests")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("hints: mounting the device needs root", file=sys.stderr)
        return 2
    from libnpu.tools.models import resolve
    model_path = str(resolve(args.model))
    log = (lambda *_: None) if args.json else (lambda text: print(text, flush=True))
    report = {}
    for paced in (True, False):
        extra = ("--profile", args.profile, *(("--pacing",) if paced else ()))
        log(f"{'paced' if paced else 'unpaced'} ({' '.join(extra)}):")
        with ScratchDevice(extra=extra) as device:
            report["paced" if paced else "unpaced"] = measure(device.devroot, model_path, args.seconds,
                                                              args.sweep and paced, log)
    paced = report["paced"]["hints"]
    checks = {
        "throughput_more_inferences_per_s": paced["THROUGHPUT"].per_second > paced["LATENCY"].per_second,
        "latency_lower_p50": paced["LATENCY"].p50_ms < paced["THROUGHPUT"].p50_ms,
    }
    ok = all(checks.values())
    if args.json:
        def plain(m: Measurement) -> dict:
            return {**asdict(m), "inferences_per_s": round(m.per_second, 1)}
        print(json.dumps({mode: {"device": r["device"], "hints": {h: plain(m) for h, m in r["hints"].items()},
                                 "sweep": [plain(m) for m in r["sweep"]]} for mode, r in report.items()}
                         | {"checks": checks, "ok": ok}, indent=2))
    else:
        speedup = paced["THROUGHPUT"].per_second / paced["LATENCY"].per_second
        print(f"paced: THROUGHPUT {speedup:.2f}x LATENCY's inferences/s; LATENCY p50 "
              f"{paced['LATENCY'].p50_ms:.3f} ms vs THROUGHPUT's {paced['THROUGHPUT'].p50_ms:.3f} ms")
        print("OK" if ok else f"FAILED: {[name for name, good in checks.items() if not good]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
