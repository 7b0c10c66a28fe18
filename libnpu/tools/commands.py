"""The ``npu`` subcommands built here: ``compile``, ``run``, ``bench model``, ``faces``, ``classify``.

``add_commands`` registers them on the CLI's parsers.  Exit codes: 0 success, 1 the
device or a download failed, 2 bad input (unknown file, unsupported op, bad shapes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from libnpu.tools import model_zoo
from libnpu.compiler.ir import IRError
from libnpu.loadable import LoadableError
from libnpu.portability import NpuError

from .models import ModelSpecError

__all__ = ["add_commands"]

BAD_INPUT = 2


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn the expected failures into one line on stderr and an exit code."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (IRError, ModelSpecError, LoadableError) as exc:
            print(f"npu {args.command}: error: {exc}", file=sys.stderr)
            return BAD_INPUT
        except (NpuError, model_zoo.ModelZooError, OSError) as exc:
            print(f"npu {args.command}: {exc}", file=sys.stderr)
            return 1
    return run


def _progress_wanted(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and not getattr(args, "no_progress", False) and sys.stderr.isatty()


def _quantizer_options(args: argparse.Namespace) -> dict[str, Any]:
    """Only the options the user set, so default choices share libnpu.load's cache key."""
    options: dict[str, Any] = {}
    if args.random_calibration is not None:
        if args.random_calibration < 1:
            raise ModelSpecError("--random-calibration needs at least 1 run")
        options["random_count"] = args.random_calibration
    if args.method != "minmax":
        options["method"] = args.method
    if args.int8_io:
        options["io_dtype"] = "int8"
    return options


def cmd_compile(args: argparse.Namespace) -> int:
    from .compile import compile_model_file, format_plan, input_shapes, plan_report
    from .models import load_calibration, resolve
    path = resolve(args.model)
    if path.suffix == ".nlb":
        raise ModelSpecError(f"{path} is already a compiled loadable")
    if args.calibration and args.random_calibration is not None:
        raise ModelSpecError("give --calibration or --random-calibration, not both")
    dataset = load_calibration(args.calibration, input_shapes(path)) if args.calibration else None
    result = compile_model_file(path, dataset, cache_dir=args.cache_dir, progress=_progress_wanted(args),
                                **_quantizer_options(args))
    out = Path(args.output)
    result.loadable.save(out)
    plan = plan_report(result.loadable)
    if args.json:
        print(json.dumps({"model": str(path), "output": str(out), "cache_hit": result.cache_hit,
                          "seconds": round(result.seconds, 3), "stages_s": result.stages,
                          "calibration": "file" if dataset is not None else "random",
                          "plan": plan}, indent=2))
        return 0
    how = "from the compile cache" if result.cache_hit else \
        "(" + ", ".join(f"{k} {v:.2f} s" for k, v in result.stages.items()) + ")"
    print(f"compiled {path.name} -> {out} in {result.seconds:.2f} s {how}")
    print(format_plan(plan))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .run import run
    report = run(args.model, args.input or (), repeat=args.repeat, devroot=args.devroot, cache_dir=args.cache_dir,
                 fresh=args.fresh, save=args.save, progress=_progress_wanted(args))
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


def cmd_bench_model(args: argparse.Namespace) -> int:
    from libnpu.tools.model_bench import bench_model, format_report
    report = bench_model(args.model, requests=args.requests, seconds=args.seconds, devroot=args.devroot,
                         cache_dir=args.cache_dir, litert=not args.no_litert)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def cmd_faces(args: argparse.Namespace) -> int:
    from .faces import run_faces
    return run_faces(args.images, out_dir=args.out, devroot=args.devroot, cache_dir=args.cache_dir,
                     threshold=args.threshold, as_json=args.json, reference=args.reference)


def cmd_classify(args: argparse.Namespace) -> int:
    from .classify import run_classify
    return run_classify(devroot=args.devroot, cache_dir=args.cache_dir, as_json=args.json)


def _common(p: argparse.ArgumentParser, device: bool = True) -> None:
    if device:
        p.add_argument("--devroot", help="where the device nodes are (default /dev)")
    p.add_argument("--cache-dir", help="compile cache directory (default $NPU_CACHE_DIR/compiled)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_commands(sub: argparse._SubParsersAction, bench_sub: argparse._SubParsersAction) -> None:
    """Register the subcommands on the ``npu`` parser (``sub``) and ``npu bench`` (``bench_sub``)."""
    model_help = "a .tflite, .onnx or .nlb file, or a model-zoo name (resnet8, blazeface, kws, vww, anomaly)"
    p = sub.add_parser("compile", help="compile a model into a loadable (.nlb), quantizing float models")
    p.add_argument("model", help=model_help.replace(".nlb ", ""))
    p.add_argument("-o", "--output", required=True, help="the loadable file to write")
    p.add_argument("--calibration", help="calibration data: a .npy file (samples on the first axis) or a "
                                         "directory of .npy files and .png pictures (mapped to [-1, 1])")
    p.add_argument("--random-calibration", type=int, metavar="N", help="calibrate on N random inputs (default 8)")
    p.add_argument("--method", choices=("minmax", "percentile"), default="minmax")
    p.add_argument("--int8-io", action="store_true", help="int8 inputs/outputs instead of float")
    p.add_argument("--no-progress", action="store_true")
    _common(p, device=False)
    p.set_defaults(func=_guarded(cmd_compile))

    p = sub.add_parser("run", help="run a model on the device: timings, outputs, --save")
    p.add_argument("model", help=model_help)
    p.add_argument("--input", action="extend", nargs="+", metavar="FILE.npy",
                   help="one .npy per model input, in the model's input order (random inputs when omitted)")
    p.add_argument("--save", metavar="DIR", help="write DIR/output_<index>.npy in the model's output dtypes")
    p.add_argument("--repeat", type=int, default=5, help="timed inferences after the first (default 5)")
    p.add_argument("--fresh", action="store_true", help="compile into an empty cache (measures a first-ever load)")
    p.add_argument("--no-progress", action="store_true")
    _common(p)
    p.set_defaults(func=_guarded(cmd_run))

    p = bench_sub.add_parser("model", help="latency and throughput of a model, next to LiteRT")
    p.add_argument("model", help=model_help)
    p.add_argument("--requests", type=int, help="requests in flight for throughput (default: optimal_requests)")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement (default 3)")
    p.add_argument("--no-litert", action="store_true", help="skip the LiteRT comparison")
    _common(p)
    p.set_defaults(func=_guarded(cmd_bench_model))

    p = sub.add_parser("faces", help="detect faces (BlazeFace, quantized) and write PNGs with the boxes")
    p.add_argument("images", nargs="*", help="PNG files (default: astronaut.png and a made second picture)")
    p.add_argument("--out", default=".", help="directory for the annotated PNGs (default .)")
    p.add_argument("--threshold", type=float, default=0.5, help="minimum face score (default 0.5)")
    p.add_argument("--reference", action="store_true", help="also run the float model in LiteRT and compare")
    _common(p)
    p.set_defaults(func=_guarded(cmd_faces))

    p = sub.add_parser("classify", help="classify sample pictures with ResNet-8 (CIFAR-10)")
    _common(p)
    p.set_defaults(func=_guarded(cmd_classify))
