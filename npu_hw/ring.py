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

RING_FLAG_PROFILE = 0x1   # OP_JOB: record the job's per-task timestamps in the core's profile queue

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


# Profile queue (one per core, PROFILE_ENTRIES records): for a job whose ring entry has
# RING_FLAG_PROFILE the core appends one PROFILE_TASK record per task it ran, then one
# PROFILE_JOB record, then moves PQ_TAIL, all before the job's completion; the KMD reads
# from PQ_HEAD.  Records that do not fit are dropped (PQ_DROPPED counts them), never waited for.
PROFILE_ENTRIES = 4096
PROFILE_TASK = 1
PROFILE_JOB = 2
PROFILE_QUEUE_JOB = 3   # PROFILE_JOB of a user-queue job whose entry asked for it (queues.ENTRY_PROFILE)
PROFILE_RECORD = np.dtype([
    ("job_id", "<u8"),
    ("index", "<u4"),           # PROFILE_TASK: the task's index in the command buffer; PROFILE_JOB: tasks run
    ("opcode", "<u2"),          # PROFILE_TASK: the task's opcode; PROFILE_JOB: the job's errno (0: done)
    ("kind", "u1"),             # PROFILE_TASK or PROFILE_JOB
    ("core", "u1"),             # PROFILE_TASK: the core the task was placed on (a graph job's may be
                                # another than the job's, docs/hardware.md, Task graphs); else the job's
    ("start_ns", "<u8"),        # CLOCK_MONOTONIC
    ("end_ns", "<u8"),
    ("cycles", "<u8"),          # simulated cycles (PROFILE_JOB: the job's, as in its completion)
], align=True)
assert PROFILE_RECORD.itemsize == 40
PROFILE_RECORD_STRUCT = struct.Struct("<QIHBBQQQ")
assert PROFILE_RECORD_STRUCT.size == PROFILE_RECORD.itemsize


def ring_next(index: int, entries: int) -> int:
    return (index + 1) % entries


def ring_prev(index: int, entries: int) -> int:
    return (index - 1) % entries


def ring_full(head: int, tail: int, entries: int) -> bool:
    return (tail + 1) % entries == head
