"""Device memory: accounting, buffer objects as sealed memfds, per-context IOVA spaces.

Each buffer object is a memfd the daemon creates, sizes and seals
(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) and holds for the buffer's life.
Nobody - not the client, not root - can resize it, so the chip never touches a
page that vanished, and a memfd has no name in any filesystem, so it cannot be
linked to outlive the buffer: what the device accounts is what the host holds.
Clients receive it on the hand-over socket (``handover.py``); the chip opens
``bus/bo<id>``, a symlink to ``/proc/<daemon pid>/fd/<fd>`` which procfs lets only
the daemon's own user follow (``npu_hw.memory.open_bo``).

A buffer is reachable by the chip only through the page-table entries of the
context that owns it (``mmu.py``).  Allocation and release cost O(log n) in the buffers held.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import logging
import os
import resource
from pathlib import Path

from kmd_fuse.buffer import BufferObject
from kmd_fuse.errors import KmdError
from kmd_fuse.handover import Grants
from kmd_fuse.mmu import AddressSpace, AddressSpaces
from npu_hw import iommu, memory

log = logging.getLogger("kmd_fuse.memory")

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
# Descriptors kept for everything but buffers (FUSE, the chip's memories and lines, page
# tables being created, hand-over connections), so that buffers cannot starve the daemon.
FDS_RESERVED = 512
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def punch_hole(fd: int, size: int) -> None:
    """Give a file's pages back to the host now, whoever still maps it (they read zeros)."""
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, size):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class DeviceMemory:
    """The device's fixed memory, shared by every context, and the tokens that hand it out."""

    def __init__(self, bus: Path, total: int):
        self.bus, self.total, self.used = bus, total, 0
        self.grants = Grants()
        self.buffers = 0          # backings held (freed buffers still used by a job included)
        self.max_buffers = max(0, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - FDS_RESERVED)
        self._bo_ids = itertools.count(1)
        self.spaces = AddressSpaces(bus)

    # ---- address spaces ----
    def create_space(self) -> AddressSpace:
        return self.spaces.create()

    def destroy_space(self, space: AddressSpace) -> None:
        self.grants.forget_space(space)
        self.spaces.destroy(space)

    # ---- buffers ----
    def allocate(self, space: AddressSpace, handle: int, size: int, flags: int,
                 accounted: bool = True) -> BufferObject:
        """A buffer mapped in ``space``; ``accounted=False`` for the driver's own memory (a user
        queue's), which the device's memory does not count (the queue limits bound it)."""
        if size <= 0:
            raise KmdError(errno.EINVAL, f"buffer size {size} must be positive")
        size = -(-size // iommu.PAGE_SIZE) * iommu.PAGE_SIZE
        if accounted and size > self.total - self.used:
            raise KmdError(errno.ENOMEM, f"{size} bytes requested, {self.total - self.used} of "
                                         f"{self.total} free on the device")
        if self.buffers >= self.max_buffers:
            raise KmdError(errno.ENOMEM, f"the device holds {self.buffers} buffers, its most (the driver keeps "
                                         "one file descriptor per buffer)")
        iova = space.iova.alloc(size >> iommu.PAGE_SHIFT)
        bo_id = next(self._bo_ids)
        try:
            fd, link = self._create_backing(bo_id, size)
        except OSError as exc:
            space.iova.free(iova, size >> iommu.PAGE_SHIFT)
            raise KmdError(errno.ENOMEM, f"backing memory: {_why(exc)}") from None
        bo = BufferObject(bo_id, handle, size, iova, fd, link, flags, accounted=accounted)
        space.table.map(iova, bo_id, bo.npages, readable=bool(flags & 1), writable=bool(flags & 2))
        self.used += size if accounted else 0
        self.buffers += 1
        return bo

    def _create_backing(self, bo_id: int, size: int) -> tuple[int, Path]:
        fd = os.memfd_create(f"npu-bo{bo_id}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        link = memory.bo_path(self.bus, bo_id)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            target = f"/proc/{os.getpid()}/fd/{fd}"
            try:
                os.symlink(target, link)
            except FileExistsError:     # left by a daemon that was killed: ids restart at 1
                link.unlink()
                os.symlink(target, link)
        except BaseException:
            os.close(fd)
            raise
        return fd, link

    def release(self, space: AddressSpace, bo: BufferObject) -> None:
        """Unmap the buffer and give its pages back (no job may still use it).

        A client that still maps the buffer reads zeros from then on; pages it
        dirties after that are its own memory, charged to it like any other."""
        self.grants.forget_buffer(space, bo)
        space.table.unmap(bo.iova, bo.npages)
        space.iova.free(bo.iova, bo.npages)
        bo.link.unlink(missing_ok=True)    # before the fd closes: the chip re-checks it (open_bo)
        try:
            punch_hole(bo.fd, bo.size)
        except OSError as exc:             # the pages still go when the last mapping does
            log.warning("buffer object %d: punching its pages out failed: %s", bo.bo_id, exc)
        os.close(bo.fd)
        self.used -= bo.size if bo.accounted else 0
        self.buffers -= 1


def _why(exc: OSError) -> str:
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return (f"no file descriptor left (the driver holds one per buffer, at most {limit} "
                "descriptors in all)")
    return exc.strerror or str(exc)
