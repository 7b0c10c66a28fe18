"""`npu smi` (one-shot device table, or --json) and `npu top` (a refreshing view).

Both read the driver's attribute tree (see libnpu.tools.npu_sysfs): utilization comes from
busy_time_us deltas between two samples, per-process rows from /proc/<pid>/fd links to
the device nodes joined with the clients' DRM usage stats.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
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


def _pct(v: float | None) -> str:
    return "  -" if v is None else f"{v:.0f}%"


def _secs(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def format_table(reports: list[dict[str, Any]]) -> str:
    """The human table both commands print."""
    lines = [f"{'NPU':>3}  {'Model':<14} {'Cores':>5} {'Clock':>9} {'Util':>5}  "
             f"{'Memory used / total':<23} {'Jobs':>8} {'Failed':>6} {'Resets':>6}  Node"]
    for r in reports:
        mem = f"{_size(r['memory_used_bytes'])} / {_size(r['memory_total_bytes'])}"
        lines.append(f"{r['index']:>3}  {r['model'][:14]:<14} {r['cores']:>5} "
                     f"{r['clock_mhz']:>5} MHz {_pct(r['utilization_pct']):>5}  {mem:<23} "
                     f"{r['jobs_completed']:>8} {r['jobs_failed']:>6} {r['reset_count']:>6}  {r['node']}")
    lines.append("")
    lines.append("Processes:")
    lines.append(f"{'NPU':>3}  {'PID':>7}  {'Command':<16} {'Clients':>7} {'NPU time':>12} {'Util':>5}  Memory")
    rows = 0
    for r in reports:
        for p in r["processes"]:
            rows += 1
            busy = sum(p["engine_ns"].values())
            lines.append(f"{r['index']:>3}  {p['pid']:>7}  {p['comm'][:16]:<16} {len(p['clients']):>7} "
                         f"{_secs(busy):>12} {_pct(p['utilization_pct']):>5}  {_size(p['memory_bytes'])}")
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


def top(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`npu top`: refresh the table every ``args.delay`` > 0 s until interrupted or ``args.iterations`` frames."""
    out, err = out or sys.stdout, err or sys.stderr
    sampler = _sampler(args, "npu top", err)
    if sampler is None:
        return 1
    only = set(args.ids) if args.ids else None
    redraw = not args.batch and not args.json and out.isatty()
    frames = 0
    try:
        prev = sampler.sample(only)
        while args.iterations is None or frames < args.iterations:
            time.sleep(args.delay)
            cur = sampler.sample(only)
            reports = summarize(prev, cur)
            prev = cur
            frames += 1
            if args.json:
                out.write(json.dumps({"frame": frames, "t": round(cur.t, 6), "devices": reports}) + "\n")
            else:
                head = (f"npu top - {time.strftime('%H:%M:%S')}  every {args.delay:g}s  "
                        f"frame {frames}\n\n")
                out.write(("\x1b[H\x1b[2J" if redraw else ("" if frames == 1 else "\n")) + head
                          + format_table(reports))
            out.flush()
    except SysfsError as exc:
        print(f"npu top: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        pass
    return 0

