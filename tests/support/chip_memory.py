"""A chip-side memory rig for handler tests: a bus directory with one context's page
table and one buffer object, driven through the real DMA engine and job executor."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from firmware_sim.dma import DmaEngine
from firmware_sim.executor import JobResult, run_job
from firmware_sim.timing import HardwareProfile
from npu_hw import iommu, memory, ops, tasks

ASID, BO = 1, 7


class ChipMemory:
    """Allocates device memory in one buffer object mapped at IOVA_BASE, read/write."""

    def __init__(self, bus: Path, size: int = 16 << 20):
        self.bus = Path(bus)
        self.size = size
        bo_file = memory.bo_path(self.bus, BO)
        bo_file.write_bytes(b"")
        with open(bo_file, "r+b") as f:
            f.truncate(size)
        self.bytes = np.memmap(bo_file, dtype=np.uint8, mode="r+", shape=(size,))
        pt_file = memory.page_table_path(self.bus, ASID)
        with open(pt_file, "wb") as f:
            f.truncate(iommu.PT_ENTRIES * iommu.PTE_DTYPE.itemsize)
        table = np.memmap(pt_file, dtype=iommu.PTE_DTYPE, mode="r+", shape=(iommu.PT_ENTRIES,))
        npages = size // iommu.PAGE_SIZE
        table[:npages] = iommu.make_ptes(BO, 0, npages, True, True)
        table.flush()
        self._next = 0
        self.dma = DmaEngine(self.bus)

    def alloc(self, nbytes: int) -> int:
        """Reserve ``nbytes`` (64-byte aligned); returns the IOVA."""
        offset = self._next
        self._next = -(-(offset + max(nbytes, 1)) // 64) * 64
        if self._next > self.size:
            raise MemoryError("chip test memory exhausted")
        return iommu.IOVA_BASE + offset

    def put(self, array: np.ndarray) -> int:
        """Copy ``array`` into fresh device memory; returns its IOVA."""
        data = np.ascontiguousarray(array)
        iova = self.alloc(data.nbytes)
        off = iova - iommu.IOVA_BASE
        self.bytes[off:off + data.nbytes] = data.reshape(-1).view(np.uint8)
        return iova

    def get(self, iova: int, dtype, shape) -> np.ndarray:
        dtype = np.dtype(dtype)
        off = iova - iommu.IOVA_BASE
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.bytes[off:off + n].view(dtype).reshape(shape).copy()

    def run(self, *descriptors: bytes) -> JobResult:
        """Run the descriptors as one job on the real executor."""
        cmd = b"".join(descriptors)
        iova = self.put(np.frombuffer(cmd, np.uint8))
        return run_job(self.dma, ASID, iova, len(cmd), HardwareProfile())


def encode(name: str, flags: int = 0, **fields) -> bytes:
    return tasks.encode_task(name, flags, **fields)


def ranked(shape) -> list[int]:
    """A shape as a descriptor's ``u32[MAX_RANK]`` field (unused trailing entries 0)."""
    return list(shape) + [0] * (ops.MAX_RANK - len(shape))


def run_ok(mem: ChipMemory, *descs: bytes) -> None:
    """Run ``descs`` as one job; assert every task completed."""
    result = mem.run(*descs)
    assert result.status == 0, result
    assert result.task_index == len(descs)


def run_loadable(mem: ChipMemory, ld, feeds) -> list[np.ndarray]:
    """What the runtime does with a loadable: place its regions (from the start of
    ``mem``, reused call after call), copy the weights and inputs, run its command
    buffer as one job; the outputs. A failed job raises AssertionError."""
    mem._next = 0
    bases = [mem.alloc(r.size) for r in ld.regions]
    for i in range(len(ld.regions)):
        image = ld.region_image(i, bases)
        if image:
            _write(mem, bases[i], image)
    for t, x in zip(ld.inputs(), feeds, strict=True):
        assert x.shape == t.shape and x.dtype == np.dtype(t.dtype), (x.shape, t.shape)
        _write(mem, bases[t.region] + t.offset, np.ascontiguousarray(x).tobytes())
    result = mem.run(ld.command_buffer(bases))
    assert result.status == 0 and result.task_index == len(ld.tasks), result
    return [mem.get(bases[t.region] + t.offset, t.dtype, t.shape) for t in ld.outputs()]


def _write(mem: ChipMemory, iova: int, data: bytes) -> None:
    off = iova - iommu.IOVA_BASE
    mem.bytes[off:off + len(data)] = np.frombuffer(data, np.uint8)
