"""Tiling: large layers split into independent tasks, so that one inference has work for
several cores (the chip places a graph job's tasks by their dependencies: docs/hardware.md,
*Task graphs*).

A layer whose estimated time (its MACs and bytes at the standard profile's rates) reaches
``MIN_CYCLES`` becomes ``tiles`` tasks:

- CONV_2D and DEPTHWISE_CONV_2D of batch 1: bands of output rows, each computed from the
  input rows it reads: its input starts at the band's first input row (the top padding what
  is left of it), its output at the band's first output row. Every output pixel sums the
  same taps with the same zero point padding as in the whole layer, so the bytes are the same;
- QUANTIZE and DEQUANTIZE: runs of elements (each element is converted alone).

Each part keeps the layer's dependencies, and a task that followed the layer follows every
part of it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from npu_hw import ops, profiles, tasks

from ..loadable import Loadable, Task

__all__ = ["MIN_CYCLES", "split_layers"]

# Below this a part's per-task overhead (32 cycles on the standard profile) and the
# emulator's per-task call are not worth a second core.
MIN_CYCLES = 128
_RATES = profiles.PROFILES[profiles.DEFAULT_PROFILE]
_ROWS = {ops.OP_CONV_2D: ops.CONV_2D, ops.OP_DEPTHWISE_CONV_2D: ops.DEPTHWISE_CONV_2D}
_RUNS = {ops.OP_QUANTIZE: ops.QUANTIZE, ops.OP_DEQUANTIZE: ops.DEQUANTIZE}
RUN_ALIGN = 64            # elements: a run starts on a cache line of int8 output


def split_layers(loadable: Loadable, tiles: int) -> Loadable:
    """``loadable`` with its large convolutions in ``tiles`` row bands (itself if none is)."""
    if tiles <= 1:
        return loadable
    bands = [_bands(task, tiles) for task in loadable.tasks]
    if all(len(b) == 1 for b in bands):
        return loadable
    first: list[int] = []          # old index -> its first new index
    out: list[Task] = []
    for parts in bands:
        first.append(len(out))
        out.extend(parts)
    renumbered = []
    for old, parts in enumerate(bands):
        for part in parts:
            deps = sorted({i for d in loadable.tasks[old].deps for i in range(first[d], first[d] + len(bands[d]))})
            renumbered.append(dataclasses.replace(part, deps=deps))
    first.append(len(out))         # a host step after the last task stays after it
    host_steps = [dataclasses.replace(s, after_task=first[s.after_task]) for s in loadable.host_steps]
    return dataclasses.replace(loadable, tasks=renumbered, host_steps=host_steps,
                               metadata=dict(loadable.metadata, tiles=tiles))


def _bands(task: Task, tiles: int) -> list[Task]:
    if max(task.macs / _RATES.macs_per_cycle, task.bytes_moved / _RATES.dma_bytes_per_cycle) < MIN_CYCLES:
        return [task]
    if task.opcode in _RUNS:
        return _runs(task, tiles)
    spec = _ROWS.get(task.opcode)
    if spec is None or len(task.payload) != spec.size:
        return [task]
    desc = np.frombuffer(task.payload, spec.dtype)[0]
    n, h, w, cin = (int(v) for v in desc["in_shape"])
    _, oh, ow, cout = (int(v) for v in desc["out_shape"])
    if n != 1 or oh < tiles:
        return [task]
    kh = int(desc["filter_hw"][0])
    stride, dilation, pad = int(desc["stride"][0]), int(desc["dilation"][0]), int(desc["padding"][0])
    act = 2 if int(desc["flags"]) & ops.OPF_INT16 else 1
    at = {name: _offset(spec, name) for name in ("input", "output")}
    relocs = {r.offset: r for r in task.relocs}
    if not all(at[name] in relocs for name in at):
        return [task]
    parts = []
    for k in range(tiles):
        r0, r1 = oh * k // tiles, oh * (k + 1) // tiles
        top = r0 * stride - pad                                  # the band's first input row (may be < 0)
        lo = min(max(top, 0), h)
        hi = min(max((r1 - 1) * stride - pad + (kh - 1) * dilation + 1, lo), h)
        band = desc.copy()
        band["in_shape"] = (1, hi - lo, w, cin)
        band["out_shape"] = (1, r1 - r0, ow, cout)
        band["padding"] = (lo - top, int(desc["padding"][1]))
        moved = {at["input"]: lo * w * cin * act, at["output"]: r0 * ow * cout * act}
        band_relocs = [dataclasses.replace(r, addend=r.addend + moved[r.offset]) if r.offset in moved else r
                       for r in task.relocs]
        parts.append(dataclasses.replace(
            task, name=f"{task.name}#rows{r0}-{r1}", payload=band.tobytes(), relocs=band_relocs,
            macs=task.macs * (r1 - r0) // oh, meta=dict(task.meta, layer=task.name, band=[r0, r1])))
    return parts


def _runs(task: Task, tiles: int) -> list[Task]:
    """QUANTIZE / DEQUANTIZE in ``tiles`` runs of elements."""
    spec = _RUNS[task.opcode]
    if len(task.payload) != spec.size:
        return [task]
    desc = np.frombuffer(task.payload, spec.dtype)[0]
    count, int16 = int(desc["count"]), bool(int(desc["flags"]) & ops.OPF_INT16)
    narrow = 2 if int16 else 1
    size_in, size_out = (4, narrow) if task.opcode == ops.OP_QUANTIZE else (narrow, 4)
    at = {_offset(spec, "input"): size_in, _offset(spec, "output"): size_out}
    if count < tiles * RUN_ALIGN or not all(offset in {r.offset for r in task.relocs} for offset in at):
        return [task]
    parts = []
    for k in range(tiles):
        e0 = count * k // tiles // RUN_ALIGN * RUN_ALIGN
        e1 = count if k == tiles - 1 else count * (k + 1) // tiles // RUN_ALIGN * RUN_ALIGN
        run = desc.copy()
        run["count"] = e1 - e0
        relocs = [dataclasses.replace(r, addend=r.addend + e0 * at[r.offset]) if r.offset in at else r
                  for r in task.relocs]
        parts.append(dataclasses.replace(
            task, name=f"{task.name}#{e0}-{e1}", payload=run.tobytes(), relocs=relocs,
            bytes_moved=task.bytes_moved * (e1 - e0) // count, meta=dict(task.meta, layer=task.name, run=[e0, e1])))
    return parts


def _offset(spec: tasks.TaskType, field: str) -> int:
    """Where ``field`` is in the descriptor (a relocation's offset)."""
    fields = spec.dtype.fields
    assert fields is not None
    return int(fields[field][1])
