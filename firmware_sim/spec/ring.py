"""Command ring and completion queue formats (one of each per core).

The KMD writes ring entries at RING_TAIL and bumps the tail and DOORBELL
registers; the core consumes entries at RING_HEAD.  Indices wrap at
RING_ENTRIES; one slot stays empty so that head == tail means "empty" and
(tail + 1) % entries == head means "full" (back-pressure for the KMD).

For every JOB entry the core writes exactly one completion at CQ_TAIL and raises
its interrupt.  A core never consumes a ring entry while its completion queue is
full, so completions are never dropped.
"""
import struct

import numpy as np

DEFAULT_RING_ENTRIES = 256

OP_JOB = 1          # run the command buffer of a job
OP_INVALIDATE = 2   # drop cached translations/mappings of asid (bo_id 0: all of them)

RING_ENTRY = np.dtype([
    ("opcode", "<u4"),
    ("asid", "<u4"),
    ("job_id", "<u8"),
    ("cmd_iova", "<u8"),
    ("cmd_size", "<u4"),
    ("timeout_ms", "<u4"),
    ("bo_id", "<u4"),        # OP_INVALIDATE only
    ("flags", "<u4"),
    ("reserved", "<u8", 3),
], align=True)
assert RING_ENTRY.itemsize == 64
# The same layout for fast packing on the hot path (field order as above).
RING_ENTRY_STRUCT = struct.Struct("<IIQQIIII24x")
assert RING_ENTRY_STRUCT.size == RING_ENTRY.itemsize

COMPLETION = np.dtype([
    ("job_id", "<u8"),
    ("status", "<i4"),          # 0 or -errno (EFAULT: IOMMU fault, EIO: bus error, ETIMEDOUT, EINVAL: bad descriptor)
    ("core", "<u4"),
    ("cycles", "<u8"),          # simulated cycles
    ("device_time_ns", "<u8"),  # cycles at the configured clock
    ("fault_iova", "<u8"),      # faulting device address, when status is EFAULT
    ("task_index", "<u4"),      # task that failed (or count of tasks run)
    ("reserved", "<u4"),
    ("exec_ns", "<u8"),         # wall-clock ns the core spent on the job (utilization)
], align=True)
assert COMPLETION.itemsize == 56
COMPLETION_STRUCT = struct.Struct("<QiIQQQIIQ")
assert COMPLETION_STRUCT.size == COMPLETION.itemsize


def ring_next(index: int, entries: int) -> int:
    return (index + 1) % entries


def ring_prev(index: int, entries: int) -> int:
    return (index - 1) % entries


def ring_full(head: int, tail: int, entries: int) -> bool:
    return (tail + 1) % entries == head
