"""The loadable: a compiled model in one versioned, checksummed file.

Layout (all little-endian)::

    header (64 bytes)      magic "NPULOAD\\0", version major/minor, flags, section count,
                           file size, section table offset, CRC32 of the header itself
    section table          per section: kind, flags, offset, size, CRC32, alignment
    sections               META (JSON), STRINGS, TENSORS, REGIONS, TASKS, INDICES (u32),
                           QUANT (f32 scales + i32 zero points), PAYLOAD (opaque task
                           descriptors), RELOCS, DATA_RELOCS, WEIGHTS (page-aligned,
                           region contents at their own alignment, so the file can be
                           mmapped and copied straight into device memory); since 1.1
                           HOST (JSON: the host steps) and HOST_DATA (their sub-models)

Tensor, region and task records are fixed-size numpy structured records; strings and
variable-length lists live in STRINGS / INDICES / QUANT and are referenced by offset and
count. Task payloads are opaque bytes (chip task descriptors from ``npu_hw``),
so this format does not change when an op's descriptor does. Device addresses inside a
payload are not known until the runtime allocates the regions: each task lists
relocations (byte offset in its payload, region, addend) and the runtime writes
``region base + addend`` as a little-endian u64 there (:meth:`Loadable.command_buffer`).
Address tables inside region contents (e.g. CONCAT's list of input addresses) are
patched the same way through data relocations (:meth:`Loadable.region_image`).

A model with operators the chip lacks also carries host steps (:class:`HostStep`): each
runs after a given number of tasks, reads and writes tensors of the same memory plan, and
holds what the host needs to run its operator (:mod:`libnpu.host`). The runtime submits
the tasks between two host steps as one job (a partition) and runs the host steps in
between. Version 1.1 added the HOST sections; 1.0 files (no host steps) still load.

Version 1.2 added state carried between inferences (stateful models): a STATE region per
variable, holding its initial value as contents, and a tensor flagged STATE in it (its
name, type and quantization); the model's tasks read it in place and write it back.

Version 1.3 added outputs whose shape each run decides (:mod:`libnpu.dynamic_outputs`:
their signature and bound in META); files without any are still written as 1.2.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import secrets
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from libnpu.dynamic_outputs import DYNAMIC_OUTPUTS, decode_dynamic_outputs, encode_dynamic_outputs, signature_text
from libnpu.loadable_layout import (
    DATA_RELOC_DT,
    DTYPES,
    HEADER,
    MAGIC,
    MAX_RANK,
    OPTIONAL_SECTIONS,
    PAGE,
    REGION_DT,
    RELOC_DT,
    SECTION,
    TASK_DT,
    TENSOR_DT,
    VERSION,
    BadMagicError,
    ChecksumError,
    EmptyLoadableError,
    FormatError,
    LoadableError,
    RegionKind,
    Section,
    Strings,
    TensorFlags,
    TruncatedError,
    VersionError,
    align_up,
)
from npu_hw import tasks as npu_tasks

__all__ = [
    "LoadableError", "BadMagicError", "VersionError", "TruncatedError", "ChecksumError",
    "FormatError", "EmptyLoadableError", "RegionKind", "TensorFlags", "MemoryRegion", "TensorDesc", "Task",
    "Reloc", "DataReloc", "HostStep", "HostCall", "Loadable", "MAGIC", "VERSION",
]

@dataclass
class MemoryRegion:
    """A device memory area the runtime allocates: weights (with contents), activations, I/O."""
    name: str
    kind: RegionKind
    size: int
    alignment: int = 64
    content: bytes | memoryview | None = None


@dataclass
class TensorDesc:
    """Where a tensor lives (region + byte offset) and how to read it."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    region: int
    offset: int = 0
    strides: tuple[int, ...] = ()  # bytes; () (or None) means C-contiguous
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0
    flags: TensorFlags = TensorFlags.NONE
    # an output shaped per run (libnpu.dynamic_outputs): its dims, -1 where each run decides
    shape_signature: tuple[int, ...] | None = None
    max_shape: tuple[int, ...] | None = None     # its bound, when the operator gives one

    @property
    def dynamic(self) -> bool:
        """Whether each run decides this tensor's shape (``shape`` is then a placeholder)."""
        return self.shape_signature is not None

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if not self.strides:
            item = np.dtype(self.dtype).itemsize
            strides, acc = [], item
            for d in reversed(self.shape):
                strides.append(acc)
                acc *= d
            self.strides = tuple(reversed(strides))
        self.strides = tuple(int(s) for s in self.strides)

    @property
    def nbytes(self) -> int:
        """Bytes spanned in the region (last element's offset + its size)."""
        if any(d == 0 for d in self.shape):
            return 0
        item = np.dtype(self.dtype).itemsize
        return sum((d - 1) * s for d, s in zip(self.shape, self.strides)) + item


@dataclass(frozen=True)
class Reloc:
    """Patch ``payload[offset:offset+8]`` with the device address ``base(region) + addend``."""
    offset: int
    region: int
    addend: int = 0


@dataclass(frozen=True)
class DataReloc:
    """Patch ``content[offset:offset+8]`` of ``region`` with ``base(target) + addend``."""
    region: int
    offset: int
    target: int
    addend: int = 0


@dataclass
class Task:
    """One unit of chip work: an opaque descriptor plus what the runtime needs to schedule it."""
    name: str
    op: str
    opcode: int
    payload: bytes
    deps: list[int] = field(default_factory=list)
    tensors: list[int] = field(default_factory=list)
    macs: int = 0
    bytes_moved: int = 0
    core: int = -1
    meta: dict[str, Any] = field(default_factory=dict)
    relocs: list[Reloc] = field(default_factory=list)


@dataclass
class HostStep:
    """An operator the host runs, after ``after_task`` tasks (see :mod:`libnpu.host`)."""
    name: str
    kind: str                  # "tflite" or "onnx": what ``model`` is
    op: str                    # the source operator ("REVERSE_V2", "CUSTOM:MyOp", "CumSum")
    model: bytes = field(repr=False)   # the sub-model holding it
    after_task: int
    inputs: list[int] = field(default_factory=list)    # tensor indices, in the sub-model's input order
    outputs: list[int] = field(default_factory=list)
    source: int = -1           # the operator's index in the source model
    reason: str = ""           # why it is not on the chip


@dataclass(frozen=True)
class HostCall:
    """One operator the host runs, as the compiler's HOST op carries it (:mod:`libnpu.host`
    runs it); the loadable stores it as a :class:`HostStep`."""
    kind: str            # "tflite" or "onnx"
    model: bytes         # the cut sub-model (its inputs and outputs are the call's)
    op: str              # the source operator's name ("REVERSE_V2", "CUSTOM:MyOp", "CumSum"; "A+B" for a run)
    source: int          # its index in the source model (a run's first)
    reason: str = ""     # why it is not on the NPU

    @property
    def custom_name(self) -> str:
        """The name a user registers an implementation under."""
        return self.op.split(":", 1)[1] if self.op.startswith("CUSTOM:") else self.op


@dataclass
class Loadable:
    """A compiled model: tensors, memory regions (weights included), tasks, metadata."""
    name: str
    tensors: list[TensorDesc] = field(default_factory=list)
    regions: list[MemoryRegion] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    data_relocs: list[DataReloc] = field(default_factory=list)
    host_steps: list[HostStep] = field(default_factory=list)

    # queries ------------------------------------------------------------------------
    def inputs(self) -> list[TensorDesc]:
        return [t for t in self.tensors if t.flags & TensorFlags.INPUT]

    def outputs(self) -> list[TensorDesc]:
        return [t for t in self.tensors if t.flags & TensorFlags.OUTPUT]

    def states(self) -> list[TensorDesc]:
        """The variables a stateful model keeps between inferences (empty for others)."""
        return [t for t in self.tensors if t.flags & TensorFlags.STATE]

    def summary(self) -> str:
        """Human-readable overview (regions, I/O tensors, tasks)."""
        lines = [f"loadable {self.name!r}: {len(self.tensors)} tensors, {len(self.regions)} regions, "
                 f"{len(self.tasks)} tasks, {sum(t.macs for t in self.tasks):,} MACs"]
        for i, r in enumerate(self.regions):
            content = f", {len(r.content):,} bytes of contents" if r.content is not None else ""
            lines.append(f"  region {i}: {r.kind.name:<11} {r.size:>12,} bytes, align {r.alignment}{content}"
                         f"  {r.name}")
        for t in self.inputs() + self.outputs():
            kind = "input " if t.flags & TensorFlags.INPUT else "output"
            q = "" if t.scale is None or t.zero_point is None else f" scale {t.scale[0]:.6g} zp {int(t.zero_point[0])}"
            shape = signature_text(t) if t.dynamic else list(t.shape)     # -1: each run decides
            lines.append(f"  {kind} {t.name} {shape} {t.dtype}{q} @ region {t.region}+{t.offset}")
        for t in self.states():
            lines.append(f"  state  {self.regions[t.region].name.removeprefix('state:')} {list(t.shape)} {t.dtype}"
                         f" @ region {t.region}")
        ops: dict[str, int] = {}
        for task in self.tasks:
            ops[task.op] = ops.get(task.op, 0) + 1
        if ops:
            lines.append("  tasks: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
        for step in self.host_steps:
            lines.append(f"  host step after task {step.after_task}: {step.op} (source op {step.source}, "
                         f"{step.kind}): {step.reason}")
        return "\n".join(lines)

    def partitions(self) -> list[tuple[range, list[HostStep]]]:
        """The run order: chip tasks ``range`` (one job; may be empty), then host steps."""
        order: list[tuple[range, list[HostStep]]] = []
        start = 0
        for step in self.host_steps:
            if order and step.after_task == start:     # no task since the previous host step
                order[-1][1].append(step)
            else:
                order.append((range(start, step.after_task), [step]))
                start = step.after_task
        if start < len(self.tasks) or not order:
            order.append((range(start, len(self.tasks)), []))
        return order

    def task_offsets(self) -> list[int]:
        """Byte offset of each task in :meth:`command_buffer`, plus its total size."""
        offsets, pos = [], 0
        for task in self.tasks:
            pos = align_up(pos, 8)
            offsets.append(pos)
            pos += len(task.payload)
        return offsets + [pos]

    def validate(self) -> None:
        """Check cross references; raises :class:`FormatError` naming the culprit."""
        for i, r in enumerate(self.regions):
            if r.alignment <= 0 or r.alignment & (r.alignment - 1):
                raise FormatError(f"region {i} ({r.name!r}): alignment {r.alignment} is not a power of two")
            if r.content is not None and len(r.content) > r.size:
                raise FormatError(f"region {i} ({r.name!r}): content {len(r.content)} bytes > size {r.size}")
        for i, t in enumerate(self.tensors):
            if t.dtype not in DTYPES:
                raise FormatError(f"tensor {i} ({t.name!r}): unknown dtype {t.dtype!r}")
            if len(t.shape) > MAX_RANK or len(t.strides) != len(t.shape):
                raise FormatError(f"tensor {i} ({t.name!r}): rank {len(t.shape)} / strides mismatch")
            if not 0 <= t.region < len(self.regions):
                raise FormatError(f"tensor {i} ({t.name!r}): region {t.region} does not exist")
            if t.offset + t.nbytes > self.regions[t.region].size:
                raise FormatError(f"tensor {i} ({t.name!r}): bytes {t.offset}..{t.offset + t.nbytes} "
                                  f"outside region {self.regions[t.region].name!r} "
                                  f"({self.regions[t.region].size} bytes)")
            if t.flags & TensorFlags.STATE and (self.regions[t.region].kind != RegionKind.STATE or t.offset):
                raise FormatError(f"tensor {i} ({t.name!r}): a state must start its own STATE region")
            if (t.scale is None) != (t.zero_point is None) or (
                    t.scale is not None and t.zero_point is not None and len(t.scale) != len(t.zero_point)):
                raise FormatError(f"tensor {i} ({t.name!r}): scale/zero point mismatch")
        for i, task in enumerate(self.tasks):
            for d in task.deps:
                if not 0 <= d < i:
                    raise FormatError(f"task {i} ({task.name!r}): dependency {d} is not an earlier task")
            for ti in task.tensors:
                if not 0 <= ti < len(self.tensors):
                    raise FormatError(f"task {i} ({task.name!r}): tensor {ti} does not exist")
            for reloc in task.relocs:
                if not 0 <= reloc.offset <= len(task.payload) - 8:
                    raise FormatError(f"task {i} ({task.name!r}): relocation at byte {reloc.offset} "
                                      f"outside its {len(task.payload)}-byte payload")
                if not (0 <= reloc.region < len(self.regions)
                        and 0 <= reloc.addend <= self.regions[reloc.region].size):
                    raise FormatError(f"task {i} ({task.name!r}): relocation to region {reloc.region} "
                                      f"+ {reloc.addend} is out of range")
        self._validate_data_relocs()
        previous = 0
        for i, step in enumerate(self.host_steps):
            if not previous <= step.after_task <= len(self.tasks):
                raise FormatError(f"host step {i} ({step.name!r}): runs after task {step.after_task}, "
                                  f"out of order or past the {len(self.tasks)} tasks")
            previous = step.after_task
            if step.kind not in ("tflite", "onnx"):
                raise FormatError(f"host step {i} ({step.name!r}): unknown kind {step.kind!r}")
            for ti in step.inputs + step.outputs:
                if not 0 <= ti < len(self.tensors):
                    raise FormatError(f"host step {i} ({step.name!r}): tensor {ti} does not exist")

    def check_runnable(self) -> None:
        """Raise :class:`EmptyLoadableError` unless the loadable has tasks and outputs.

        Separate from :meth:`validate`: such a file is well formed (tools may inspect
        it), but loading it on a device would run nothing and report success."""
        work = self.tasks or self.host_steps
        missing = [what for what, present in (("tasks", work), ("outputs", self.outputs())) if not present]
        if missing:
            raise EmptyLoadableError(f"loadable {self.name!r} has no {' and no '.join(missing)}: nothing to run")

    def _validate_data_relocs(self) -> None:
        for r in self.data_relocs:
            content = self.regions[r.region].content if 0 <= r.region < len(self.regions) else None
            if content is None:
                raise FormatError(f"data relocation in region {r.region}, which has no contents")
            if not 0 <= r.offset <= len(content) - 8:
                raise FormatError(f"data relocation at byte {r.offset} outside region {r.region}'s contents")
            if not 0 <= r.target < len(self.regions) or not 0 <= r.addend <= self.regions[r.target].size:
                raise FormatError(f"data relocation to region {r.target} + {r.addend} is out of range")

    def region_image(self, index: int, region_bases: list[int] | tuple[int, ...]) -> bytes:
        """Region ``index``'s initial contents with its address tables patched."""
        if len(region_bases) != len(self.regions):
            raise FormatError(f"{len(region_bases)} region addresses given, {len(self.regions)} regions")
        content = self.regions[index].content
        relocs = [r for r in self.data_relocs if r.region == index]
        if not relocs:
            return bytes(content or b"")
        assert content is not None, "validate(): data relocations are only in regions with contents"
        image = bytearray(content)
        for r in relocs:
            struct.pack_into("<Q", image, r.offset, region_bases[r.target] + r.addend)
        return bytes(image)

    def command_buffer(self, region_bases: list[int] | tuple[int, ...], cores: int | None = None) -> bytes:
        """All task payloads end to end (8-byte aligned), device addresses patched in.

        ``region_bases[i]`` is the device address where region ``i`` was allocated.
        ``cores``: None runs the tasks in order on one core; a number makes the buffer a
        task graph (``npu_hw.tasks.TASK_GRAPH``: each task after ``DEPENDS`` naming its
        dependencies) that the chip runs on up to that many cores (0: all it has).
        """
        if len(region_bases) != len(self.regions):
            raise FormatError(f"{len(region_bases)} region addresses given, {len(self.regions)} regions")
        patched: list[bytes] = []
        for task in self.tasks:
            payload = bytearray(task.payload)
            for r in task.relocs:
                struct.pack_into("<Q", payload, r.offset, region_bases[r.region] + r.addend)
            patched.append(bytes(payload))
        if cores is not None:
            patched = npu_tasks.encode_graph([t.deps for t in self.tasks], patched, cores)
        out = bytearray()
        for part in patched:
            out += b"\0" * (align_up(len(out), 8) - len(out)) + part
        return bytes(out)

    # writing ------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize (validates first)."""
        self.validate()
        strings = Strings()
        indices: list[int] = []
        scales: list[float] = []
        zps: list[int] = []

        trec = np.zeros(len(self.tensors), TENSOR_DT)
        for i, t in enumerate(self.tensors):
            r = trec[i]
            r["name_off"], r["name_len"] = strings.add(t.name)
            r["dtype"], r["rank"], r["flags"] = DTYPES.index(t.dtype), len(t.shape), int(t.flags)
            r["region"], r["offset"], r["size"] = t.region, t.offset, t.nbytes
            r["shape"][:len(t.shape)] = t.shape
            r["strides"][:len(t.strides)] = t.strides
            r["q_axis"] = t.axis
            if t.scale is not None:
                r["q_index"], r["q_count"] = len(scales), len(t.scale)
                scales.extend(np.asarray(t.scale, np.float32).tolist())
                zps.extend(np.asarray(t.zero_point, np.int64).tolist())

        weights = bytearray()
        rrec = np.zeros(len(self.regions), REGION_DT)
        for i, reg in enumerate(self.regions):
            r = rrec[i]
            r["name_off"], r["name_len"] = strings.add(reg.name)
            r["kind"], r["alignment"], r["size"] = int(reg.kind), reg.alignment, reg.size
            if reg.content is not None:
                off = align_up(len(weights), max(reg.alignment, 64))
                weights += b"\0" * (off - len(weights))
                weights += bytes(reg.content)
                r["content_off"], r["content_size"] = off, len(reg.content)

        payload = bytearray()
        relocs = np.zeros(sum(len(t.relocs) for t in self.tasks), RELOC_DT)
        nrel = 0
        krec = np.zeros(len(self.tasks), TASK_DT)
        for i, task in enumerate(self.tasks):
            r = krec[i]
            r["name_off"], r["name_len"] = strings.add(task.name)
            r["op_off"], r["op_len"] = strings.add(task.op)
            r["meta_off"], r["meta_len"] = strings.add(json.dumps(task.meta, sort_keys=True) if task.meta else "")
            r["opcode"], r["core"], r["macs"], r["bytes_moved"] = task.opcode, task.core, task.macs, task.bytes_moved
            off = align_up(len(payload), 8)
            payload += b"\0" * (off - len(payload)) + bytes(task.payload)
            r["payload_off"], r["payload_size"] = off, len(task.payload)
            r["deps_index"], r["deps_count"] = len(indices), len(task.deps)
            indices.extend(task.deps)
            r["tensors_index"], r["tensors_count"] = len(indices), len(task.tensors)
            indices.extend(task.tensors)
            for rl in task.relocs:
                relocs[nrel] = (i, rl.offset, rl.region, 0, rl.addend)
                nrel += 1

        host_data = bytearray()
        host = []
        for step in self.host_steps:
            off = align_up(len(host_data), 8)
            host_data += b"\0" * (off - len(host_data)) + bytes(step.model)
            host.append(dict(name=step.name, kind=step.kind, op=step.op, after_task=step.after_task,
                             inputs=step.inputs, outputs=step.outputs, source=step.source, reason=step.reason,
                             model_off=off, model_len=len(step.model)))
        meta = dict(self.metadata, name=self.name)
        dynamic = encode_dynamic_outputs(self.tensors)
        if dynamic:
            meta[DYNAMIC_OUTPUTS] = dynamic
        sections = [
            (Section.META, json.dumps(meta, sort_keys=True).encode(), 8),
            (Section.STRINGS, bytes(strings.buf), 8),
            (Section.TENSORS, trec.tobytes(), 8),
            (Section.REGIONS, rrec.tobytes(), 8),
            (Section.TASKS, krec.tobytes(), 8),
            (Section.INDICES, np.asarray(indices, "<u4").tobytes(), 8),
            (Section.QUANT_SCALE, np.asarray(scales, "<f4").tobytes(), 8),
            (Section.QUANT_ZP, np.asarray(zps, "<i4").tobytes(), 8),
            (Section.PAYLOAD, bytes(payload), 8),
            (Section.RELOCS, relocs.tobytes(), 8),
            (Section.DATA_RELOCS, np.array([(r.region, r.target, r.offset, r.addend) for r in self.data_relocs],
                                           DATA_RELOC_DT).tobytes(), 8),
            (Section.WEIGHTS, bytes(weights), PAGE),
            (Section.HOST, json.dumps(host).encode(), 8),
            (Section.HOST_DATA, bytes(host_data), 8),
        ]
        table_off = HEADER.size
        pos = table_off + SECTION.size * len(sections)
        table, body = [], bytearray()
        for kind, data, align in sections:
            pos = align_up(pos, align)
            table.append(SECTION.pack(kind, 0, pos, len(data), zlib.crc32(data), align))
            body_start = pos - (table_off + SECTION.size * len(sections))
            body += b"\0" * (body_start - len(body)) + data
            pos += len(data)
        file_size = pos
        table_bytes = b"".join(table)
        version = VERSION if dynamic else (VERSION[0], 2)    # 1.3: outputs shaped per run
        header = HEADER.pack(MAGIC, *version, 0, HEADER.size, len(sections), file_size,
                              table_off, zlib.crc32(table_bytes), b"\0" * 16, 0)
        header = header[:-4] + struct.pack("<I", zlib.crc32(header[:-4]))
        return header + table_bytes + bytes(body)

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file + rename); an OSError names ``path``, and no
        temporary file is left behind. The temporary file is a new one with a random name
        (O_EXCL): a link someone planted beside ``path`` (in a cache directory others can
        write) is never written through."""
        p = Path(path)
        tmp = p.with_name(f".{p.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(self.to_bytes())
                os.replace(tmp, p)
            except BaseException:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None

    # reading ------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes | memoryview | mmap.mmap) -> Loadable:
        """Parse and check a loadable; region contents are views into ``data`` (no copy)."""
        buf = memoryview(data).cast("B")
        if not buf:
            raise BadMagicError("empty file (0 bytes), not an NPU loadable")
        if len(buf) < 8 and MAGIC.startswith(bytes(buf)):
            raise TruncatedError(f"file is {len(buf)} bytes, shorter than the {HEADER.size}-byte header")
        if len(buf) < 8 or bytes(buf[:8]) != MAGIC:
            raise BadMagicError("not an NPU loadable (bad magic)")
        if len(buf) < HEADER.size:
            raise TruncatedError(f"file is {len(buf)} bytes, shorter than the {HEADER.size}-byte header")
        magic, major, minor, flags, hsize, nsec, fsize, toff, tcrc, _, hcrc = HEADER.unpack_from(buf)
        if major != VERSION[0] or minor > VERSION[1]:
            raise VersionError(f"loadable format version {major}.{minor}; this reader supports "
                               f"{VERSION[0]}.0 to {VERSION[0]}.{VERSION[1]}")
        if zlib.crc32(bytes(buf[:HEADER.size - 4])) != hcrc:
            raise ChecksumError("header checksum mismatch")
        if len(buf) < fsize:
            raise TruncatedError(f"file is {len(buf)} bytes, header declares {fsize}")
        if toff + nsec * SECTION.size > fsize:
            raise TruncatedError("section table runs past the end of the file")
        if len(buf) < toff + nsec * SECTION.size:
            raise TruncatedError(f"file is {len(buf)} bytes, too short for its section table")
        if zlib.crc32(buf[toff:toff + nsec * SECTION.size]) != tcrc:
            raise ChecksumError("section table checksum mismatch")
        secs: dict[int, memoryview] = {}
        covered = [(0, HEADER.size), (toff, toff + nsec * SECTION.size)]
        for i in range(nsec):
            kind, _, off, size, crc, _ = SECTION.unpack_from(buf, toff + i * SECTION.size)
            label = Section(kind).name if kind in Section._value2member_map_ else f"#{kind}"
            if kind in secs:
                raise FormatError(f"section {label} appears twice")
            if off + size > fsize:
                raise TruncatedError(f"section {label} ({off}+{size}) runs past the end of the file")
            view = buf[off:off + size]
            if zlib.crc32(view) != crc:
                raise ChecksumError(f"section {label} checksum mismatch")
            secs[kind] = view
            covered.append((off, off + size))
        # Alignment gaps carry no checksum; they must be zero so no byte goes unchecked.
        pos = 0
        for start, end in sorted(covered):
            if start > pos and any(buf[pos:start]):
                raise FormatError(f"non-zero padding at bytes {pos}..{start}")
            pos = max(pos, end)
        if fsize > pos and any(buf[pos:fsize]):
            raise FormatError(f"non-zero padding at bytes {pos}..{fsize}")
        missing = [s.name for s in Section if s not in secs and s not in OPTIONAL_SECTIONS]
        if missing:
            raise FormatError(f"missing sections: {', '.join(missing)}")
        return cls._decode(secs)

    @classmethod
    def _decode(cls, secs: dict[int, memoryview]) -> Loadable:
        def records(kind: Section, dt: np.dtype) -> np.ndarray:
            raw = secs[kind]
            if len(raw) % dt.itemsize:
                raise FormatError(f"section {kind.name}: size {len(raw)} is not a multiple of {dt.itemsize}")
            return np.frombuffer(raw, dt)

        strings = bytes(secs[Section.STRINGS])

        def string(off: int, n: int, what: str) -> str:
            if off + n > len(strings):
                raise FormatError(f"{what}: string out of range")
            try:
                return strings[off:off + n].decode()
            except UnicodeDecodeError as exc:
                raise FormatError(f"{what}: bad string: {exc}") from None

        def pool(arr: np.ndarray, start: int, n: int, what: str) -> np.ndarray:
            if start + n > len(arr):
                raise FormatError(f"{what}: index range {start}+{n} out of range")
            return arr[start:start + n]

        try:
            meta = json.loads(bytes(secs[Section.META]).decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FormatError(f"section META: bad JSON: {exc}") from None
        indices = records(Section.INDICES, np.dtype("<u4"))
        qscale = records(Section.QUANT_SCALE, np.dtype("<f4"))
        qzp = records(Section.QUANT_ZP, np.dtype("<i4"))
        payload, weights = secs[Section.PAYLOAD], secs[Section.WEIGHTS]

        regions = []
        for i, r in enumerate(records(Section.REGIONS, REGION_DT)):
            what = f"region {i}"
            if r["kind"] not in RegionKind._value2member_map_:
                raise FormatError(f"{what}: unknown kind {r['kind']}")
            content = None
            if r["content_size"]:
                end = int(r["content_off"] + r["content_size"])
                if end > len(weights):
                    raise FormatError(f"{what}: content runs past the WEIGHTS section")
                content = weights[int(r["content_off"]):end]
            regions.append(MemoryRegion(string(r["name_off"], r["name_len"], what), RegionKind(int(r["kind"])),
                                        int(r["size"]), int(r["alignment"]), content))
        tensors = []
        for i, r in enumerate(records(Section.TENSORS, TENSOR_DT)):
            what = f"tensor {i}"
            rank = int(r["rank"])
            if rank > MAX_RANK or r["dtype"] >= len(DTYPES):
                raise FormatError(f"{what}: bad rank {rank} or dtype code {r['dtype']}")
            scale = zp = None
            if r["q_count"]:
                scale = pool(qscale, int(r["q_index"]), int(r["q_count"]), what).copy()
                zp = pool(qzp, int(r["q_index"]), int(r["q_count"]), what).astype(np.int64)
            tensors.append(TensorDesc(
                string(r["name_off"], r["name_len"], what), tuple(int(d) for d in r["shape"][:rank]),
                DTYPES[r["dtype"]], int(r["region"]), int(r["offset"]),
                tuple(int(s) for s in r["strides"][:rank]), scale, zp, int(r["q_axis"]),
                TensorFlags(int(r["flags"]))))
        tasks: list[Task] = []
        task_records = records(Section.TASKS, TASK_DT)
        reloc_lists: list[list[Reloc]] = [[] for _ in range(len(task_records))]
        for r in records(Section.RELOCS, RELOC_DT):
            if r["task"] >= len(task_records):
                raise FormatError(f"relocation for task {r['task']}, which does not exist")
            reloc_lists[int(r["task"])].append(Reloc(int(r["offset"]), int(r["region"]), int(r["addend"])))
        for i, r in enumerate(task_records):
            what = f"task {i}"
            end = int(r["payload_off"] + r["payload_size"])
            if end > len(payload):
                raise FormatError(f"{what}: payload runs past the PAYLOAD section")
            meta_s = string(r["meta_off"], r["meta_len"], what)
            try:
                tmeta = json.loads(meta_s) if meta_s else {}
            except json.JSONDecodeError as exc:
                raise FormatError(f"{what}: bad metadata JSON: {exc}") from None
            tasks.append(Task(
                string(r["name_off"], r["name_len"], what), string(r["op_off"], r["op_len"], what),
                int(r["opcode"]), bytes(payload[int(r["payload_off"]):end]),
                pool(indices, int(r["deps_index"]), int(r["deps_count"]), what).tolist(),
                pool(indices, int(r["tensors_index"]), int(r["tensors_count"]), what).tolist(),
                int(r["macs"]), int(r["bytes_moved"]), int(r["core"]), tmeta, reloc_lists[i]))
        data_relocs = [DataReloc(int(r["region"]), int(r["offset"]), int(r["target"]), int(r["addend"]))
                       for r in records(Section.DATA_RELOCS, DATA_RELOC_DT)]
        host_steps = _decode_host(secs)
        name = meta.pop("name", "model") if isinstance(meta, dict) else "model"
        if isinstance(meta, dict) and DYNAMIC_OUTPUTS in meta:
            decode_dynamic_outputs(meta.pop(DYNAMIC_OUTPUTS), [t for t in tensors if t.flags & TensorFlags.OUTPUT])
        result = cls(name, tensors, regions, tasks, meta if isinstance(meta, dict) else {}, data_relocs,
                     host_steps)
        result.validate()
        return result

    @classmethod
    def load(cls, path: str | os.PathLike, *, use_mmap: bool = True) -> Loadable:
        """Read a loadable file; with ``use_mmap`` the weights stay in the page cache."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if use_mmap and size > 0:
                data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            else:
                data = f.read()
        try:
            return cls.from_bytes(data)
        except LoadableError as exc:
            raise type(exc)(f"{path}: {exc}") from None


def _decode_host(secs: dict[int, memoryview]) -> list[HostStep]:
    if Section.HOST not in secs:
        return []
    data = bytes(secs.get(Section.HOST_DATA, b""))
    try:
        records = json.loads(bytes(secs[Section.HOST]).decode())
        steps = []
        for i, r in enumerate(records):
            off, size = int(r["model_off"]), int(r["model_len"])
            if off < 0 or size < 0 or off + size > len(data):
                raise FormatError(f"host step {i}: its model runs past the HOST_DATA section")
            steps.append(HostStep(str(r["name"]), str(r["kind"]), str(r["op"]), data[off:off + size],
                                  int(r["after_task"]), [int(t) for t in r["inputs"]],
                                  [int(t) for t in r["outputs"]], int(r["source"]), str(r["reason"])))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"section HOST: bad host step records: {exc}") from None
    return steps
