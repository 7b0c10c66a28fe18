"""What each ``npu`` command does, given the arguments :mod:`libnpu.tools.cli` parsed.

A handler takes the parsed arguments and returns the exit code; the expected failures
it raises are one of :data:`USAGE_ERRORS` (exit 2) or :data:`FAILURES` (exit 1), which
the CLI turns into one line on stderr.  Anything else is a bug and keeps its traceback.
The heavy modules (compiler, LiteRT, benchmarks) are imported by the handler that needs them.
"""
from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, TextIO

from libnpu import model_zoo
from libnpu.compiler.blas_threads import one_blas_thread
from libnpu.compiler.frozen_inputs import FreezeInputError, freeze_model_inputs, parse_freeze_inputs
from libnpu.compiler.input_shapes import InputShapeError, parse_input_shapes
from libnpu.compiler.ir import IRError
from libnpu.host import HostOpError
from libnpu.loadable import LoadableError
from libnpu.portability import NpuError, Session, default_devroot
from libnpu.runtime import InputError

from .errors import device_hint, start_command
from .models import ModelSpecError, load_npy

__all__ = ["USAGE_ERRORS", "FAILURES", "UsageError", "Failure"]


class UsageError(ValueError):
    """An argument value the command cannot use (exit 2)."""


class Failure(RuntimeError):
    """The command ran and failed for a reason the message states (exit 1)."""


USAGE_ERRORS = (UsageError, ModelSpecError, InputError, InputShapeError, FreezeInputError)
FAILURES = (Failure, IRError, HostOpError, LoadableError, NpuError, model_zoo.ModelZooError, OSError)


def _devroot(args: argparse.Namespace) -> Path:
    return Path(args.devroot) if args.devroot else default_devroot()


def _require(ok: bool, message: str) -> None:
    """Refuse an option value the command cannot use (exit 2) before touching the device."""
    if not ok:
        raise UsageError(message)


def _input_shapes(args: argparse.Namespace) -> dict[str | None, tuple[int, ...]] | None:
    """``--input-shape`` as the compiler takes it (None when not given: the default's cache key)."""
    return parse_input_shapes(args.input_shape) or None


def _checked_shapes(path: Path, shapes: dict[str | None, tuple[int, ...]] | None) -> list[str]:
    """Refuse ``--input-shape`` values the model cannot take, and free dimensions left without
    one, naming the file, before any other work; the notes on the defaults taken."""
    from libnpu.compiler.input_shapes import fix_input_shapes
    return fix_input_shapes(path, None, shapes)[2]


def _print_notes(notes: list[str], command: str) -> None:
    """The compiler's notes (e.g. a free batch dimension set to 1), one line each on stderr."""
    for note in notes:
        print(f"npu {command}: note: {note}", file=sys.stderr)


def _progress_wanted(args: argparse.Namespace) -> bool:
    return not getattr(args, "json", False) and not getattr(args, "no_progress", False) and sys.stderr.isatty()


def _say(line: str) -> None:
    """A progress line on stderr (a terminal's: see _progress_wanted)."""
    print(f"... {line}", file=sys.stderr, flush=True)


# devices ---------------------------------------------------------------------------------

def _nodes(devroot: Path) -> list[Path]:
    return sorted((p for p in devroot.glob("npu[0-9]*") if p.name[3:].isdigit()), key=lambda p: int(p.name[3:]))


def info(args: argparse.Namespace) -> int:
    devroot = _devroot(args)
    devices, failures = [], []
    with Session(devroot) as session:
        for node in _nodes(devroot):
            try:
                device = session.open_node(int(node.name[3:]))
                facts = device.info()
                props = device.properties()
            except OSError as exc:
                failures.append(exc)
                continue
            devices.append({
                "device": node.name, "node": str(node), "model": facts["model"],
                "abi_version": f"{facts['abi_version'] >> 16}.{facts['abi_version'] & 0xFFFF}",
                "cores": facts["num_cores"], "clock_mhz": facts["clock_mhz"],
                "memory_total_bytes": facts["memory_total"], "memory_used_bytes": facts["memory_used"],
                "contexts": facts["num_contexts"] - 1,          # not counting this query's own
                "jobs_completed": facts["jobs_completed"], "jobs_failed": facts["jobs_failed"],
                "busy_time_us": facts["busy_time_ns"] // 1000, "reset_count": facts["reset_count"],
                "properties": props,
            })
    if failures and not devices:
        raise failures[0]                # the CLI's one line, with the next step
    for exc in failures:                 # the others are described
        print(f"npu info: {device_hint(exc, devroot) or exc}", file=sys.stderr)
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
            p = d["properties"]
            print(f"  {p['full_device_name']}, uuid {p['device_uuid']}, {p['device_gops']['int8']:g} int8 GOPS")
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


def capi(args: argparse.Namespace) -> int:
    """Flags for a C program (pkg-config style, on one line); without options, what there is."""
    from libnpu.capi.embedding import EmbeddingBuildError

    from . import c_libraries
    try:
        build = c_libraries.NVDLA if args.nvdla else c_libraries.RUNTIME
        wanted = [flag for flag, asked in (("cflags", args.cflags), ("libs", args.libs), ("path", args.path)) if asked]
        if wanted:
            print(" ".join(build.describe(flag) for flag in wanted))
            return 0
        for library in (c_libraries.RUNTIME, c_libraries.NVDLA):
            print(f"{library.header.name}: {library.header}")
            print(f"  library: {library.describe('path')}")
            print(f"  cflags:  {library.describe('cflags')}")
            print(f"  libs:    {library.describe('libs')}")
    except (EmbeddingBuildError, c_libraries.CBuildError) as exc:
        raise Failure(str(exc)) from exc
    return 0


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
    if args.percentile is not None:
        if args.method != "percentile":
            raise UsageError("--percentile goes with --method percentile")
        if not 50 < args.percentile <= 100:
            raise UsageError(f"--percentile must be in (50, 100], not {args.percentile}")
        options["percentile"] = args.percentile
    recipe = getattr(args, "recipe", "default") or "default"
    if recipe != "default":
        options["recipe"] = recipe
    target = getattr(args, "target", None)
    if target is not None:
        _require(recipe == "default", f"--target goes with the default recipe (it measures), not --recipe {recipe}")
        _require(0.0 < target <= 1.0, "--target is a score in (0, 1], e.g. 0.99")
        options["target"] = target
    budget = getattr(args, "escalation_budget", None)
    if budget is not None:
        _require(recipe == "default", f"--escalation-budget goes with the default recipe (it escalates), "
                                      f"not --recipe {recipe}")
        _require(budget == 0 or budget >= 1, "--escalation-budget is a factor >= 1, or 0 for no cap")
        options["escalation_budget"] = budget
    if args.weight_rounding is not None and (args.weight_rounding != "nearest" or recipe != "fast"):
        options["weight_rounding"] = args.weight_rounding
    if args.bias_correction is not None and (args.bias_correction or recipe != "fast"):
        options["bias_correction"] = args.bias_correction
    if args.equalize is not None and (args.equalize or recipe != "fast"):
        options["equalize"] = args.equalize
    if args.fc_per_tensor:
        options["fc_per_channel"] = False
    if args.int8_io:
        options["io_dtype"] = "int8"
    if args.state:
        pairs = [pair.split("=") for pair in args.state]
        if any(len(p) != 2 or not all(p) for p in pairs):
            raise UsageError(f"--state takes INPUT=OUTPUT, got {args.state}")
        options["states"] = dict(pairs)
    options.update(_int16_options(args, recipe))
    if getattr(args, "report", False):
        options["layer_report"] = True
    return options


def _int16_options(args: argparse.Namespace, recipe: str = "default") -> dict[str, Any]:
    """``--int16`` and its limits (only what was set, so the default keeps the cache key;
    ``recipe``'s own int16 choice applies when ``--int16`` is not given)."""
    from libnpu.compiler.mixed_precision import parse_selection
    from libnpu.compiler.recipes import RECIPES, escalates
    given = getattr(args, "int16", None)
    # The default recipe escalates to int16 "auto" where it must: the int16 options shape those steps.
    implied = "auto" if escalates({"recipe": recipe}) else RECIPES[recipe].get("int16")
    selection = parse_selection(given if given is not None else implied)
    options: dict[str, Any] = {}
    if given is not None and not (recipe == "fast" and selection == "none"):
        options["int16"] = selection if isinstance(selection, str) else ",".join(selection)
    weights = getattr(args, "int16_weights", None)
    if weights is not None:
        wide = parse_selection(weights)
        if wide != "none" and selection == "none":
            raise UsageError("--int16-weights needs int16 activations on those layers (--int16)")
        options["int16_weights"] = wide if isinstance(wide, str) else ",".join(wide)
    headroom = getattr(args, "int16_headroom", None)
    if headroom is not None:
        if selection == "none":
            raise UsageError("--int16-headroom needs int16 activations (--int16)")
        if headroom != "held-out":
            try:
                factor = float(headroom)
            except ValueError:
                raise UsageError(f"--int16-headroom {headroom!r}: a factor in [1, 16] or 'held-out'") from None
            _require(1.0 <= factor <= 16.0, "--int16-headroom is a factor in [1, 16] or 'held-out'")
            headroom = factor
        options["int16_headroom"] = headroom
    grid = getattr(args, "int16_grid", None)
    if grid is not None:
        if selection == "none":
            raise UsageError("--int16-grid needs int16 activations (--int16)")
        options["int16_grid"] = grid.replace("-", "_")
    if selection == "none":
        if getattr(args, "int16_target", None) is not None or getattr(args, "int16_max_layers", None) is not None:
            raise UsageError("--int16-target and --int16-max-layers need --int16 auto")
        return options
    if given is not None:
        options["int16"] = selection if isinstance(selection, str) else ",".join(selection)
    if args.int16_target is not None or args.int16_max_layers is not None:
        if selection != "auto":
            raise UsageError("--int16-target and --int16-max-layers need --int16 auto")
        if args.int16_target is not None:
            _require(0.0 < args.int16_target <= 1.0, "--int16-target is a score in (0, 1]")
            options["int16_target"] = args.int16_target
        if args.int16_max_layers is not None:
            _require(args.int16_max_layers >= 1, "--int16-max-layers needs at least 1")
            options["max_int16_layers"] = args.int16_max_layers
    return options


def _int16_report(metadata: dict[str, Any]) -> str | None:
    """The compile output's line naming the layers that run with int16 activations."""
    layers = metadata.get("int16_layers")
    if layers is None:
        return None
    text = f"int16 activations: {len(layers)} layer{'s' if len(layers) != 1 else ''}"
    if layers:
        text += " (" + ", ".join(layers) + ")"
    wide = metadata.get("int16_weights")
    if wide:
        text += f"; int16 weights: {len(wide)} layer{'s' if len(wide) != 1 else ''} (" + ", ".join(wide) + ")"
    scores = metadata.get("int16_output_score")
    if scores:
        text += "; output score vs float " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
    return text


def _numbers(text: str, option: str, count: int | None = None) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"{option} takes comma-separated numbers, not {text!r}") from None
    if count is not None and len(values) != count:
        raise UsageError(f"{option} takes {count} numbers, not {text!r}")
    return values


def _preprocessing(args: argparse.Namespace) -> dict[str, Any]:
    """load_calibration's picture preprocessing from --input-range / --mean / --std."""
    if args.std is not None and args.mean is None:
        raise UsageError("--std goes with --mean")
    if args.mean is not None:
        if args.input_range is not None:
            raise UsageError("give --input-range or --mean/--std, not both")
        std = _numbers(args.std, "--std") if args.std is not None else (1.0,)
        if any(s == 0 for s in std):
            raise UsageError("--std must not be 0")
        return {"mean": _numbers(args.mean, "--mean"), "std": std}
    if args.input_range is not None:
        lo, hi = _numbers(args.input_range, "--input-range", 2)
        if not lo < hi:
            raise UsageError(f"--input-range needs LO < HI, not {args.input_range}")
        return {"image_range": (lo, hi)}
    return {}


def _frozen(path: Path, texts: list[str]) -> Path:
    """``path``, or with ``--freeze-input`` a copy of the model (same file name, in a temporary
    directory removed when the process ends) whose frozen inputs are constants: every stage
    after (shapes, calibration files, placement, the report) sees that model."""
    if not texts:
        return path
    data, _ = freeze_model_inputs(path, None, parse_freeze_inputs(texts))
    folder = Path(tempfile.mkdtemp(prefix="npu-frozen-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    frozen = folder / path.name
    frozen.write_bytes(data)        # type: ignore[arg-type]   # a path given: bytes back
    return frozen


@one_blas_thread()   # placement and the reports too: numpy's small problems on one BLAS thread
def compile_(args: argparse.Namespace) -> int:
    from libnpu.compiler.escalation import FidelityWarning

    from .compile import (
        compile_model_file,
        export_int8_tflite,
        format_plan,
        input_shapes,
        plan_report,
        quantization_report,
    )
    from .models import load_calibration, resolve
    warnings.simplefilter("ignore", FidelityWarning)  # a missed target is said once, last (_fidelity_lines)
    path = resolve(args.model)
    if path.suffix == ".nlb":
        raise UsageError(f"{path} is already a compiled loadable")
    path = _frozen(path, args.freeze_input)
    out = Path(args.output)
    if out.suffix not in (".nlb", ".tflite"):
        raise UsageError(f"{out}: the output is a loadable (.nlb) or an int8 model (.tflite)")
    _check_writable(out)
    if args.calibration and args.random_calibration is not None:
        raise UsageError("give --calibration or --random-calibration, not both")
    placement = _placement_options(args)
    if out.suffix == ".tflite" and placement:
        raise UsageError("--ops and --strict place operators for a loadable (.nlb); a .tflite output keeps them all")
    if args.tiles is not None:
        _require(args.tiles >= 1, "--tiles must be >= 1 (the cores one inference is planned for)")
        if out.suffix == ".tflite":
            raise UsageError("--tiles plans a loadable (.nlb) for several cores; a .tflite output has no plan")
        if args.tiles > 1:      # one core: the compile cache's key as libnpu.load's
            placement["tiles"] = args.tiles
    if placement.get("strict"):       # refused before any calibration, naming the file
        from libnpu.compiler.placement import plan_placement
        plan_placement(path, ops=placement.get("ops")).refuse_fallback()
    options = _quantizer_options(args)
    if args.min_npu_partition is not None:      # compiler.small_islands
        _require(args.min_npu_partition >= 0, "--min-npu-partition is a number of multiply-adds >= 0 (0: off)")
        if out.suffix == ".tflite":
            raise UsageError("--min-npu-partition places operators for a loadable (.nlb); a .tflite output keeps "
                             "them all")
        options["min_npu_partition"] = args.min_npu_partition
    shapes = _input_shapes(args)
    notes = _checked_shapes(path, shapes)
    if shapes:
        options["input_shapes"] = shapes
    preprocessing = _preprocessing(args)
    if preprocessing and not args.calibration:
        raise UsageError("--input-range / --mean / --std preprocess --calibration pictures: give --calibration")
    # the calibration files feed the inputs the user gives; --state inputs carry the model's own outputs
    dataset = load_calibration(args.calibration, input_shapes(path, shapes, states=options.get("states", {})),
                               **preprocessing) if args.calibration else None
    calibration = "file" if dataset is not None else "random"
    worst = None if args.report_all else 10
    if out.suffix == ".tflite":
        result = export_int8_tflite(path, out, dataset, progress=_progress_wanted(args), **options)
        if args.json:
            print(json.dumps({"model": str(path), "output": str(out), "seconds": round(result.seconds, 3),
                              "stages_s": result.stages, "calibration": calibration,
                              "notes": notes,
                              "int16_layers": result.metadata.get("int16_layers", []),
                              "fidelity": result.metadata.get("fidelity"),
                              **({"layer_errors": result.metadata.get("layer_errors")} if args.report else {})},
                             indent=2))
        else:
            _print_notes(notes, "compile")
            print(f"quantized {path.name} -> {out} in {result.seconds:.2f} s ({result.ops} ops)")
            int16 = _int16_report(result.metadata)
            if int16:
                print(int16)
            if args.report:
                print(quantization_report(result.metadata, worst))
        _fidelity_lines(result.metadata, show=not args.json)
        return 0
    result = compile_model_file(path, dataset, cache_dir=args.cache_dir, progress=_progress_wanted(args),
                                **options, **placement)
    result.loadable.save(out)
    plan = plan_report(result.loadable)
    report_text, report = _report(path, placement.get("ops"), result.loadable, shapes) if args.report else ("", None)
    if args.json:
        print(json.dumps({"model": str(path), "output": str(out), "cache_hit": result.cache_hit,
                          "notes": notes,
                          "seconds": round(result.seconds, 3), "stages_s": result.stages,
                          "calibration": calibration, "plan": plan,
                          "int16_layers": result.loadable.metadata.get("int16_layers", []),
                          "int16_output_score": result.loadable.metadata.get("int16_output_score"),
                          "fidelity": result.loadable.metadata.get("fidelity"),
                          "layer_faults": result.loadable.metadata.get("layer_faults", []),
                          "small_islands": result.loadable.metadata.get("small_islands", []),
                          **({"report": report, "layer_errors": result.loadable.metadata.get("layer_errors")}
                             if args.report else {})}, indent=2))
        _fidelity_lines(result.loadable.metadata, show=False)
        return 0
    _print_notes(notes, "compile")
    for fault in result.loadable.metadata.get("layer_faults", []):    # compiler.layer_faults
        print(f"npu compile: warning: {fault}", file=sys.stderr)
    for line in result.loadable.metadata.get("small_islands", []):    # compiler.small_islands
        print(f"npu compile: {line}")
    how = "from the compile cache" if result.cache_hit else \
        "(" + ", ".join(f"{k} {v:.2f} s" for k, v in result.stages.items()) + ")"
    print(f"compiled {path.name} -> {out} in {result.seconds:.2f} s {how}")
    int16 = _int16_report(result.loadable.metadata)
    if int16:
        print(int16)
    print(format_plan(plan))
    if report_text:
        print(report_text)
    if args.report:
        print(quantization_report(result.loadable.metadata, worst))
    _fidelity_lines(result.loadable.metadata, show=True)
    return 0


def _fidelity_lines(metadata: dict[str, Any], show: bool) -> None:
    """What the default recipe measured and chose (``show``), and, last, a warning on
    stderr naming the outputs under the target and what to try."""
    from libnpu.compiler.escalation import format_fidelity, missed_text
    fidelity = metadata.get("fidelity")
    if not fidelity:
        return
    if show:
        print(format_fidelity(fidelity))
    if fidelity.get("missed"):
        print(f"npu compile: warning: {missed_text(fidelity)}", file=sys.stderr)


def _check_writable(out: Path) -> None:
    """Refuse an output file that cannot be written, naming it as given, before any work."""
    where = out.parent
    if out.is_dir():
        raise UsageError(f"{out} is a directory: give the file to write")
    if not where.exists():
        raise UsageError(f"{out}: the directory {where} does not exist")
    if not where.is_dir():
        raise UsageError(f"{out}: {where} is not a directory")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"{out}: no permission to write in {where}")


def _report(path: Path, ops: list[str] | None, loadable: Any = None,
            shapes: dict[str | None, tuple[int, ...]] | None = None) -> tuple[str, dict[str, Any]]:
    from libnpu.compiler.placement import CPU, place_model
    from libnpu.compiler.small_islands import TOO_SMALL

    from .report import ReportContext, build_report
    placements = place_model(path, ops=ops, input_shapes=shapes)
    if loadable is not None:     # what the compile moved beside them: small chip partitions between host calls
        moved = {row[0]: row[3] for row in loadable.metadata.get("placement", []) if row[3].startswith(TOO_SMALL)}
        kept = ((loadable.metadata.get("fidelity") or {}).get("cpu_float")    # and the escalation's float layers
                or loadable.metadata.get("cpu_float") or {})                 # (or a QDQ file's float front end)
        moved.update({i: kept["reason"] for i in kept.get("sources", [])})
        placements = [dataclasses.replace(p, device=CPU, reason=moved[p.index]) if p.index in moved else p
                      for p in placements]
    return build_report(ReportContext(path, placements, loadable))


def _allow_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    ops = sorted({op.strip() for op in text.split(",") if op.strip()})
    if not ops:
        raise UsageError("--ops needs at least one operator name (e.g. --ops CONV_2D,ADD)")
    return ops


def _placement_options(args: argparse.Namespace) -> dict[str, Any]:
    """Only the placement options the user set (the default shares libnpu.load's cache key)."""
    options: dict[str, Any] = {}
    ops = _allow_list(args.ops)
    if ops is not None:
        options["ops"] = ops
    if args.strict:
        options["strict"] = True
    return options


def inspect(args: argparse.Namespace) -> int:
    from .compile import describe_model
    from .models import resolve
    path = resolve(args.model)
    if path.suffix == ".nlb":
        from libnpu.loadable import Loadable
        print(Loadable.load(path).summary())
    else:
        shapes = _input_shapes(args)
        print(describe_model(path, plan=args.plan, input_shapes=shapes))
        print(_report(path, _allow_list(args.ops), shapes=shapes)[0])
    return 0


def fetch(args: argparse.Namespace) -> int:
    unknown = sorted(set(args.names) - set(model_zoo.ASSETS))
    if unknown:
        raise UsageError(f"no model-zoo file {unknown[0]!r} (known: {', '.join(model_zoo.ASSETS)})")
    keys = list(args.names or model_zoo.ASSETS)
    for n, key in enumerate(keys, 1):
        say = (lambda line, n=n: _say(f"[{n}/{len(keys)}] {line}")) if _progress_wanted(args) else None
        print(f"{key:10} {model_zoo.fetch(key, say)}", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    from .run import run as run_model
    _require(args.repeat >= 0, "--repeat must be >= 0")
    report = run_model(args.model, args.input or (), repeat=args.repeat, devroot=args.devroot,
                       cache_dir=args.cache_dir, fresh=args.fresh, save=args.save, progress=_progress_wanted(args),
                       input_shapes=_input_shapes(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_notes(report["notes"], "run")
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


def profile(args: argparse.Namespace) -> int:
    from .profile import TraceError, profile_model
    _require(args.runs >= 1, "--runs must be >= 1")
    try:
        report = profile_model(args.model, devroot=args.devroot, runs=args.runs, trace=args.trace, png=args.png,
                               cache_dir=args.cache_dir, input_shapes=_input_shapes(args))
    except TraceError as exc:
        raise Failure(str(exc)) from None
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2))
        return 0
    print(f"model {report['model']}: the median (by chip time) of {report['runs']} profiled inferences")
    print(report["table"])
    for key, what in (("trace", "trace (open in ui.perfetto.dev)"), ("png", "timeline")):
        if key in report:
            print(f"{what}: {report[key]} ({report['trace_events']} events, contexts {report['trace_contexts']})")
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
    result = bench.nop_latency(devroot, args.n, args.path)
    if args.processes:
        result.update(bench.nop_throughput(devroot, args.processes, args.seconds, result["path"]))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if result["path"] == "queue":
        print(f"NOP job through a user queue (submit, wait):       p50 {result['nop_p50_us']} us, "
              f"p99 {result['nop_p99_us']} us")
    else:
        print(f"NOP job, submit+wait in one round trip (libnpu run): p50 {result['nop_p50_us']} us, "
              f"p99 {result['nop_p99_us']} us")
        print(f"NOP job, submit then wait (two round trips):      p50 {result['nop_submit_wait_p50_us']} us, "
              f"p99 {result['nop_submit_wait_p99_us']} us")
    print(f"raw GET_INFO round trip on the node (no libnpu):   p50 {result['rtt_p50_us']} us")
    print(f"ratio nop/rtt: {result['ratio']} (two round trips: {result['ratio_submit_wait']})")
    print(f"NOP jobs/s one by one: {result['jobs_per_s_one_by_one']}, eight back to back + one wait: "
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
    from .run import read_inputs
    _require(args.requests is None or args.requests >= 1, "--requests must be at least 1")
    _require(args.seconds > 0, "--seconds must be > 0")
    _require(args.iterations is None or args.iterations >= 1, "--iterations must be at least 1")
    given = [load_npy(f) for f in args.input or ()]     # a file that is no .npy: before the device
    inputs = (lambda descs: read_inputs(args.input, descs, given)) if args.input else None
    report = measure(args.model, requests=args.requests, seconds=args.seconds, devroot=args.devroot,
                     cache_dir=args.cache_dir, litert=not args.no_litert, delegate=args.delegate,
                     job_path=args.path, reference_loop=args.reference_loop, iterations=args.iterations,
                     inputs=inputs, hint=args.hint, perf_counts=args.perf_counts,
                     progress=_say if _progress_wanted(args) else None, input_shapes=_input_shapes(args))
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _print_library(library_path: Any, what: str) -> int:
    """Print the path ``library_path()`` gives (the library built once, cached)."""
    from libnpu.capi.embedding import EmbeddingBuildError
    try:
        print(library_path())
    except EmbeddingBuildError as exc:
        raise Failure(f"cannot build {what} library: {exc}") from exc
    return 0


def delegate(args: argparse.Namespace) -> int:
    from libnpu.delegate import library_path
    return _print_library(library_path, "the delegate")


def ort_ep(args: argparse.Namespace) -> int:
    from libnpu.ort_ep import library_path
    return _print_library(library_path, "the execution provider")
