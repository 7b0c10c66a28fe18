"""Compile a model with a progress bar, through the compile cache, and report the memory plan.

The stages are those of :func:`libnpu.compiler.lower.compile_model` (import, optimize,
calibrate, quantize, lower), run one by one so the calibration runs - the long part
for float models - can show progress.  The cache key is the one
:func:`libnpu.compiler.cache.compile_cached` uses, so ``libnpu.load`` of the same model
with the same options afterwards is a cache hit.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from libnpu.compiler import cache as _cache
from libnpu.loadable import Loadable, RegionKind

__all__ = ["CompileResult", "compile_model_file", "plan_report"]


@dataclass
class CompileResult:
    loadable: Loadable
    cache_hit: bool
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)


class _NoBar:
    """Stands in for a tqdm bar when tqdm is not installed: counts, prints nothing."""
    total = n = 0

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_description(self, desc: str) -> None:
        pass


def _progress(enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=1, desc="import", unit="step", disable=not enabled, file=sys.stderr, leave=False,
                dynamic_ncols=True)


def _compile(data: bytes, name: str, kind: str, dataset: list | None, options: dict[str, Any], progress: bool,
             stages: dict[str, float]) -> Loadable:
    """The compile stages one by one, timed, under one progress bar (calibration runs are steps)."""
    from libnpu.compiler.frontend import check_int8, is_int8, load_model
    from libnpu.compiler.lower import lower
    from libnpu.compiler.optimize import optimize
    from libnpu.compiler.quantizer import Calibrator, quantize, random_dataset

    with _progress(progress) as bar:
        def lap(stage: str, started: float, following: str) -> float:
            now = time.perf_counter()
            stages[stage] = round(now - started, 3)
            bar.update()
            bar.set_description(following)
            return now

        t = time.perf_counter()
        graph = load_model(data, kind=kind, name=name)
        if is_int8(graph):
            bar.total = 2
            t = lap("import", t, "lower")
        else:
            if any(tensor.quant is not None for tensor in graph.tensors.values() if not tensor.is_constant):
                check_int8(graph)  # partly quantized: name the op the chip cannot run
            seed = options.get("seed", 0)
            count = len(dataset) if dataset is not None else options.get("random_count", 8)
            bar.total = 5 + count
            t = lap("import", t, "optimize")
            opt = optimize(graph)
            feeds = dataset if dataset is not None else random_dataset(opt, count, seed=seed)
            t = lap("optimize", t, "calibrate")
            method = options.get("method", "minmax")
            calibrator = Calibrator(opt, method, options.get("percentile", 99.99), seed=seed)
            for feed in feeds:
                calibrator.collect(feed)
                bar.update()
            t = lap("calibrate", t, "quantize")
            graph = quantize(opt, calibrator.ranges(), fc_per_channel=options.get("fc_per_channel", False),
                             io_dtype=options.get("io_dtype", "float32"))
            graph.metadata["calibration"] = {"method": method, "runs": len(feeds), "random": dataset is None}
            check_int8(graph)
            t = lap("quantize", t, "lower")
        loadable = lower(graph, metadata={"source": name})
        lap("lower", t, "done")
    return loadable


def compile_model_file(model: str | os.PathLike, dataset: Sequence | None = None, *,
                       cache_dir: str | os.PathLike | None = None, progress: bool = True,
                       **options: Any) -> CompileResult:
    """Compile a .tflite/.onnx file (float models quantized with ``dataset`` or random data).

    ``options`` are the quantizer's (``random_count``, ``method``, ``io_dtype``, ...); give
    only those you set, so the cache key matches ``libnpu.load``'s for the same choice.
    Raises the compiler's errors (:class:`libnpu.compiler.ir.IRError`) unchanged.
    """
    path = Path(model)
    data = path.read_bytes()
    dataset = [list(feed) if not isinstance(feed, dict) else feed for feed in dataset] if dataset is not None else None
    started = time.perf_counter()
    store = _cache.CompileCache(cache_dir)
    key = _cache.cache_key(data, dict(options, calibration=_cache._dataset_digest(dataset)))
    stages: dict[str, float] = {}
    found = store.get(key)
    if found is not None:
        return CompileResult(found, True, time.perf_counter() - started, stages)
    kind = "onnx" if path.suffix == ".onnx" else "tflite"
    loadable = _compile(data, path.stem, kind, dataset, options, progress, stages)
    store.put(key, loadable)
    return CompileResult(loadable, False, time.perf_counter() - started, stages)


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
                 f"(weights shared; activations, inputs and outputs per request)")
    lines.append(f"  activations: {report['activation_tensors_bytes']:,} bytes of tensors in a "
                 f"{report['activation_arena_bytes']:,}-byte arena "
                 f"({report['activation_reuse_saving']:.0%} saved by reusing buffers)")
    lines.append(f"  {report['tasks']} tasks, {report['macs']:,} MACs")
    return "\n".join(lines)


def input_shapes(model: str | os.PathLike) -> list[tuple[int, ...]]:
    """Shapes of a model file's inputs (imports the model, compiles nothing)."""
    from libnpu.compiler.frontend import load_model
    graph = load_model(model)
    return [tuple(graph.tensors[n].shape) for n in graph.inputs]

