"""What each ``npu`` command does, given the arguments :mod:`libnpu.tools.cli` parsed.

A handler takes the parsed arguments and returns the exit code; the expected failures
it raises are one of :data:`USAGE_ERRORS` (exit 2) or :data:`FAILURES` (exit 1), which
the CLI turns into one line on stderr.  Anything else is a bug and keeps its traceback.
The heavy modules (compiler, LiteRT, benchmarks) are imported by the handler that needs them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from libnpu.compiler.ir import IRError
from libnpu.loadable import LoadableError
from libnpu.portability import NpuError, Session, default_devroot

from . import model_zoo
from .errors import start_command
from .models import ModelSpecError

__all__ = ["USAGE_ERRORS", "FAILURES", "UsageError", "Failure"]


class UsageError(ValueError):
    """An argument value the command cannot use (exit 2)."""


class Failure(RuntimeError):
    """The command ran and failed for a reason the message states (exit 1)."""


USAGE_ERRORS = (UsageError, ModelSpecError)
FAILURES = (Failure, IRError, LoadableError, NpuError, model_zoo.ModelZooError, OSError)


def _devroot(args: argparse.Namespace) -> Path:
    return Path(args.devroot) if args.devroot else default_devroot()


def _require(ok: bool, message: str) -> None:
    """Refuse an option value the command cannot use (exit 2) before touching the device."""
    if not ok:
        raise UsageError(message)


def _progress_wanted(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and not getattr(args, "no_progress", False) and sys.stderr.isatty()


# devices ---------------------------------------------------------------------------------

def _nodes(devroot: Path) -> list[Path]:
    return sorted((p for p in devroot.glob("npu[0-9]*") if p.name[3:].isdigit()), key=lambda p: int(p.name[3:]))


def info(args: argparse.Namespace) -> int:
    devroot = _devroot(args)
    devices = []
    with Session(devroot) as session:
        for node in _nodes(devroot):
            try:
                facts = session.open(int(node.name[3:])).info()
            except OSError as exc:
                print(f"{node}: {exc}", file=sys.stderr)
                continue
            devices.append({
                "device": node.name, "node": str(node), "model": facts["model"],
                "abi_version": f"{facts['abi_version'] >> 16}.{facts['abi_version'] & 0xFFFF}",
                "cores": facts["num_cores"], "clock_mhz": facts["clock_mhz"],
                "memory_total_bytes": facts["memory_total"], "memory_used_bytes": facts["memory_used"],
                "contexts": facts["num_contexts"] - 1,          # not counting this query's own
                "jobs_completed": facts["jobs_completed"], "jobs_failed": facts["jobs_failed"],
                "busy_time_us": facts["busy_time_ns"] // 1000, "reset_count": facts["reset_count"],
            })
    if args.json:
        print(json.dumps({"devroot": str(devroot), "devices": devices}, indent=2))
    else:
        if not devices:
            print(f"npu info: error: no NPU devices under {devroot}; start one with: {start_command(devroot)}",
                  file=sys.stderr)
        for d in devices:
            print(f"{d['device']}: {d['model']} abi {d['abi_version']}, {d['cores']} cores @ {d['clock_mhz']} MHz, "
                  f"memory {d['memory_used_bytes'] >> 20}/{d['memory_total_bytes'] >> 20} MiB, "
                  f"{d['contexts']} contexts, {d['jobs_completed']} jobs done ({d['jobs_failed']} failed), "
                  f"busy {d['busy_time_us'] / 1e6:.3f} s, {d['reset_count']} resets")
    return 0 if devices else 1


def smi(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from .smi import smi as show
    if args.interval < 0:
        raise UsageError("--interval must be >= 0")
    return show(args, out, err)


def top(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from .smi import top as watch
    if args.delay <= 0:
        raise UsageError("--delay must be > 0")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError("--iterations must be >= 1")
    return watch(args, out, err)


def doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor as run_checks
    checks = run_checks(_devroot(args))
    for check in checks:
        print(check.line())
    failed = [c for c in checks if not c.ok]
    if failed:
        print(f"{len(failed)} of {len(checks)} checks failed", file=sys.stderr)
    return 1 if failed else 0


def demo(args: argparse.Namespace) -> int:
    from .demo import run
    return run(_devroot(args))


# models ----------------------------------------------------------------------------------

def _quantizer_options(args: argparse.Namespace) -> dict[str, Any]:
    """Only the options the user set, so default choices share libnpu.load's cache key."""
    options: dict[str, Any] = {}
    if args.random_calibration is not None:
        if args.random_calibration < 1:
            raise UsageError("--random-calibration needs at least 1 run")
        options["random_count"] = args.random_calibration
    if args.method != "minmax":
        options["method"] = args.method
    if args.int8_io:
        options["io_dtype"] = "int8"
    return options


def compile_(args: argparse.Namespace) -> int:
    from .compile import compile_model_file, export_int8_tflite, format_plan, input_shapes, plan_report
    from .models import load_calibration, resolve
    path = resolve(args.model)
    if path.suffix == ".nlb":
        raise UsageError(f"{path} is already a compiled loadable")
    out = Path(args.output)
    if out.suffix not in (".nlb", ".tflite"):
        raise UsageError(f"{out}: the output is a loadable (.nlb) or an int8 model (.tflite)")
    if args.calibration and args.random_calibration is not None:
        raise UsageError("give --calibration or --random-calibration, not both")
    options = _quantizer_options(args)
    dataset = load_calibration(args.calibration, input_shapes(path)) if args.calibration else None
    calibration = "file" if dataset is not None else "random"
    if out.suffix == ".tflite":
        result = export_int8_tflite(path, out, dataset, progress=_progress_wanted(args), **options)
        if args.json:
            print(json.dumps({"model": str(path), "output": str(out), "seconds": round(result.seconds, 3),
                              "stages_s": result.stages, "calibration": calibration}, indent=2))
        else:
            print(f"quantized {path.name} -> {out} in {result.seconds:.2f} s ({result.ops} ops)")
        return 0
    result = compile_model_file(path, dataset, cache_dir=args.cache_dir, progress=_progress_wanted(args), **options)
    result.loadable.save(out)
    plan = plan_report(result.loadable)
    if args.json:
        print(json.dumps({"model": str(path), "output": str(out), "cache_hit": result.cache_hit,
                          "seconds": round(result.seconds, 3), "stages_s": result.stages,
                          "calibration": calibration, "plan": plan}, indent=2))
        return 0
    how = "from the compile cache" if result.cache_hit else \
        "(" + ", ".join(f"{k} {v:.2f} s" for k, v in result.stages.items()) + ")"
    print(f"compiled {path.name} -> {out} in {result.seconds:.2f} s {how}")
    print(format_plan(plan))
    return 0


def inspect(args: argparse.Namespace) -> int:
    from .compile import describe_model
    from .models import resolve
    path = resolve(args.model)
    if path.suffix == ".nlb":
        from libnpu.loadable import Loadable
        print(Loadable.load(path).summary())
    else:
        print(describe_model(path, plan=args.plan))
    return 0


def fetch(args: argparse.Namespace) -> int:
    unknown = sorted(set(args.names) - set(model_zoo.ASSETS))
    if unknown:
        raise UsageError(f"no model-zoo file {unknown[0]!r} (known: {', '.join(model_zoo.ASSETS)})")
    for key in args.names or model_zoo.ASSETS:
        print(f"{key:10} {model_zoo.fetch(key)}")
    return 0


def run(args: argparse.Namespace) -> int:
    from .run import run as run_model
    _require(args.repeat >= 0, "--repeat must be >= 0")
    report = run_model(args.model, args.input or (), repeat=args.repeat, devroot=args.devroot,
                       cache_dir=args.cache_dir, fresh=args.fresh, save=args.save, progress=_progress_wanted(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"model {report['model']}")
    for i in report["inputs"]:
        print(f"  input  {i['name']} {i['shape']} {i['dtype']} <- {i['source']}")
    for o in report["outputs"]:
        extra = f", argmax {o['argmax']}" if "argmax" in o else ""
        print(f"  output {o['name']} {o['shape']} {o['dtype']} range [{o['min']:.4g}, {o['max']:.4g}]{extra}")
    for name, key in (("first load ", "first_load"), ("cached load", "cached_load")):
        t = report[key]
        what = {True: "compile cache hit", False: "compile (cache miss)", None: "read loadable"}[t["cache_hit"]]
        print(f"{name}: {what} {t['compile_s'] * 1e3:.1f} ms + load {t['load_s'] * 1e3:.1f} ms + "
              f"first inference {t['first_inference_s'] * 1e3:.1f} ms = {t['total_s'] * 1e3:.1f} ms")
    if report["first_load"]["cache_hit"]:
        print("  (the model was already in the compile cache; --fresh measures a first-ever compile)")
    for n, r in enumerate(report["inferences"], 1):
        print(f"inference {n}: latency {r['latency_ms']:.3f} ms, device time {r['device_time_ms']:.3f} ms")
    for p in report["saved"]:
        print(f"saved {p}")
    return 0


def faces(args: argparse.Namespace) -> int:
    from .faces import run_faces
    _require(0 <= args.threshold <= 1, "--threshold is a score between 0 and 1")
    return run_faces(args.images, out_dir=args.out, devroot=args.devroot, cache_dir=args.cache_dir,
                     threshold=args.threshold, as_json=args.json, reference=args.reference)


def classify(args: argparse.Namespace) -> int:
    from .classify import run_classify
    return run_classify(devroot=args.devroot, cache_dir=args.cache_dir, as_json=args.json)


# benchmarks ------------------------------------------------------------------------------

def bench_nop(args: argparse.Namespace) -> int:
    from . import bench
    _require(args.n >= 1, "-n must be at least 1")
    _require(args.processes >= 0, "--processes must be >= 0")
    _require(args.seconds > 0, "--seconds must be > 0")
    devroot = _devroot(args)
    result = bench.nop_latency(devroot, args.n)
    if args.processes:
        result.update(bench.nop_throughput(devroot, args.processes, args.seconds))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"NOP job, submit+wait in one round trip (libnpu run): p50 {result['nop_p50_us']} us, "
          f"p99 {result['nop_p99_us']} us")
    print(f"NOP job, submit then wait (two round trips):      p50 {result['nop_submit_wait_p50_us']} us, "
          f"p99 {result['nop_submit_wait_p99_us']} us")
    print(f"raw GET_INFO round trip on the node (no libnpu):   p50 {result['rtt_p50_us']} us")
    print(f"ratio nop/rtt: {result['ratio']} (two round trips: {result['ratio_submit_wait']})")
    print(f"NOP jobs/s one by one: {result['jobs_per_s_one_by_one']}, eight per SUBMIT_BATCH + one WAIT: "
          f"{result['jobs_per_s_batched_8']}")
    if args.processes:
        print(f"{result['processes']} processes for {result['seconds']} s: {result['jobs_per_s']} jobs/s, "
              f"completed {result['completed']}, errors {result['errors']}, "
              f"Jain fairness {result['jain_fairness']}")
    return 0


def bench_ops(args: argparse.Namespace) -> int:
    from .ops_bench import MOBILENET, QUICK, OutputMismatch, format_report
    from .ops_bench import bench_ops as measure
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    try:
        report = measure(QUICK if args.quick else MOBILENET, repeat=args.repeat, devroot=args.devroot,
                         litert=not args.no_litert, ort=not args.no_ort, ort_activations=args.ort_activations)
    except OutputMismatch as exc:
        raise Failure(str(exc)) from exc
    except OSError as exc:
        raise Failure(f"device error: {exc}") from exc
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def bench_model(args: argparse.Namespace) -> int:
    from .model_bench import bench_model as measure
    from .model_bench import format_report
    _require(args.requests is None or args.requests >= 1, "--requests must be at least 1")
    _require(args.seconds > 0, "--seconds must be > 0")
    report = measure(args.model, requests=args.requests, seconds=args.seconds, devroot=args.devroot,
                     cache_dir=args.cache_dir, litert=not args.no_litert)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
