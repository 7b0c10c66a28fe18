"""Command-buffer format: a packed sequence of task descriptors.

A job's command buffer (in DMA memory, named by SUBMIT) is a list of task
descriptors laid end to end.  Every descriptor is 8-byte aligned and starts with
the common header (opcode u16, size u16 = the whole descriptor's bytes, flags
u32); the rest is the task type's fields.  Operands are device addresses
(IOVAs in the submitting context) that the chip's DMA engine translates and
checks.  Tasks run in order, unless the buffer starts with a ``TASK_GRAPH``
descriptor: then each task runs once the tasks its ``DEPENDS`` descriptors name are
done, on whichever of the job's cores is free (docs/hardware.md, *Task graphs*).

Each task type is one numpy structured dtype registered with ``register_task``;
compute operators beyond the ones here live in ``npu_hw.ops``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

HEADER_FIELDS = [("opcode", "<u2"), ("size", "<u2"), ("flags", "<u4")]
HEADER = np.dtype(HEADER_FIELDS)
_HEADER_STRUCT = struct.Struct("<HHI")


@dataclass(frozen=True)
class TaskType:
    """A task descriptor format."""

    opcode: int
    name: str
    dtype: np.dtype

    @property
    def size(self) -> int:
        return self.dtype.itemsize


TASK_TYPES: dict[int, TaskType] = {}
TASK_BY_NAME: dict[str, TaskType] = {}


def register_task(opcode: int, name: str, fields: list[tuple]) -> TaskType:
    """Define a task type: ``fields`` follow the common header."""
    if opcode in TASK_TYPES or name in TASK_BY_NAME:
        raise ValueError(f"task {name} / opcode {opcode:#x} defined twice")
    dtype = np.dtype(HEADER_FIELDS + list(fields), align=True)
    if dtype.itemsize % 8:
        dtype = np.dtype({"names": dtype.names, "formats": [dtype.fields[n][0] for n in dtype.names],
                          "offsets": [dtype.fields[n][1] for n in dtype.names],
                          "itemsize": -(-dtype.itemsize // 8) * 8})
    if dtype.itemsize > 0xFFFF:
        raise ValueError(f"task {name} descriptor is too large")
    task = TaskType(opcode, name, dtype)
    TASK_TYPES[opcode] = task
    TASK_BY_NAME[name] = task
    return task


def encode_task(name: str, flags: int = 0, **fields) -> bytes:
    """One descriptor's bytes; unspecified fields are zero."""
    task = TASK_BY_NAME[name]
    record = np.zeros((), dtype=task.dtype)
    record["opcode"] = task.opcode
    record["size"] = task.size
    record["flags"] = flags
    for key, value in fields.items():
        if key not in task.dtype.names or key in ("opcode", "size"):
            raise KeyError(f"task {name} has no field {key!r}")
        record[key] = value
    return record.tobytes()


class CommandBufferError(ValueError):
    """A malformed command buffer (the job fails with EINVAL)."""

    def __init__(self, offset: int, message: str):
        super().__init__(f"command buffer offset {offset}: {message}")
        self.offset = offset


def decode_tasks(buf: np.ndarray | bytes):
    """Yield (offset, TaskType, record) for each descriptor of a command buffer."""
    data = memoryview(buf).cast("B")
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER.itemsize:
            raise CommandBufferError(offset, "truncated descriptor header")
        opcode, size, _ = _HEADER_STRUCT.unpack_from(data, offset)
        task = TASK_TYPES.get(opcode)
        if task is None:
            raise CommandBufferError(offset, f"unknown opcode {opcode:#x}")
        if size != task.size:
            raise CommandBufferError(offset, f"{task.name} size {size}, expected {task.size}")
        if len(data) - offset < task.size:
            raise CommandBufferError(offset, f"truncated {task.name} descriptor")
        yield offset, task, np.frombuffer(data, task.dtype, count=1, offset=offset)[0]
        offset += task.size


# ---- the task types of the base chip ----

OP_NOP = 0x00
OP_DMA_COPY = 0x01
OP_FULLY_CONNECTED = 0x02
OP_TASK_GRAPH = 0x03
OP_DEPENDS = 0x04

NOP = register_task(OP_NOP, "NOP", [])

# A job scheduled by its dependency graph. TASK_GRAPH, first in the buffer, says so; each
# task then follows exactly the tasks named by the DEPENDS descriptors right before it
# (none: it may start at once). Neither is a task: task indices (dependencies, profile
# records, a failing task) count only the other descriptors.
TASK_GRAPH = register_task(OP_TASK_GRAPH, "TASK_GRAPH", [
    ("cores", "<u4"),         # cores the job may use (0: all the chip has; more: clamped to them)
    ("reserved", "<u4"),      # must be 0
])
DEPENDS_PER_DESCRIPTOR = 7
DEPENDS = register_task(OP_DEPENDS, "DEPENDS", [
    ("count", "<u4"),         # 1..DEPENDS_PER_DESCRIPTOR entries of ``tasks`` used
    ("tasks", "<u4", (DEPENDS_PER_DESCRIPTOR,)),   # indices of tasks the next task follows
])
GRAPH_OPCODES = frozenset((OP_TASK_GRAPH, OP_DEPENDS))


def encode_graph(deps: list[list[int]], payloads: list[bytes], cores: int = 0) -> list[bytes]:
    """A graph job's descriptors: TASK_GRAPH, then each task's payload after the DEPENDS
    descriptors naming ``deps[i]`` (as many as it takes). Each item is 8-byte aligned."""
    out = [encode_task("TASK_GRAPH", cores=cores)]
    for task_deps, payload in zip(deps, payloads, strict=True):
        for at in range(0, len(task_deps), DEPENDS_PER_DESCRIPTOR):
            chunk = list(task_deps[at:at + DEPENDS_PER_DESCRIPTOR])
            out.append(encode_task("DEPENDS", count=len(chunk),
                                   tasks=chunk + [0] * (DEPENDS_PER_DESCRIPTOR - len(chunk))))
        out.append(payload)
    return out

DMA_COPY = register_task(OP_DMA_COPY, "DMA_COPY", [
    ("src", "<u8"),
    ("dst", "<u8"),
    ("length", "<u8"),
])

FC_PER_CHANNEL = 0x1   # multiplier/shift (and scale) are arrays[out_features] at mult_iova/shift_iova/scale_iova
FC_DOUBLE_SCALE = 0x2  # requantize as round(acc * scale) in float64 (LiteRT's FC reference arithmetic)

# FULLY_CONNECTED requantization: acc = sum((x - input_zp) * w) + bias (int32), then
#  - default: one rounding of acc * multiplier / 2**(31 - shift), ties away from zero;
#  - FC_DOUBLE_SCALE: round(acc * scale) with scale a float64, ties away from zero;
# then + output_zp and clamp to [act_min, act_max].

FULLY_CONNECTED = register_task(OP_FULLY_CONNECTED, "FULLY_CONNECTED", [
    ("input", "<u8"),         # int8 [rows, in_features]
    ("weights", "<u8"),       # int8 [out_features, in_features], symmetric (zero point 0)
    ("bias", "<u8"),          # int32 [out_features], 0 = no bias
    ("output", "<u8"),        # int8 [rows, out_features]
    ("mult_iova", "<u8"),     # per-channel multipliers (FC_PER_CHANNEL)
    ("shift_iova", "<u8"),    # per-channel shifts (FC_PER_CHANNEL)
    ("rows", "<u4"),
    ("in_features", "<u4"),
    ("out_features", "<u4"),
    ("input_zp", "<i4"),
    ("output_zp", "<i4"),
    ("multiplier", "<i4"),    # per-tensor quantized multiplier (TFLite convention)
    ("shift", "<i4"),         # per-tensor shift, positive = left
    ("act_min", "<i4"),
    ("act_max", "<i4"),
    ("scale", "<f8"),         # per-tensor float64 scale (FC_DOUBLE_SCALE)
    ("scale_iova", "<u8"),    # per-channel float64 scales (FC_DOUBLE_SCALE | FC_PER_CHANNEL)
])
