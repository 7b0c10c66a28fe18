"""The device's trace as people look at it: a Chrome/Perfetto trace-event file and a PNG.

The driver records (kmd_fuse/profiling.py) and serves its events as JSON lines in the
attribute tree's ``trace`` file; this module collects them:

- ``chrome_trace(events)``: the JSON trace-event format (opens in ui.perfetto.dev and
  chrome://tracing).  Process "npuN chip" has one track per core, where each job is a
  slice (``ctx C fence F``) with its layers nested in it, and an "interrupts" track of
  instants; process "npuN contexts" has one track per context (named with its pid and
  command), where each job is a slice from SUBMIT to its fence with "queued" and
  "running" nested in it, and each fence signalled an instant.
- ``timeline_png(events, path)``: the same tracks as rows of coloured bars, one colour
  per operator (named in a legend), written with zlib (no plotting library needed).
"""
from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

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

_FONT = {  # 3x5 glyphs, one row per string, '#' = ink
    "0": ["###", "#.#", "#.#", "#.#", "###"], "1": [".#.", "##.", ".#.", ".#.", "###"],
    "2": ["##.", "..#", ".#.", "#..", "###"], "3": ["##.", "..#", ".#.", "..#", "##."],
    "4": ["#.#", "#.#", "###", "..#", "..#"], "5": ["###", "#..", "##.", "..#", "##."],
    "6": [".##", "#..", "###", "#.#", "###"], "7": ["###", "..#", ".#.", ".#.", ".#."],
    "8": ["###", "#.#", "###", "#.#", "###"], "9": ["###", "#.#", "###", "..#", "##."],
    "C": [".##", "#..", "#..", "#..", ".##"], "O": [".#.", "#.#", "#.#", "#.#", ".#."],
    "R": ["##.", "#.#", "##.", "#.#", "#.#"], "E": ["###", "#..", "##.", "#..", "###"],
    "T": ["###", ".#.", ".#.", ".#.", ".#."], "X": ["#.#", "#.#", ".#.", "#.#", "#.#"],
    "M": ["#.#", "###", "###", "#.#", "#.#"], "S": [".##", "#..", ".#.", "..#", "##."],
    "I": ["###", ".#.", ".#.", ".#.", "###"], "Q": [".#.", "#.#", "#.#", "##.", ".##"],
    "A": [".#.", "#.#", "###", "#.#", "#.#"], "B": ["##.", "#.#", "##.", "#.#", "##."],
    "D": ["##.", "#.#", "#.#", "#.#", "##."], "F": ["###", "#..", "##.", "#..", "#.."],
    "G": [".##", "#..", "#.#", "#.#", ".##"], "H": ["#.#", "#.#", "###", "#.#", "#.#"],
    "J": ["..#", "..#", "..#", "#.#", ".#."], "K": ["#.#", "#.#", "##.", "#.#", "#.#"],
    "L": ["#..", "#..", "#..", "#..", "###"], "N": ["##.", "#.#", "#.#", "#.#", "#.#"],
    "P": ["##.", "#.#", "##.", "#..", "#.."], "U": ["#.#", "#.#", "#.#", "#.#", "###"],
    "V": ["#.#", "#.#", "#.#", "#.#", ".#."], "W": ["#.#", "#.#", "###", "###", "#.#"],
    "Y": ["#.#", "#.#", ".#.", ".#.", ".#."], "Z": ["###", "..#", ".#.", "#..", "###"],
    "_": ["...", "...", "...", "...", "###"], "-": ["...", "...", "###", "...", "..."],
    ".": ["...", "...", "...", "...", ".#."], " ": ["...", "...", "...", "...", "..."],
}
_PALETTE = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188), (0, 172, 193),
            (255, 112, 67), (158, 157, 36), (92, 107, 192), (240, 98, 146)]
ROW, LABEL_W, SCALE = 22, 64, 2


def _text(img: np.ndarray, x: int, y: int, text: str, color=(40, 40, 40)) -> None:
    for ch in text.upper():
        glyph = _FONT.get(ch, _FONT[" "])
        for gy, row in enumerate(glyph):
            for gx, ink in enumerate(row):
                if ink == "#":
                    img[y + gy * SCALE:y + (gy + 1) * SCALE, x + gx * SCALE:x + (gx + 1) * SCALE] = color
        x += 4 * SCALE


def _png(img: np.ndarray) -> bytes:
    height, width, _ = img.shape
    raw = b"".join(b"\0" + img[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def timeline_png(events: Iterable[dict], path: str | Path, width: int = 1200) -> Path:
    """Draw the trace: a row per core (layers coloured by operator) and per context (the
    job's time queued in grey, running in its context's colour); a millisecond scale on top."""
    events = list(events)
    jobs = [e for e in events if e["type"] == "job"]
    layers = [e for e in events if e["type"] == "task"]
    cores = sorted({e["core"] for e in jobs})
    contexts = sorted({e["context"] for e in jobs})
    if not jobs:
        raise ValueError("the trace holds no jobs to draw")
    start = min(e["submit_ns"] for e in jobs)
    end = max(max(e["end_ns"], e["signal_ns"]) for e in jobs)
    span = max(end - start, 1)
    rows = [("CORE " + str(c), c) for c in cores] + [("CTX " + str(c), c) for c in contexts]
    height = ROW * (len(rows) + 2) + 4
    img = np.full((height, width, 3), 255, np.uint8)
    plot_w = width - LABEL_W - 8

    def x_of(ns: int) -> int:
        return LABEL_W + int((ns - start) * plot_w / span)

    def bar(row: int, a: int, b: int, color) -> None:
        y = ROW * (row + 1) + 3
        img[y:y + ROW - 6, x_of(a):max(x_of(b), x_of(a) + 1)] = color
    ms = span / 1e6
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e9) if ms / s <= 10)
    tick = 0.0
    while tick <= ms:
        x = x_of(start + int(tick * 1e6))
        img[ROW - 4:height, x] = (225, 225, 225)
        _text(img, x + 2, 4, f"{tick:g}")
        tick += step
    _text(img, 4, 4, "MS")
    for row, (label, _) in enumerate(rows):
        _text(img, 4, ROW * (row + 1) + 6, label)
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
        if x + 16 + 4 * SCALE * len(name) > width:
            break
        img[y:y + 5 * SCALE, x:x + 10] = color
        _text(img, x + 14, y, name)
        x += 14 + 4 * SCALE * len(name) + 12
    path = Path(path)
    path.write_bytes(_png(img))
    return path
