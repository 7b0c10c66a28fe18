"""Device memory: accounting, buffer objects on tmpfs, per-context IOVA spaces.

Each buffer object is a tmpfs file on the bus directory (mode 0600, owned by
the client that allocated it): user space and the chip both map it, so tensor
data is never copied.  A buffer is reachable by the chip only through the
page-table entries of the context that owns it.
"""
from __future__ import annotations

import bisect
import errno
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path

from firmware_sim.spec import iommu, memory

from kmd_fuse.errors import KmdError
from kmd_fuse.hw import PageTable


class IovaAllocator:
    """First-fit allocator of page ranges in one context's IOVA space."""

    def __init__(self, pages: int = iommu.PT_ENTRIES):
        self._free: list[tuple[int, int]] = [(0, pages)]  # sorted (first page, count)

    def alloc(self, npages: int) -> int:
        for i, (start, count) in enumerate(self._free):
            if count >= npages:
                self._free[i:i + 1] = [(start + npages, count - npages)] if count > npages else []
                return iommu.IOVA_BASE + (start << iommu.PAGE_SHIFT)
        raise KmdError(errno.ENOMEM, "IOVA space of the context exhausted")

    def free(self, iova: int, npages: int) -> None:
        start = (iova - iommu.IOVA_BASE) >> iommu.PAGE_SHIFT
        i = bisect.bisect(self._free, (start, 0))
        self._free.insert(i, (start, npages))
        # merge with neighbours
        merged: list[tuple[int, int]] = []
        for s, c in self._free[max(0, i - 1):i + 2]:
            if merged and merged[-1][0] + merged[-1][1] == s:
                merged[-1] = (merged[-1][0], merged[-1][1] + c)
            else:
                merged.append((s, c))
        self._free[max(0, i - 1):i + 2] = merged


@dataclass(eq=False)
class BufferObject:
    """One allocation: a tmpfs file mapped into one context's IOVA space."""

    bo_id: int
    handle: int
    size: int
    iova: int
    path: Path
    flags: int
    users: int = 0            # jobs in flight that reference it
    freed: bool = False       # handle gone; backing released when users drops to 0

    @property
    def npages(self) -> int:
        return self.size >> iommu.PAGE_SHIFT

    def contains(self, iova: int, length: int) -> bool:
        return self.iova <= iova and iova + length <= self.iova + self.size


@dataclass(eq=False)
class AddressSpace:
    """A context's IOMMU domain: ASID, page table, IOVA allocator."""

    asid: int
    table: PageTable
    iova: IovaAllocator = field(default_factory=IovaAllocator)


class DeviceMemory:
    """The device's fixed memory, shared by every context."""

    def __init__(self, bus: Path, total: int):
        self.bus, self.total, self.used = bus, total, 0
        self._bo_ids = itertools.count(1)
        self._free_asids = list(range(iommu.MAX_ASIDS - 1, 0, -1))

    # ---- address spaces ----
    def create_space(self) -> AddressSpace:
        if not self._free_asids:
            raise KmdError(errno.EMFILE, "no free address-space id (too many open contexts)")
        asid = self._free_asids.pop()
        return AddressSpace(asid, PageTable(self.bus, asid))

    def destroy_space(self, space: AddressSpace) -> None:
        space.table.destroy()
        self._free_asids.append(space.asid)

    # ---- buffers ----
    def allocate(self, space: AddressSpace, handle: int, size: int, flags: int, uid: int, gid: int
                 ) -> BufferObject:
        if size <= 0:
            raise KmdError(errno.EINVAL, f"buffer size {size} must be positive")
        size = -(-size // iommu.PAGE_SIZE) * iommu.PAGE_SIZE
        if size > self.total - self.used:
            raise KmdError(errno.ENOMEM, f"{size} bytes requested, {self.total - self.used} of "
                                         f"{self.total} free on the device")
        iova = space.iova.alloc(size >> iommu.PAGE_SHIFT)
        bo_id = next(self._bo_ids)
        path = memory.bo_path(self.bus, bo_id)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
                os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
        except OSError as exc:
            space.iova.free(iova, size >> iommu.PAGE_SHIFT)
            path.unlink(missing_ok=True)
            raise KmdError(errno.ENOMEM, f"backing memory: {exc.strerror}") from None
        bo = BufferObject(bo_id, handle, size, iova, path, flags)
        space.table.map(iova, bo_id, bo.npages, readable=bool(flags & 1), writable=bool(flags & 2))
        self.used += size
        return bo

    def release(self, space: AddressSpace, bo: BufferObject) -> None:
        """Unmap and delete the backing (no job may still use it)."""
        space.table.unmap(bo.iova, bo.npages)
        space.iova.free(bo.iova, bo.npages)
        bo.path.unlink(missing_ok=True)
        self.used -= bo.size
