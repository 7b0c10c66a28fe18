"""The device MMU as the driver programs it: page tables, address spaces, IOVA allocation.

Every context has its own address space: an ASID, a page table in memory the chip
reads (``bus/pt<asid>``, entries as npu_hw/iommu.py defines them) and an
allocator of device addresses.  A buffer is reachable by the chip only through the
entries of the context that owns it; the chip caches translations, so unmapping is
followed by an IOTLB invalidation on every core (``Scheduler.invalidate``).
"""
from __future__ import annotations

import errno
import mmap
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from sortedcontainers import SortedDict, SortedList

from kmd_fuse.errors import KmdError
from npu_hw import iommu, memory


class PageTable:
    """One context's IOMMU page table, in memory the chip reads.

    Written through a memoryview of 64-bit entries rather than numpy: the daemon's first
    mapping would fault 0.25 MB of numpy's code into it (issue 15: memory back to its idle
    figure once the models are unloaded; measured 2026-11-24). A buffer's entries are one
    arithmetic progression (consecutive page indexes, the same object and permissions):
    4 pages map in ~13 us, 262,144 (1 GiB) in ~23 ms."""

    def __init__(self, bus: Path, asid: int):
        self.path = memory.page_table_path(bus, asid)
        size = iommu.PT_ENTRIES * iommu.PTE_DTYPE.itemsize
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.entries = memoryview(self._map).cast("Q")
        assert self.entries.itemsize == iommu.PTE_DTYPE.itemsize

    def map(self, iova: int, bo_id: int, npages: int, readable: bool, writable: bool) -> None:
        first = (iova - iommu.IOVA_BASE) >> iommu.PAGE_SHIFT
        flags = iommu.PTE_VALID | (iommu.PTE_READ if readable else 0) | (iommu.PTE_WRITE if writable else 0)
        start, step = (bo_id << iommu.PTE_BO_SHIFT) | flags, 1 << iommu.PTE_INDEX_SHIFT
        self.entries[first:first + npages] = array("Q", range(start, start + npages * step, step))

    def unmap(self, iova: int, npages: int) -> None:
        first = (iova - iommu.IOVA_BASE) >> iommu.PAGE_SHIFT
        self.entries[first:first + npages] = array("Q", bytes(npages * self.entries.itemsize))

    def destroy(self) -> None:
        self.entries.release()
        self._map.close()
        self.path.unlink(missing_ok=True)


class IovaAllocator:
    """Best-fit allocator of page ranges in one context's IOVA space, O(log n) per call.

    Free ranges are indexed twice: by first page (to merge a freed range with its
    neighbours) and by (size, first page) (to find the smallest range that fits,
    lowest address first among equals)."""

    def __init__(self, pages: int = iommu.PT_ENTRIES):
        self._by_start: SortedDict = SortedDict()    # first page -> count
        self._by_size: SortedList = SortedList()     # (count, first page)
        self._add(0, pages)

    def _add(self, start: int, count: int) -> None:
        self._by_start[start] = count
        self._by_size.add((count, start))

    def _remove(self, start: int) -> int:
        count = self._by_start.pop(start)
        self._by_size.remove((count, start))
        return count

    def alloc(self, npages: int) -> int:
        i = self._by_size.bisect_left((npages, -1))
        if i == len(self._by_size):
            raise KmdError(errno.ENOMEM, "IOVA space of the context exhausted")
        count, start = self._by_size[i]
        self._remove(start)
        if count > npages:
            self._add(start + npages, count - npages)
        return iommu.IOVA_BASE + (start << iommu.PAGE_SHIFT)

    def free(self, iova: int, npages: int) -> None:
        start = (iova - iommu.IOVA_BASE) >> iommu.PAGE_SHIFT
        before = self._by_start.bisect_left(start) - 1
        if before >= 0:
            prev_start, prev_count = self._by_start.peekitem(before)
            if prev_start + prev_count == start:
                start, npages = prev_start, npages + self._remove(prev_start)
        if start + npages in self._by_start:
            npages += self._remove(start + npages)
        self._add(start, npages)


@dataclass(eq=False)
class AddressSpace:
    """A context's IOMMU domain: ASID, page table, IOVA allocator."""

    asid: int
    table: PageTable
    iova: IovaAllocator = field(default_factory=IovaAllocator)


class AddressSpaces:
    """The device's ASIDs (0 is the chip's own) and the spaces made of them."""

    def __init__(self, bus: Path):
        self.bus = bus
        self._free_asids = list(range(iommu.MAX_ASIDS - 1, 0, -1))

    def create(self) -> AddressSpace:
        if not self._free_asids:
            raise KmdError(errno.EMFILE, "no free address-space id (too many open contexts)")
        asid = self._free_asids.pop()
        return AddressSpace(asid, PageTable(self.bus, asid))

    def destroy(self, space: AddressSpace) -> None:
        space.table.destroy()
        self._free_asids.append(space.asid)

