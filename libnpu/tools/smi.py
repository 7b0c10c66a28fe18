"""`npu smi` (one-shot device table, or --json) and `npu top` (a refreshing curses view).

Both read the driver's attribute tree (see libnpu.tools.npu_sysfs): utilization comes from
busy_time_us deltas between two samples, per-process rows from /proc/<pid>/fd links to
the device nodes joined with the clients' DRM usage stats.
"""
from __future__ import annotations

import argparse
import contextlib
import curses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from kmd_fuse.uapi.sysfs_layout import recorded_sysroot
from libnpu.portability import default_devroot
from libnpu.tools.errors import start_command
from libnpu.tools.npu_sysfs import Sampler, SysfsError, class_dir, default_sysroot, list_devices, summarize


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} GiB"


def _size_short(n: int) -> str:
    """Like _size, without the space (1.5GiB): for the memory column."""
    return _size(n).replace(" ", "")


def _pct(v: float | None) -> str:
    return "  -" if v is None else f"{v:.0f}%"


def _secs(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def format_table(reports: list[dict[str, Any]]) -> str:
    """The human table both commands print: 80 columns for a node named like /dev/npu0
    (a longer path runs past, as the last column)."""
    lines = [f"{'NPU':>3} {'Model':<10} {'Cores':>5} {'Clock':>9} {'Util':>4} "
             f"{'Memory used/total':<17} {'Jobs':>7} {'Fail':>4} {'Rst':>3} Node"]
    for r in reports:
        mem = f"{_size_short(r['memory_used_bytes'])}/{_size_short(r['memory_total_bytes'])}"
        lines.append(f"{r['index']:>3} {r['model'][:10]:<10} {r['cores']:>5} "
                     f"{r['clock_mhz']:>5} MHz {_pct(r['utilization_pct']):>4} {mem:<17} "
                     f"{r['jobs_completed']:>7} {r['jobs_failed']:>4} {r['reset_count']:>3} {r['node']}")
    lines.append("")
    lines.append("Processes:")
    lines.append(f"{'NPU':>3} {'PID':>7}  {'Command':<16} {'Clients':>7} {'NPU time':>12} {'Util':>4}  Memory")
    rows = 0
    for r in reports:
        for p in r["processes"]:
            rows += 1
            busy = sum(p["engine_ns"].values())
            lines.append(f"{r['index']:>3} {p['pid']:>7}  {p['comm'][:16]:<16} {len(p['clients']):>7} "
                         f"{_secs(busy):>12} {_pct(p['utilization_pct']):>4}  {_size(p['memory_bytes'])}")
    if not rows:
        lines.append("  (no processes are using an NPU)")
    return "\n".join(lines) + "\n"


def _sampler(args: argparse.Namespace, prog: str, err: TextIO) -> Sampler | None:
    """``args``: sysroot, devroot (None: the defaults), procroot and ids, as ``npu smi`` parses them."""
    if args.devroot is None:
        args.devroot = str(default_devroot())
    if args.sysroot is None:
        # what the devroot's own daemons serve comes first: NPU_SYSROOT may name another devroot's tree
        args.sysroot = recorded_sysroot(os.path.realpath(args.devroot)) or default_sysroot(args.devroot)
    names = list_devices(args.sysroot)
    if args.ids:
        missing = sorted(set(args.ids) - {int(n[3:]) for n in names})
        if missing:
            print(f"{prog}: no device npu{missing[0]} under {class_dir(args.sysroot)}", file=err)
            return None
    if not names:
        print(f"{prog}: error: no NPU devices under {class_dir(args.sysroot)}: no driver serves {args.devroot}; "
              f"start one with: {start_command(args.devroot)} (or give --sysroot)", file=err)
        return None
    return Sampler(args.sysroot, args.devroot, args.procroot)


def smi(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`npu smi`: print the device table once (utilization sampled over ``args.interval`` >= 0 s)."""
    out, err = out or sys.stdout, err or sys.stderr
    sampler = _sampler(args, "npu smi", err)
    if sampler is None:
        return 1
    only = set(args.ids) if args.ids else None
    try:
        first = sampler.sample(only)
        prev, cur = None, first
        if args.interval > 0:
            time.sleep(args.interval)
            prev, cur = first, sampler.sample(only)
        reports = summarize(prev, cur)
    except SysfsError as exc:
        print(f"npu smi: {exc}", file=err)
        return 1
    if args.json:
        json.dump({"devices": reports}, out, indent=2)
        out.write("\n")
    else:
        out.write(format_table(reports))
    return 0


def _frames(sampler: Sampler, only: set[int] | None, delay: float, iterations: int | None,
            wait: Callable[[float], bool]) -> Iterator[tuple[int, float, list[dict[str, Any]]]]:
    """(frame number, sample time, reports) every ``delay`` s; ``wait(s)`` sleeps up to s
    seconds and returns False when the viewer asked to quit."""
    prev = sampler.sample(only)
    frames = 0
    while iterations is None or frames < iterations:
        if not wait(delay):
            return
        cur = sampler.sample(only)
        frames += 1
        yield frames, cur.t, summarize(prev, cur)
        prev = cur


def _heading(frame: int, delay: float, keys: str = "") -> str:
    return f"npu top - {time.strftime('%H:%M:%S')}  every {delay:g}s  frame {frame}{keys}\n\n"


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


def _watch_on_screen(stdscr: Any, sampler: Sampler, only: set[int] | None, args: argparse.Namespace) -> None:
    """The curses view: redrawn every frame and on a resize, clipped to the window; q or
    Escape quits."""
    with contextlib.suppress(curses.error):
        curses.curs_set(0)
    text = "npu top - waiting for the first sample\n"

    def draw() -> None:
        height, width = stdscr.getmaxyx()
        stdscr.erase()
        for row, line in enumerate(text.splitlines()[:height]):
            with contextlib.suppress(curses.error):   # writing the bottom-right cell raises
                stdscr.addnstr(row, 0, line, width)
        stdscr.refresh()

    def wait(seconds: float) -> bool:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            stdscr.timeout(max(1, int(left * 1000)))
            key = stdscr.getch()
            if key in (ord("q"), ord("Q"), 27):
                return False
            if key == curses.KEY_RESIZE:
                draw()
        return True
    draw()
    for frame, _, reports in _frames(sampler, only, args.delay, args.iterations, wait):
        text = _heading(frame, args.delay, "   (q quits)") + format_table(reports)
        draw()


def top(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`npu top`: refresh the table every ``args.delay`` > 0 s until q, Ctrl-C or
    ``args.iterations`` frames; on a terminal a curses view, else frames appended (-b, --json)."""
    out, err = out or sys.stdout, err or sys.stderr
    sampler = _sampler(args, "npu top", err)
    if sampler is None:
        return 1
    only = set(args.ids) if args.ids else None
    try:
        if not args.batch and not args.json and out is sys.stdout and out.isatty() and sys.stdin.isatty():
            os.environ.setdefault("ESCDELAY", "25")      # Escape quits at once, not after curses' 1 s
            curses.wrapper(_watch_on_screen, sampler, only, args)
            return 0
        for frame, t, reports in _frames(sampler, only, args.delay, args.iterations, _sleep):
            if args.json:
                out.write(json.dumps({"frame": frame, "t": round(t, 6), "devices": reports}) + "\n")
            else:
                out.write(("" if frame == 1 else "\n") + _heading(frame, args.delay) + format_table(reports))
            out.flush()
    except SysfsError as exc:
        print(f"npu top: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
