"""Compile a model with a progress bar, through the compile cache, and report the memory plan.

The compile is the library's own (:func:`libnpu.compiler.cache.compile_cached`, the one
``libnpu.load`` runs): this module only listens to its progress callback, drawing a bar
(calibration runs are steps) and timing each stage. Same model and options, same cache
entry, same loadable.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libnpu.compiler.cache import CompileCache, compile_cached
from libnpu.loadable import Loadable, RegionKind

__all__ = ["CompileResult", "StageTimer", "compile_model_file", "export_int8_tflite", "describe_model", "plan_report",
           "format_plan", "input_shapes", "quantization_report", "quantization_section"]


@dataclass
class CompileResult:
    loadable: Loadable
    cache_hit: bool
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)


class StageTimer:
    """A compiler progress callback: times each stage and draws a tqdm bar on stderr if asked.

    The bar counts one step per stage and per calibration run; a stage that starts
    announces the one-step stages it implies (import: lower; optimize: quantize), so the
    bar's total only grows by the calibration runs, once they are known.
    """

    _IMPLIES = {"import": ("lower",), "optimize": ("quantize",)}

    def __init__(self, bar: bool) -> None:
        self.stages: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._counted: set[str] = set()
        self._bar = None
        if bar:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=0, unit="step", file=sys.stderr, leave=False, dynamic_ncols=True, delay=0.1)

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            self._started[stage] = now
            if self._bar is not None:
                for name, steps in ((stage, total), *((later, 1) for later in self._IMPLIES.get(stage, ()))):
                    if name not in self._counted:
                        self._counted.add(name)
                        self._bar.total += steps
                self._bar.set_description(stage)
            return
        if self._bar is not None:
            self._bar.update(1)
        if done == total:
            self.stages[stage] = round(now - self._started.get(stage, now), 3)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def compile_model_file(model: str | os.PathLike, dataset: Sequence | None = None, *,
                       cache_dir: str | os.PathLike | None = None, progress: bool = True,
                       **options: Any) -> CompileResult:
    """Compile a .tflite/.onnx file (float models quantized with ``dataset`` or random data).

    ``options`` are the quantizer's (``random_count``, ``method``, ``io_dtype``, ...); give
    only those you set, so the cache key matches ``libnpu.load``'s for the same choice.
    Raises the compiler's errors (:class:`libnpu.compiler.ir.IRError`) unchanged.
    """
    started = time.perf_counter()
    timer = StageTimer(bar=progress)
    try:
        loadable, hit = compile_cached(Path(model), dataset, cache=CompileCache(cache_dir), progress=timer, **options)
    finally:
        timer.close()
    return CompileResult(loadable, hit, time.perf_counter() - started, timer.stages)


@dataclass
class ExportResult:
    ops: int
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def export_int8_tflite(model: str | os.PathLike, output: str | os.PathLike, dataset: Sequence | None = None, *,
                       progress: bool = True, **options: Any) -> ExportResult:
    """Write the int8 graph of ``model`` (quantized as :func:`compile_model_file` would) as a .tflite file,
    e.g. to run it in LiteRT next to the device. int16 weights (``--recipe accurate``'s
    ``int16_weights="auto"``) are left out unless asked for: TFLite has no kernel for them;
    int16 grids are per tensor unless asked for (``int16_grid``), as TFLite's are."""
    from libnpu.compiler.frontend import to_int8_graph
    options.setdefault("int16_weights", "none")
    options.setdefault("int16_grid", "per_tensor")   # LiteRT's int16 grids: one scale per tensor
    from libnpu.compiler.tflite_export import export_tflite
    started = time.perf_counter()
    timer = StageTimer(bar=progress)
    try:
        graph = to_int8_graph(Path(model), dataset, progress=timer, **options)
    finally:
        timer.close()
    Path(output).write_bytes(export_tflite(graph))
    return ExportResult(len(graph.ops), time.perf_counter() - started, timer.stages, dict(graph.metadata))


def quantization_section(metadata: dict[str, Any], worst: int | None = 10) -> tuple[list[str], Any]:
    """The quantization section of a report as (text lines, JSON value): how the model was
    calibrated and each layer's error against float on the calibration data."""
    text = quantization_report(metadata, worst).splitlines()
    return text, {"calibration": metadata.get("calibration"), "layer_errors": metadata.get("layer_errors")}


def quantization_report(metadata: dict[str, Any], worst: int | None = 10) -> str:
    """``npu compile --report``'s quantization section, from a compiled model's metadata:
    how it was calibrated and each layer's error against float on the calibration data."""
    from libnpu.compiler.accuracy import errors_from_json, format_layer_errors
    if metadata.get("quantized") != "int8" or "calibration" not in metadata:
        return "quantization: an int8 model, compiled as it is (no quantization to report)"
    cal = metadata["calibration"]
    lifted = cal.get("equalized_channels") or 0
    plural = "" if lifted == 1 else "s"
    gated = cal.get("gated_swishes") or 0
    gplural = "" if gated == 1 else "s"
    head = (f"quantization: {cal.get('method', 'minmax')} calibration on {cal.get('runs')} "
            f"{'random inputs' if cal.get('random') else 'samples'}"
            f"{', GPTQ weight rounding' if cal.get('weight_rounding') == 'gptq' else ''}"
            f"{f', {lifted} channel{plural} equalized' if lifted else ''}"
            f"{f', {gated} hard-swish block{gplural} equalized' if gated else ''}"
            f"{', bias correction' if cal.get('bias_correction') else ''}")
    rows = metadata.get("layer_errors")
    if not rows:
        return head + "\n  (no per-layer figures: compiled without --report)"
    return head + "\n" + format_layer_errors(errors_from_json(rows), worst)


def describe_model(model: str | os.PathLike, *, plan: bool = False, input_shapes: Any = None) -> str:
    """A model file's graph as imported (ops, shapes, MACs, constant bytes); ``plan``: its memory plan too;
    ``input_shapes`` for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`)."""
    graph = _graph(model, input_shapes)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(graph.op_counts().items()))
    weights = sum(t.nbytes for t in graph.constants())
    lines = [graph.summary(), f"ops: {counts}", f"MACs: {graph.macs():,}  constant bytes: {weights:,}"]
    if plan:
        from libnpu.compiler.memplan import plan_memory
        lines += [f"region {i}: {r.kind.name:<11} {r.size:>10,} bytes  {r.name}"
                  for i, r in enumerate(plan_memory(graph).regions)]
    return "\n".join(lines)


def plan_report(loadable: Loadable) -> dict[str, Any]:
    """The device memory plan: bytes per region kind, and what activation reuse saved."""
    kinds: dict[str, int] = {}
    for region in loadable.regions:
        kinds[region.kind.name.lower()] = kinds.get(region.kind.name.lower(), 0) + region.size
    arena = [i for i, r in enumerate(loadable.regions) if r.kind == RegionKind.ACTIVATIONS]
    unshared = sum(t.nbytes for t in loadable.tensors if t.region in arena)
    arena_bytes = sum(loadable.regions[i].size for i in arena)
    return {"regions": [{"name": r.name, "kind": r.kind.name.lower(), "bytes": r.size, "alignment": r.alignment}
                        for r in loadable.regions],
            "bytes_by_kind": kinds, "total_bytes": sum(kinds.values()),
            "activation_tensors_bytes": unshared, "activation_arena_bytes": arena_bytes,
            "activation_reuse_saving": round(1 - arena_bytes / unshared, 4) if unshared else 0.0,
            "tasks": len(loadable.tasks), "macs": int(sum(t.macs for t in loadable.tasks))}


def format_plan(report: dict[str, Any]) -> str:
    lines = ["memory plan:"]
    for r in report["regions"]:
        lines.append(f"  {r['kind']:<11} {r['bytes']:>12,} bytes  {r['name']}")
    lines.append(f"  total {report['total_bytes']:,} bytes of device memory per model "
                 f"(weights shared; activations, inputs, outputs and states per request)")
    saving = report["activation_reuse_saving"]
    # tiny tensors each take an aligned slot: the arena can be larger than what it holds
    why = (f"{saving:.0%} saved by reusing buffers" if saving >= 0 else
           f"{report['activation_arena_bytes'] - report['activation_tensors_bytes']:,} bytes of alignment padding")
    lines.append(f"  activations: {report['activation_tensors_bytes']:,} bytes of tensors in a "
                 f"{report['activation_arena_bytes']:,}-byte arena ({why})")
    lines.append(f"  {report['tasks']} tasks, {report['macs']:,} MACs")
    return "\n".join(lines)


def input_shapes(model: str | os.PathLike, given: Any = None, *,
                 states: Collection[str] = ()) -> dict[str, tuple[int, ...]]:
    """Shapes of a model file's inputs by name, in its order (imports the model, compiles
    nothing): those the caller feeds, so not the ``states`` (inputs the model's own
    outputs feed, ``--state``).
    ``given``: shapes for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`)."""
    graph = _graph(model, given)
    return {n: tuple(graph.tensors[n].shape) for n in graph.inputs if n not in states}


def _graph(model: str | os.PathLike, given: Any = None) -> Any:
    """The model's graph as the compiler takes it: operators placed on the CPU as HOST ops."""
    from libnpu.compiler.placement import import_with_fallback, plan_placement
    plan = plan_placement(model, input_shapes=given)
    return import_with_fallback(plan.data, plan.kind, plan.name, force_host=plan.cpu)[0]

