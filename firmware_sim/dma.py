"""The DMA engine: every device access goes through the context's page table.

Reads and writes name a device address (IOVA) and a length.  The engine
translates each page through the page table of the bound ASID and checks the
permission bits; an unmapped page or a missing permission raises IommuFault
(the job fails with EFAULT and nothing else is touched).  Accesses inside one
buffer object come back as zero-copy numpy views of its memory; accesses that
span objects are gathered (reads) or staged and scattered on ``commit`` (writes).

Like a real IOMMU's IOTLB, the engine keeps the translations (and the array views)
of accesses that succeeded, per ASID, until the driver invalidates that ASID
(``OP_INVALIDATE`` on the ring, which the KMD sends whenever it unmaps pages; the core
runs it through ``firmware_sim.caches.invalidate``, the one path for all the chip's caches).
Failed translations are never kept, so mapping new pages needs no invalidation.
"""
from __future__ import annotations

import errno
import math
import mmap
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

from firmware_sim.errors import JobFailure
from npu_hw import iommu, memory


class IommuFault(JobFailure):
    """A device access the context's page table does not allow (EFAULT)."""

    errno = errno.EFAULT

    def __init__(self, iova: int, reason: str):
        super().__init__(f"IOMMU fault at {iova:#x}: {reason}")
        self.iova = iova


class BusError(JobFailure):
    """A DMA transfer failed on the bus (fault injection): EIO."""

    errno = errno.EIO


class DmaEngine:
    """Translates and performs device memory accesses for one core."""

    def __init__(self, bus: Path, max_mapped_objects: int = 128):
        self.bus = Path(bus)
        self.asid: int | None = None
        self._ptes: np.ndarray | None = None
        self._tables: dict[int, np.ndarray] = {}
        # bo id -> (asid, bytes, the same bytes read-only): reads slice the read-only view
        self._objects: OrderedDict[int, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._max_objects = max_mapped_objects
        self._pending: list[tuple[np.ndarray, list[tuple[int, int, int]]]] = []
        self.inject_bus_error = False
        self.bytes_moved = 0
        self.copies = 0          # accesses served by a gathered copy or a staging buffer
        self._last_written: np.ndarray | None = None
        # The IOTLB: per ASID, (iova, nbytes, permission) -> segments, and the array views
        # of single-segment accesses: (iova, dtype, shape, write) -> view. Dropped on invalidate.
        self._tlbs: dict[int, tuple[dict, dict]] = {}
        self._tlb: dict = {}
        self._views: dict = {}

    # ---- context binding and invalidation ----
    def bind(self, asid: int) -> None:
        """Use ``asid``'s page table for the following accesses."""
        table = self._tables.get(asid)
        if table is None:
            path = memory.page_table_path(self.bus, asid)
            try:
                table = np.memmap(path, dtype=iommu.PTE_DTYPE, mode="r", shape=(iommu.PT_ENTRIES,))
                table = table.view(np.ndarray)   # plain views slice faster; the map stays alive
            except (FileNotFoundError, ValueError) as exc:
                raise IommuFault(0, f"no page table for ASID {asid}: {exc}") from None
            self._tables[asid] = table
        self.asid, self._ptes = asid, table
        cached = self._tlbs.get(asid)
        if cached is None:
            cached = self._tlbs[asid] = ({}, {})
        self._tlb, self._views = cached

    def invalidate(self, asid: int, bo_id: int = 0) -> list[tuple[int, int]]:
        """Forget cached state of ``asid``: its translations and views, and one buffer
        object's mapping (bo_id) or, with bo_id 0, its page table and all its objects.

        Returns the [start, end) host addresses of the mappings dropped, so that the other
        caches (``firmware_sim.caches``) can drop whatever still refers to them. Called
        through ``caches.invalidate``, never on its own."""
        self._tlbs.pop(asid, None)
        self._last_written = None
        if bo_id:
            dropped = [self._objects.pop(bo_id)] if bo_id in self._objects else []
        else:
            self._tables.pop(asid, None)
            dropped = [self._objects.pop(key) for key, (owner, _, _) in list(self._objects.items())
                       if owner == asid]
        if self.asid == asid:
            if bo_id:                  # still bound, with empty caches
                self._tlb, self._views = self._tlbs[asid] = ({}, {})
            else:                      # unbound: the next job binds it again
                self.asid, self._ptes = None, None
                self._tlb, self._views = {}, {}
        released = []
        for _, view, _ in dropped:
            start = view.__array_interface__["data"][0]
            released.append((start, start + view.nbytes))
        return released

    def holds_anything(self) -> bool:
        """Whether any ASID's page table or buffer object is still mapped here."""
        return bool(self._tables or self._objects)

    def map_region(self, asid: int, iova: int, nbytes: int) -> np.ndarray:
        """A long-lived writable view of [iova, iova + nbytes) in ``asid``, which must be one
        buffer object mapped read-write (a user queue's memory: firmware_sim.user_queues).

        The view keeps the object's memory mapped until dropped, whatever invalidations
        come: only for memory the driver never frees while the chip may use it."""
        self.bind(asid)
        segments = self.translate(iova, nbytes, write=True)
        if len(segments) != 1:
            raise IommuFault(iova, "a queue must be one buffer object")
        bo_id, offset, length = segments[0]
        data = self._object(bo_id)
        if offset + length > len(data):
            raise IommuFault(iova, f"page table maps past the end of buffer object {bo_id}")
        return data[offset:offset + length]

    # ---- translation ----
    def translate(self, iova: int, nbytes: int, write: bool) -> list[tuple[int, int, int]]:
        """Segments (bo id, byte offset in bo, length) covering [iova, iova + nbytes)."""
        if self._ptes is None:
            raise IommuFault(iova, "no address space bound")
        if nbytes <= 0:
            return []
        end = iova + nbytes
        if iova < iommu.IOVA_BASE or end > iommu.IOVA_LIMIT:
            raise IommuFault(iova, "outside the IOVA space")
        if self.inject_bus_error:
            self.inject_bus_error = False
            raise BusError(f"bus error at {iova:#x}")
        key = (iova, nbytes, write)
        segments = self._tlb.get(key)
        if segments is not None:
            return segments
        shift = iommu.PAGE_SHIFT
        first = (iova - iommu.IOVA_BASE) >> shift
        last = (end - 1 - iommu.IOVA_BASE) >> shift
        need = iommu.PTE_VALID | (iommu.PTE_WRITE if write else iommu.PTE_READ)
        pte = int(self._ptes[first])
        if first == last and pte & need == need:   # one page: plain integers, no array work
            page = (pte >> iommu.PTE_INDEX_SHIFT) & iommu.PTE_INDEX_MASK
            in_page = (iova - iommu.IOVA_BASE) & (iommu.PAGE_SIZE - 1)
            segments = [(pte >> iommu.PTE_BO_SHIFT, (page << shift) + in_page, nbytes)]
        else:
            segments = self._walk(iova, nbytes, write, first, last, need)
        if len(self._tlb) >= _TLB_ENTRIES:
            self._tlb.clear()
        self._tlb[key] = segments
        return segments

    def _walk(self, iova: int, nbytes: int, write: bool, first: int, last: int,
              need: int) -> list[tuple[int, int, int]]:
        shift = iommu.PAGE_SHIFT
        end = iova + nbytes
        ptes = np.asarray(self._ptes[first:last + 1])
        bad = (ptes & np.uint64(need)) != np.uint64(need)
        if bad.any():
            page = int(np.argmax(bad))
            at = max(iova, iommu.IOVA_BASE + ((first + page) << shift))
            valid = int(ptes[page]) & iommu.PTE_VALID
            raise IommuFault(at, ("write to a read-only page" if write else "read of a write-only page")
                             if valid else "page not mapped")
        _, index, bo = iommu.pte_fields(ptes)
        in_page = (iova - iommu.IOVA_BASE) & (iommu.PAGE_SIZE - 1)
        if len(ptes) == 1 or ((bo == bo[0]).all() and (np.diff(index) == 1).all()):
            return [(int(bo[0]), (int(index[0]) << shift) + in_page, nbytes)]
        segments, pos = [], iova
        for bo_id, page in zip(bo.tolist(), index.tolist()):
            offset = (pos - iommu.IOVA_BASE) & (iommu.PAGE_SIZE - 1)
            length = min(iommu.PAGE_SIZE - offset, end - pos)
            start = (page << shift) + offset
            if segments and segments[-1][0] == bo_id and segments[-1][1] + segments[-1][2] == start:
                segments[-1] = (bo_id, segments[-1][1], segments[-1][2] + length)
            else:
                segments.append((bo_id, start, length))
            pos += length
        return segments

    def _object(self, bo_id: int) -> np.ndarray:
        return self._mapped(bo_id)[1]

    def _mapped(self, bo_id: int) -> tuple[int, np.ndarray, np.ndarray]:
        data = self._objects.get(bo_id)
        if data is not None:
            self._objects.move_to_end(bo_id)
            return data
        try:
            fd = memory.open_bo(self.bus, bo_id)
        except OSError:
            raise IommuFault(0, f"buffer object {bo_id} has no backing memory") from None
        try:
            size = os.fstat(fd).st_size
            view = np.frombuffer(mmap.mmap(fd, size), dtype=np.uint8) if size else np.zeros(0, np.uint8)
        finally:
            os.close(fd)
        readonly = view.view()
        readonly.flags.writeable = False
        data = self._objects[bo_id] = (self.asid, view, readonly)
        while len(self._objects) > self._max_objects:
            self._objects.popitem(last=False)
        return data

    def _segment(self, bo_id: int, offset: int, length: int) -> np.ndarray:
        data = self._object(bo_id)
        if offset + length > len(data):
            raise IommuFault(0, f"page table maps past the end of buffer object {bo_id}")
        return data[offset:offset + length]

    # ---- accesses ----
    def read(self, iova: int, nbytes: int) -> np.ndarray:
        """Bytes at [iova, iova + nbytes): a read-only view, or a gathered copy."""
        segments = self.translate(iova, nbytes, write=False)
        self.bytes_moved += nbytes
        if len(segments) == 1:
            bo_id, offset, length = segments[0]
            readonly = self._mapped(bo_id)[2]
            if offset + length > len(readonly):
                raise IommuFault(0, f"page table maps past the end of buffer object {bo_id}")
            return readonly[offset:offset + length]
        if not segments:
            return np.zeros(0, np.uint8)
        self.copies += 1
        return np.concatenate([self._segment(*s) for s in segments])

    def write(self, iova: int, nbytes: int) -> np.ndarray:
        """A writable byte array for [iova, iova + nbytes); call ``commit`` after filling it."""
        segments = self.translate(iova, nbytes, write=True)
        self.bytes_moved += nbytes
        if len(segments) == 1:
            self._last_written = self._segment(*segments[0])
            return self._last_written
        staging = np.zeros(nbytes, np.uint8)
        self.copies += 1
        if segments:
            self._pending.append((staging, segments))
            self._last_written = None
        return staging

    def flip_last_written_bit(self) -> None:
        """Fault injection: corrupt one bit of the last single-segment output."""
        if self._last_written is not None and len(self._last_written):
            self._last_written[0] ^= 1

    def commit(self) -> None:
        """Scatter staged writes that spanned several buffer objects."""
        pending, self._pending = self._pending, []
        for staging, segments in pending:
            pos = 0
            for bo_id, offset, length in segments:
                self._segment(bo_id, offset, length)[:] = staging[pos:pos + length]
                pos += length

    def discard(self) -> None:
        """Drop staged writes (the task failed)."""
        self._pending.clear()

    def read_array(self, iova: int, dtype, shape) -> np.ndarray:
        """``read`` as an array of ``dtype`` and ``shape`` (read-only unless gathered)."""
        return self._array(iova, dtype, shape, False)

    def write_array(self, iova: int, dtype, shape) -> np.ndarray:
        """``write`` as an array of ``dtype`` and ``shape``."""
        return self._array(iova, dtype, shape, True)

    def _array(self, iova: int, dtype, shape, write: bool) -> np.ndarray:
        try:
            key = (iova, dtype, tuple(shape), write)
            hit = self._views.get(key)
        except TypeError:                          # an unhashable dtype spec
            key, hit = None, None
        if hit is not None and not self.inject_bus_error:
            view, data = hit                       # translated before: an IOTLB hit
            self.bytes_moved += data.nbytes
            if write:
                self._last_written = data
            return view
        np_dtype = _dtype(dtype)
        nbytes = math.prod(map(int, shape)) * np_dtype.itemsize
        data = self.write(iova, nbytes) if write else self.read(iova, nbytes)
        view = data.view(np_dtype).reshape(shape)
        if key is not None and len(self.translate(iova, nbytes, write)) == 1:
            if len(self._views) >= _TLB_ENTRIES:
                self._views.clear()
            self._views[key] = (view, data)
        return view


_TLB_ENTRIES = 4096   # per ASID; a full table is simply emptied

_DTYPES: dict = {}


def _dtype(spec) -> np.dtype:
    """np.dtype(spec), remembered (read_array is called for every operand of every task)."""
    try:
        return _DTYPES[spec]
    except KeyError:
        dtype = np.dtype(spec)
        if len(_DTYPES) < 64:
            _DTYPES[spec] = dtype
        return dtype
    except TypeError:        # an unhashable spec (e.g. a list of fields)
        return np.dtype(spec)
