"""A buffer object: one allocation of device memory, as the driver tracks it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from npu_hw import iommu


@dataclass(eq=False)
class BufferObject:
    """One allocation: a sealed memfd (held by the daemon) mapped into one context's IOVA space."""

    bo_id: int
    handle: int
    size: int
    iova: int
    fd: int                   # the daemon's descriptor of the memfd
    link: Path                # bus/bo<id>, the chip's way to it
    flags: int
    users: int = 0            # jobs in flight that reference it
    freed: bool = False       # handle gone; backing released when users drops to 0
    accounted: bool = True    # counted in the device's memory (a user queue's memory is not: see user_queues)

    @property
    def npages(self) -> int:
        return self.size >> iommu.PAGE_SHIFT

    def contains(self, iova: int, length: int) -> bool:
        return self.iova <= iova and iova + length <= self.iova + self.size
