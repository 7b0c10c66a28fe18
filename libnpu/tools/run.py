"""``npu run``: load a model (compiling it through the cache), run it, report timings.

Timings are reported the way users compare them: the first-ever load of a model
(compile + load + first inference, when the compile cache missed) next to a cached
load (cache hit + load + first inference), then the steady-state latency and device
time of each further inference.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from libnpu.loadable import Loadable, TensorDesc

from .compile import compile_model_file
from .models import ModelSpecError, load_npy, resolve

__all__ = ["random_inputs", "read_inputs", "load_timed", "run", "save_outputs"]


def random_inputs(descs: Sequence[TensorDesc], seed: int = 0) -> list[np.ndarray]:
    """One random array per input: uniform [-1, 1) for float inputs, the full range for
    quantized integers, 0s and 1s for unquantized ones (ids, flags: valid indices of any
    table, as the compiler's random calibration gives them)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in descs:
        if np.issubdtype(np.dtype(d.dtype), np.integer) and d.scale is None:
            out.append(rng.integers(0, 2, d.shape).astype(d.dtype))
        elif np.issubdtype(np.dtype(d.dtype), np.integer):
            info = np.iinfo(d.dtype)
            out.append(rng.integers(info.min, info.max, d.shape, endpoint=True).astype(d.dtype))
        else:
            out.append(rng.uniform(-1, 1, d.shape).astype(d.dtype))
    return out


def read_inputs(files: Sequence[str | os.PathLike], descs: Sequence[TensorDesc],
                arrays: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """Inputs from .npy files (or ``arrays``, already read from them), in the model's input
    order; counts and sizes are checked here."""
    if len(files) != len(descs):
        raise ModelSpecError(f"the model takes {len(descs)} inputs "
                             f"({', '.join(d.name for d in descs)}); {len(files)} --input files given")
    given = arrays if arrays is not None else [load_npy(f) for f in files]
    fitted = []
    for f, a, d in zip(files, given, descs):
        if a.size != int(np.prod(d.shape)):
            raise ModelSpecError(f"{f}: shape {a.shape} does not fit input {d.name} {list(d.shape)}")
        fitted.append(a.reshape(d.shape))
    return fitted


@dataclass
class LoadTiming:
    """One load of a model: compile (or cache lookup), load onto the device, first inference."""
    compile_s: float
    cache_hit: bool | None          # None: a loadable file, nothing to compile
    load_s: float
    first_inference_s: float
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return self.compile_s + self.load_s + self.first_inference_s

    def as_dict(self) -> dict[str, Any]:
        return {"compile_s": round(self.compile_s, 4), "cache_hit": self.cache_hit, "load_s": round(self.load_s, 4),
                "first_inference_s": round(self.first_inference_s, 4), "total_s": round(self.total_s, 4),
                **({"compile_stages_s": self.stages} if self.stages else {})}


MakeInputs = Callable[[Sequence[TensorDesc]], list[np.ndarray]]


def load_timed(path: Path, make_inputs: MakeInputs = random_inputs, *, devroot: str | os.PathLike | None = None,
               cache_dir: str | os.PathLike | None = None, progress: bool = False,
               calibration: Sequence[Sequence[np.ndarray]] | None = None,
               **options) -> tuple[libnpu.CompiledModel, LoadTiming, list[np.ndarray]]:
    """Compile (cached) and load ``path``, then infer once on ``make_inputs(model.inputs)``.

    Returns the loaded model, the timings and the inputs used."""
    started = time.perf_counter()
    stages: dict[str, float] = {}
    if path.suffix == ".nlb":
        loadable, hit = Loadable.load(path), None
    else:
        result = compile_model_file(path, calibration, cache_dir=cache_dir, progress=progress, **options)
        loadable, hit, stages = result.loadable, result.cache_hit, result.stages
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    model = libnpu.load(loadable, devroot=devroot)
    load_s = time.perf_counter() - started
    try:
        feeds = make_inputs(model.inputs)
        started = time.perf_counter()
        model.infer(feeds)
        first = time.perf_counter() - started
    except BaseException:
        model.close()
        raise
    return model, LoadTiming(compile_s, hit, load_s, first, stages), feeds


def save_outputs(outputs: Sequence[np.ndarray], directory: str | os.PathLike) -> list[Path]:
    """Write ``DIR/output_<index>.npy`` for each output, in its own dtype."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, value in enumerate(outputs):
        paths.append(d / f"output_{i}.npy")
        np.save(paths[-1], value)
    return paths


def run(spec: str, input_files: Sequence[str] = (), *, repeat: int = 5, devroot: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None, fresh: bool = False, save: str | None = None,
        progress: bool = True, input_shapes: Any = None) -> dict[str, Any]:
    """Everything ``npu run`` reports, as a dict (see the module docstring); ``input_shapes``
    for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`)."""
    shaped = {"input_shapes": input_shapes} if input_shapes else {}     # unset: the default's cache key
    path = resolve(spec)
    with tempfile.TemporaryDirectory(prefix="npu-run-cache-") as tmp:
        cache = tmp if fresh else cache_dir
        given = [load_npy(f) for f in input_files]      # a file that is no .npy: before the device
        make: MakeInputs = (lambda descs: read_inputs(input_files, descs, given)) if input_files else random_inputs
        model, first, inputs = load_timed(path, make, devroot=devroot, cache_dir=cache, progress=progress, **shaped)
        try:
            request = model.create_request()
            runs = []
            outputs: list[np.ndarray] = []
            for _ in range(max(1, repeat)):
                outputs = request.infer(inputs)
                runs.append({"latency_ms": round(request.timing.latency_s * 1e3, 3),
                             "device_time_ms": round(request.timing.device_time_ns / 1e6, 3)})
            request.release()
            props = model.properties()
            descs = model.outputs
            input_descs = model.inputs
            notes = model.loadable.metadata.get("notes", [])
        finally:
            model.close()
        # A second load of the same model: the compile cache now holds it.
        again, cached, _ = load_timed(path, lambda descs: inputs, devroot=devroot, cache_dir=cache, **shaped)
        again.close()
    saved = save_outputs(outputs, save) if save else []
    return {
        "model": str(path), "notes": notes,
        "inputs": [{"name": d.name, "shape": list(d.shape), "dtype": d.dtype,
                    "source": str(f) if input_files else "random"}
                   for d, f in zip(input_descs, input_files or [None] * len(input_descs))],
        "outputs": [{"name": d.name, "shape": list(o.shape), "dtype": str(o.dtype),
                     "min": float(o.min()), "max": float(o.max()),
                     **({"argmax": int(o.reshape(-1).argmax())} if o.ndim <= 2 else {})}
                    for d, o in zip(descs, outputs)],
        "first_load": first.as_dict(), "cached_load": cached.as_dict(), "inferences": runs,
        "saved": [str(p) for p in saved], "properties": props,
    }

