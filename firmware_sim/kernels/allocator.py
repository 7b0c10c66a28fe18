"""Keep freed heap memory in the chip process instead of returning it to the kernel.

The kernels work block by block on temporaries of a few hundred KiB (float64 accumulator
blocks, int64 requantization passes). glibc serves allocations above its mmap threshold
(128 KiB, adjusted dynamically) with fresh ``mmap`` pages, so every such temporary
page-faults all of its pages again, and trims the heap top after frees. Measured on a
conv requantization block (1008 x 32 float64): 340 -> 150 us once the threshold is
raised. :func:`keep_freed_memory` raises the mmap threshold to 64 MiB and the trim
threshold to 256 MiB; it is called once when the kernels are imported. It does nothing
where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_threshold: int = 64 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Tune glibc's ``mallopt`` for this process; True if the C library took both values."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    took_mmap = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    return bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and took_mmap
