"""``npu compile --report`` and ``npu inspect MODEL``: what the compiler decided, in sections.

A report is a list of sections, each a small function of one :class:`ReportContext`
giving its text lines and its JSON value; a new section (e.g. per-layer accuracy) is one
function and one row of :data:`SECTIONS`. The placement sections show, like the Edge TPU
compiler's log or OpenVINO's ``query_model``, where each operator of the source model
runs and, for a CPU one, why.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libnpu.compiler.placement import CPU, NPU, Placement
from libnpu.loadable import Loadable

__all__ = ["ReportContext", "Section", "SECTIONS", "build_report", "placement_summary"]


@dataclass
class ReportContext:
    """What the sections report on."""
    model: Path
    placements: list[Placement]
    loadable: Loadable | None = None          # the compiled model, when there is one
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    name: str                                  # its key in the JSON report
    build: Callable[[ReportContext], tuple[list[str], Any]]   # (text lines, JSON value); no lines: skipped


def _placement(ctx: ReportContext) -> tuple[list[str], Any]:
    width = max([len(p.op) for p in ctx.placements] + [8])
    lines = [f"placement of {ctx.model.name}'s operators:",
             f"  {'op':>4}  {'operator':<{width}}  device  reason"]
    lines += [f"  {p.index:>4}  {p.op:<{width}}  {p.device:<6}  {p.reason}".rstrip() for p in ctx.placements]
    return lines, [dict(index=p.index, op=p.op, device=p.device, reason=p.reason) for p in ctx.placements]


def placement_summary(placements: list[Placement]) -> dict[str, Any]:
    """Counts: operators on each device, NPU partitions (runs in source order), CPU operators by type."""
    partitions = sum(1 for i, p in enumerate(placements)
                     if p.device == NPU and (i == 0 or placements[i - 1].device != NPU))
    cpu = Counter(p.op for p in placements if p.device == CPU)
    return dict(npu_ops=sum(p.device == NPU for p in placements), npu_partitions=partitions,
                cpu_ops=sum(cpu.values()), cpu_operators=dict(sorted(cpu.items())))


def _summary(ctx: ReportContext) -> tuple[list[str], Any]:
    s = placement_summary(ctx.placements)
    line = f"summary: {s['npu_ops']} ops on the NPU in {s['npu_partitions']} partition(s), {s['cpu_ops']} on the CPU"
    if s["cpu_operators"]:
        line += " (" + ", ".join(f"{op} x{n}" for op, n in s["cpu_operators"].items()) + ")"
    lines = [line]
    if ctx.loadable is not None and ctx.loadable.host_steps:
        jobs = sum(1 for tasks, _ in ctx.loadable.partitions() if tasks)
        lines.append(f"  one inference: {jobs} job(s) on the chip, {len(ctx.loadable.host_steps)} host step(s) "
                     "in between")
    return lines, s


SECTIONS: list[Section] = [
    Section("placement", _placement),
    Section("summary", _summary),
]


def build_report(ctx: ReportContext) -> tuple[str, dict[str, Any]]:
    """Every section's text (joined) and the JSON report (section name -> value)."""
    text: list[str] = []
    data: dict[str, Any] = {}
    for section in SECTIONS:
        lines, value = section.build(ctx)
        text += lines
        data[section.name] = value
    return "\n".join(text), data
