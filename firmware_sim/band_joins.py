"""Row bands of one layer joined back into one task, for a graph job replayed on one thread.

The compiler splits a large layer into independent tasks so that the cores of a graph job
can share it (``libnpu/compiler/tiling.py``: a convolution into bands of output rows, a
QUANTIZE or DEQUANTIZE into runs of elements). When the emulator replays such a job on the
core's thread alone (``graph_threads``), each band pays a kernel call's fixed cost (its
scratch memory, its requantization tables and tiled filter: ~1 us; VWW's 26 extra tasks
cost 10% more CPU than its one-core loadable). So the one-thread form of the plan runs two
tasks adjacent in the run order as one when the descriptors say they are parts of one
layer: the same operator with every field equal but the ones a band moves, the second
starting where the first ends, in its output and in the input rows its first output row
reads, with no top padding of its own and the first band not cut short at its last input
row unless the join ends there too. Every output element then sums the same taps over the
same input rows with the same zero-point padding, so the bytes are the same. The joined
descriptor writes exactly what the bands write and reads what they read, plus the input
rows between the bands that neither reads (a stride-2 1x1 convolution's bands skip one:
ResNet-8's shortcuts), which the layer's own one-core task reads too: those join only if
the context's page table lets the chip read them when the plan is made (``readable``;
the plan is dropped at any unmapping in the context), so a join never faults where its
bands would not (a client's descriptors are joined by the same rule, and the chip's own
handler checks the join as any descriptor). The timing model, the profile and the
two-thread form keep the bands.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from firmware_sim.dma import DmaEngine, IommuFault
from npu_hw import ops

__all__ = ["join", "join_steps", "readable"]

Readable = Callable[[int, int], bool]     # (IOVA, bytes): whether the chip may read them

_ROWS = (ops.OP_CONV_2D, ops.OP_DEPTHWISE_CONV_2D)
_RUNS = (ops.OP_QUANTIZE, ops.OP_DEQUANTIZE)
_ROW_FIELDS = ("input", "output", "in_shape", "out_shape", "padding")   # what a row band moves
_RUN_FIELDS = ("input", "output", "count")


def readable(dma: DmaEngine) -> Readable:
    """Whether the context bound to ``dma`` lets the chip read a range, now."""
    def check(iova: int, nbytes: int) -> bool:
        try:
            dma.translate(iova, nbytes, write=False)
        except IommuFault:
            return False
        return True
    return check


def join(opcode: int, first: np.void, second: np.void, can_read: Readable | None = None) -> np.void | None:
    """The descriptor doing what ``first`` then ``second`` do as one task, or None; rows
    between two bands that neither reads join only where ``can_read`` says so."""
    if opcode in _ROWS:
        return _join_rows(first, second, can_read)
    if opcode in _RUNS:
        return _join_runs(opcode, first, second)
    return None


def join_steps(steps: list[tuple[int, Callable[[], None]]], descs: dict[int, tuple[int, np.void]],
               deps: list[list[int]], make_step: Callable[[int, np.void], Callable[[], None]],
               can_read: Readable | None = None) -> list[tuple[int, Callable[[], None]]] | None:
    """``steps`` (in run order) with each run of joinable bands made one step by ``make_step``
    (opcode, joined descriptor); None when no two join. Tasks join only with the same
    dependencies (the parts of one layer have its dependencies, and so none follows another);
    ``can_read``: as for :func:`join`."""
    out: list[tuple[int, Callable[[], None]]] = []
    joined: tuple[int, int, np.void] | None = None      # (first task index, opcode, descriptor so far)
    any_join = False
    pending: list[tuple[int, Callable[[], None]]] = []  # the steps the current join stands for
    for index, step in steps:
        opcode, desc = descs[index]
        if joined is not None and joined[1] == opcode and set(deps[joined[0]]) == set(deps[index]):
            both = join(opcode, joined[2], desc, can_read)
            if both is not None:
                joined = (joined[0], opcode, both)
                pending.append((index, step))
                continue
        _flush(out, joined, pending, make_step)
        any_join = any_join or len(pending) > 1
        joined, pending = (index, opcode, desc), [(index, step)]
    _flush(out, joined, pending, make_step)
    any_join = any_join or len(pending) > 1
    return out if any_join else None


def _flush(out, joined, pending, make_step) -> None:
    if not pending:
        return
    if len(pending) == 1:
        out.append(pending[0])
    else:
        out.append((joined[0], make_step(joined[1], joined[2])))


def _same_but(first: np.void, second: np.void, fields: tuple[str, ...]) -> bool:
    names = first.dtype.names
    assert names is not None
    return all(np.array_equal(first[name], second[name]) for name in names if name not in fields)


def _record(desc: np.void) -> np.ndarray:
    """A writable one-record copy of a descriptor."""
    return np.array([desc], dtype=desc.dtype)


def _join_rows(first: np.void, second: np.void, can_read: Readable | None) -> np.void | None:
    flags = int(first["flags"])
    if flags & ops.OPF_INT16_INPUT or not _same_but(first, second, _ROW_FIELDS):
        return None
    size = 2 if flags & ops.OPF_INT16 else 1
    (n, h_a, w, cin), (n2, h_b, w2, cin2) = (tuple(int(v) for v in d["in_shape"]) for d in (first, second))
    (on, o_a, ow, cout), (on2, o_b, ow2, cout2) = (tuple(int(v) for v in d["out_shape"]) for d in (first, second))
    if (n, w, cin, on, ow, cout) != (n2, w2, cin2, on2, ow2, cout2) or n != 1 or on != 1:
        return None
    if int(first["padding"][1]) != int(second["padding"][1]) or int(second["padding"][0]) != 0:
        return None
    in_row, out_row = w * cin * size, ow * cout * size
    if in_row == 0 or out_row == 0 or int(second["output"]) != int(first["output"]) + o_a * out_row:
        return None
    moved = int(second["input"]) - int(first["input"])
    pad = int(first["padding"][0])
    stride, dilation, kh = int(first["stride"][0]), int(first["dilation"][0]), int(first["filter_hw"][0])
    if moved < 0 or moved % in_row or moved // in_row != o_a * stride - pad:
        return None
    gap = moved - h_a * in_row                    # rows between the bands, which neither reads
    if gap > 0 and (can_read is None or not can_read(int(first["input"]) + h_a * in_row, gap)):
        return None
    rows = moved // in_row + h_b                  # the join's input rows
    last_read = (o_a - 1) * stride - pad + (kh - 1) * dilation
    if rows < h_a or (last_read >= h_a and rows != h_a):
        return None                               # the first band was cut short where the join is not
    joined = _record(first)
    joined["in_shape"][0, 1] = rows
    joined["out_shape"][0, 1] = o_a + o_b
    return joined[0]


def _join_runs(opcode: int, first: np.void, second: np.void) -> np.void | None:
    if not _same_but(first, second, _RUN_FIELDS):
        return None
    narrow = 2 if int(first["flags"]) & ops.OPF_INT16 else 1
    size_in, size_out = (4, narrow) if opcode == ops.OP_QUANTIZE else (narrow, 4)
    count = int(first["count"])
    if (int(second["input"]) != int(first["input"]) + count * size_in
            or int(second["output"]) != int(first["output"]) + count * size_out):
        return None
    joined = _record(first)
    joined["count"] = count + int(second["count"])
    return joined[0]
