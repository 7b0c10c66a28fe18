"""``npu profile MODEL``: where an inference's time goes, layer by layer, and a trace.

The model is loaded with the property PERF_COUNT on (libnpu.profiling): after a warm-up
inference, ``--runs`` more are profiled and the median one's (by chip time) per-layer table printed
(the timing model's cycles and simulated time, the chip's measured time), with its
totals: the layers' cycles equal the inference's, their measured times nearly the
job's.  ``--trace FILE`` also records the device's trace (every context's jobs, not only
ours: start another process meanwhile and it shows up) and writes it as a Chrome/Perfetto
trace-event file; ``--png FILE`` draws it.  Recording the trace is the device owner's to
switch on (the tree's ``trace`` file), as it shows every process's jobs.
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from kmd_fuse.uapi.sysfs_layout import class_dir, default_sysroot
from libnpu.profiling import InferenceProfile
from libnpu.visible_devices import node_number

from .models import resolve
from .run import random_inputs
from .timeline import chrome_trace, read_events, timeline_png

__all__ = ["profile_model", "trace_file"]


class TraceError(RuntimeError):
    """The device's trace cannot be recorded (no tree, or not the device's owner)."""


def trace_file(devroot: str | os.PathLike, instance: int | None = None) -> Path:
    """The attribute tree's ``trace`` file of visible device ``instance`` under ``devroot``
    (None: the default device, ``libnpu.visible_devices``)."""
    return Path(class_dir(default_sysroot(devroot))) / f"npu{node_number(instance)}" / "trace"


def set_tracing(path: Path, on: bool) -> None:
    try:
        path.write_text("1\n" if on else "0\n")
    except PermissionError:
        raise TraceError(f"recording the device's trace is for its owner: run as root (or the user running a "
                         f"rootless driver), or have them `echo 1 > {path}`") from None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise TraceError(f"{path} does not exist: is the driver serving this device's attribute tree?") from None
        raise


def profile_model(spec: str, *, devroot: str | os.PathLike | None = None, runs: int = 5,
                  trace: str | os.PathLike | None = None, png: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None, input_shapes: Any = None) -> dict[str, Any]:
    """Profile ``runs`` inferences of a model; returns the report ``npu profile`` prints.
    ``input_shapes`` for inputs with free dimensions (:mod:`libnpu.compiler.input_shapes`)."""
    shaped = {"input_shapes": input_shapes} if input_shapes else {}     # unset: the default's cache key
    root = Path(devroot) if devroot else libnpu.portability.default_devroot()
    tracing = trace is not None or png is not None
    trace_path = trace_file(root)
    if tracing:
        set_tracing(trace_path, True)
    try:
        with libnpu.load(resolve(spec), devroot=root, cache_dir=cache_dir, config={"PERF_COUNT": True},
                         **shaped) as model:
            inputs = random_inputs(model.inputs)
            model.infer(inputs)                       # warm-up: caches, first-touch page faults
            profiles: list[InferenceProfile] = []
            for _ in range(max(1, runs)):
                model.infer(inputs)
                profile = model.get_profiling_info()
                assert profile is not None, "PERF_COUNT is on"
                profiles.append(profile)
        text = trace_path.read_text() if tracing else ""
    finally:
        if tracing:
            set_tracing(trace_path, False)
    # The median run by chip time: on a busy host one run may have its core preempted
    # between two layers (the gap counts in the job, in no layer).
    shown = sorted(profiles, key=lambda p: p.chip_ns)[len(profiles) // 2]
    chip = np.array([[layer.chip_ns for layer in p.layers] for p in profiles])
    report: dict[str, Any] = {
        "model": str(resolve(spec)), "runs": len(profiles), "profile": shown.as_dict(), "table": shown.table(),
        "mean_chip_us_per_layer": [round(float(v) / 1e3, 2) for v in chip.mean(axis=0)] if chip.size else [],
        "layer_cycles_sum": sum(layer.cycles for layer in shown.layers), "inference_cycles": shown.cycles,
        "layer_chip_ns_sum": sum(layer.chip_ns for layer in shown.layers), "inference_chip_ns": shown.chip_ns,
    }
    if tracing:
        header, events = read_events(text)
        if trace is not None:
            Path(trace).write_text(json.dumps(chrome_trace(events, origin_ns=header["started_ns"] or None)))
            report["trace"] = str(trace)
        if png is not None:
            report["png"] = str(timeline_png(events, png))
        report["trace_events"] = len(events)
        report["trace_contexts"] = sorted({e["context"] for e in events if e["type"] == "job"})
    return report
