"""The device's trace as people look at it: a Chrome/Perfetto trace-event file and a PNG.

The driver records (kmd_fuse/profiling.py) and serves its events as JSON lines in the
attribute tree's ``trace`` file; this module collects them:

- ``chrome_trace(events)``: the JSON trace-event format (opens in ui.perfetto.dev and
  chrome://tracing).  Process "npuN chip" has one track per core, where each job is a
  slice (``ctx C fence F``) with its layers nested in it (a task graph's layers on the track
  of the core each ran on: docs/hardware.md, "Task graphs"), and an "interrupts" track of
  instants; process "npuN contexts" has one track per context (named with its pid and
  command), where each job is a slice from SUBMIT to its fence with "queued" and
  "running" nested in it, and each fence signalled an instant.
- ``timeline_png(events, path)``: the same tracks as rows of coloured bars, one colour
  per operator (named in a legend), drawn with Pillow.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

CHIP_PID, CONTEXTS_PID = 1, 2
IRQ_TID = 1000


def read_events(text: str) -> tuple[dict, list[dict]]:
    """(header, events) of the driver's ``trace`` file."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines or lines[0].get("type") != "trace":
        raise ValueError("not a trace: the first line should be the driver's trace header")
    return lines[0], lines[1:]


def _us(ns: int, origin: int) -> float:
    return (ns - origin) / 1000


def chrome_trace(events: list[dict], device: str = "npu0", origin_ns: int | None = None) -> dict:
    """The trace-event JSON object for the driver's events (see the module doc)."""
    times = [e.get("submit_ns") or e.get("start_ns") or e.get("ts_ns") for e in events]
    origin = origin_ns if origin_ns is not None else min((t for t in times if t), default=0)
    out: list[dict] = [
        {"ph": "M", "pid": CHIP_PID, "name": "process_name", "args": {"name": f"{device} chip"}},
        {"ph": "M", "pid": CONTEXTS_PID, "name": "process_name", "args": {"name": f"{device} contexts"}},
        {"ph": "M", "pid": CHIP_PID, "tid": IRQ_TID, "name": "thread_name", "args": {"name": "interrupts"}},
    ]
    cores: set[int] = set()
    contexts: dict[int, str] = {}
    for e in events:
        kind = e["type"]
        if kind == "job":
            core, ctx = e["core"], e["context"]
            cores.add(core)
            contexts.setdefault(ctx, f"context {ctx} (pid {e['pid']} {e['comm']})")
            label = f"ctx {ctx} fence {e['fence']}"
            args = {"context": ctx, "fence": e["fence"], "status": e["status"], "cycles": e["cycles"],
                    "device_time_ns": e["device_time_ns"], "queue_us": _us(e["start_ns"], e["submit_ns"]),
                    "priority": e["priority"], "tasks": e["tasks"]}
            out.append({"ph": "X", "pid": CHIP_PID, "tid": core, "name": label, "cat": "job",
                        "ts": _us(e["start_ns"], origin), "dur": _us(e["end_ns"], e["start_ns"]), "args": args})
            out.append({"ph": "X", "pid": CONTEXTS_PID, "tid": ctx, "name": f"fence {e['fence']}", "cat": "job",
                        "ts": _us(e["submit_ns"], origin), "dur": _us(max(e["signal_ns"], e["end_ns"]), e["submit_ns"]),
                        "args": args})
            out.append({"ph": "X", "pid": CONTEXTS_PID, "tid": ctx, "name": "queued", "cat": "wait",
                        "ts": _us(e["submit_ns"], origin), "dur": _us(max(e["start_ns"], e["submit_ns"]),
                                                                      e["submit_ns"])})
            out.append({"ph": "X", "pid": CONTEXTS_PID, "tid": ctx, "name": f"running on core {core}", "cat": "run",
                        "ts": _us(e["start_ns"], origin), "dur": _us(e["end_ns"], e["start_ns"])})
        elif kind == "task":
            cores.add(e["core"])       # a task graph's layer may run on a core without a job of its own
            out.append({"ph": "X", "pid": CHIP_PID, "tid": e["core"], "name": e["name"], "cat": "layer",
                        "ts": _us(e["start_ns"], origin), "dur": _us(e["end_ns"], e["start_ns"]),
                        "args": {"index": e["index"], "cycles": e["cycles"], "context": e["context"],
                                 "fence": e["fence"]}})
        elif kind == "fence":
            out.append({"ph": "i", "s": "t", "pid": CONTEXTS_PID, "tid": e["context"], "cat": "fence",
                        "name": f"fence {e['fence']} signalled", "ts": _us(e["ts_ns"], origin),
                        "args": {"status": e["status"]}})
        elif kind == "irq":
            out.append({"ph": "i", "s": "t", "pid": CHIP_PID, "tid": IRQ_TID, "cat": "irq", "name": "interrupt",
                        "ts": _us(e["ts_ns"], origin)})
    for core in sorted(cores):
        out.append({"ph": "M", "pid": CHIP_PID, "tid": core, "name": "thread_name", "args": {"name": f"core {core}"}})
    for ctx, name in sorted(contexts.items()):
        out.append({"ph": "M", "pid": CONTEXTS_PID, "tid": ctx, "name": "thread_name", "args": {"name": name}})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"source": "npu-emu driver trace", "clock": "CLOCK_MONOTONIC", "origin_ns": origin}}


# ---- PNG ------------------------------------------------------------------------------

_PALETTE = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188), (0, 172, 193),
            (255, 112, 67), (158, 157, 36), (92, 107, 192), (240, 98, 146)]
ROW, LABEL_W = 22, 72
_INK, _GRID = (40, 40, 40), (225, 225, 225)


def timeline_png(events: Iterable[dict], path: str | Path, width: int = 1200) -> Path:
    """Draw the trace: a row per core (layers coloured by operator) and per context (the
    job's time queued in grey, running in its context's colour); a millisecond scale on top."""
    events = list(events)
    jobs = [e for e in events if e["type"] == "job"]
    layers = [e for e in events if e["type"] == "task"]
    cores = sorted({e["core"] for e in jobs} | {e["core"] for e in layers})
    contexts = sorted({e["context"] for e in jobs})
    if not jobs:
        raise ValueError("the trace holds no jobs to draw")
    start = min(e["submit_ns"] for e in jobs)
    end = max(max(e["end_ns"], e["signal_ns"]) for e in jobs)
    span = max(end - start, 1)
    rows = [f"core {c}" for c in cores] + [f"ctx {c}" for c in contexts]
    height = ROW * (len(rows) + 2) + 4
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    plot_w = width - LABEL_W - 8

    def x_of(ns: int) -> int:
        return LABEL_W + int((ns - start) * plot_w / span)

    def bar(row: int, a: int, b: int, color) -> None:
        y = ROW * (row + 1) + 3
        draw.rectangle((x_of(a), y, max(x_of(b), x_of(a) + 1) - 1, y + ROW - 7), fill=color)
    ms = span / 1e6
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e9) if ms / s <= 10)
    tick = 0.0
    while tick <= ms:
        x = x_of(start + int(tick * 1e6))
        draw.line((x, ROW - 4, x, height - 1), fill=_GRID)
        draw.text((x + 2, 4), f"{tick:g}", fill=_INK, font=font)
        tick += step
    draw.text((4, 4), "ms", fill=_INK, font=font)
    for row, label in enumerate(rows):
        draw.text((4, ROW * (row + 1) + 6), label, fill=_INK, font=font)
    ops = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(sorted({e["name"] for e in layers}))}
    for e in jobs:
        bar(cores.index(e["core"]), e["start_ns"], e["end_ns"], (200, 200, 200))
        row = len(cores) + contexts.index(e["context"])
        bar(row, e["submit_ns"], e["start_ns"], (215, 215, 215))
        bar(row, e["start_ns"], e["end_ns"], _PALETTE[e["context"] % len(_PALETTE)])
    for e in layers:
        bar(cores.index(e["core"]), e["start_ns"], e["end_ns"], ops[e["name"]])
    x, y = 4, ROW * (len(rows) + 1) + 6               # the legend: a swatch and the operator's name
    for name, color in ops.items():
        text_w = int(draw.textlength(name, font=font))
        if x + 14 + text_w > width:
            break
        draw.rectangle((x, y, x + 9, y + 9), fill=color)
        draw.text((x + 14, y), name, fill=_INK, font=font)
        x += 14 + text_w + 12
    path = Path(path)
    img.save(path, format="PNG")
    return path
