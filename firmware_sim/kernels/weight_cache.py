"""A cache of weights already converted to float32 for BLAS.

Layers run again and again on the same weights (every inference of a model), and for
small-batch layers converting int8 weights to float32 costs more than the GEMM. The cache
keys an entry by where the weights live (address, shape, strides) and keeps a copy of
their int8 bytes: an entry is used only if the bytes are still identical, so a buffer
rewritten in place (or reused for other weights) is converted afresh. Comparing bytes is
a fraction of the conversion's cost. Entries are evicted least-recently-used beyond a
byte budget.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from firmware_sim import caches

__all__ = ["converted", "clear", "MIN_CACHED_BYTES", "BUDGET_BYTES"]

MIN_CACHED_BYTES = 1 << 10    # a lookup (key + byte compare) costs ~2 us; converting more
BUDGET_BYTES = 256 << 20      # float32 copies + int8 originals kept at most

_entries: OrderedDict[Hashable, tuple[np.ndarray, Any, int]] = OrderedDict()
_bytes = 0
_lock = threading.Lock()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.flags.c_contiguous and b.flags.c_contiguous and a.nbytes % 8 == 0:
        return bool((a.reshape(-1).view(np.uint64) == b.reshape(-1).view(np.uint64)).all())
    return bool(np.array_equal(a, b))


T = TypeVar("T")


def _nbytes(obj: Any) -> int:
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    return 64


def converted(w: np.ndarray, tag: str, convert: Callable[[np.ndarray], T]) -> T:
    """``convert(w)``, from the cache when ``w`` holds the same bytes as last time.

    ``tag`` names the conversion (different layouts of the same weights are separate
    entries). Whatever ``convert`` returns is shared between calls: never modify it.
    """
    global _bytes
    if w.nbytes < MIN_CACHED_BYTES:
        return convert(w)
    key = (tag, w.__array_interface__["data"][0], w.shape, w.strides, w.dtype.str)
    with _lock:
        hit = _entries.get(key)
        if hit is not None and _same_bytes(hit[0], w):
            _entries.move_to_end(key)
            return hit[1]
    result = convert(w)
    original = np.array(w, copy=True)
    size = original.nbytes + _nbytes(result)
    with _lock:
        old = _entries.pop(key, None)
        if old is not None:
            _bytes -= old[2]
        _entries[key] = (original, result, size)
        _bytes += size
        while _bytes > BUDGET_BYTES and len(_entries) > 1:
            _, (_, _, freed) = _entries.popitem(last=False)
            _bytes -= freed
    return result


def clear() -> None:
    """Drop every entry."""
    global _bytes
    with _lock:
        _entries.clear()
        _bytes = 0


def drop_released(asid: int, bo_id: int, released) -> None:
    """Drop the entries of weights that lived in released memory (``caches`` hook): the
    byte comparison already keeps them correct, this keeps them from outliving it."""
    global _bytes
    if not released:
        return
    with _lock:
        for key in [k for k in _entries if any(lo <= k[1] < hi for lo, hi in released)]:
            _bytes -= _entries.pop(key)[2]


caches.register("weight_cache", "float32 conversions of weights, by the weights' host address, "
                "shape and strides, with a copy of their int8 bytes (entries whose weights lived "
                "in a released buffer are dropped)", drop_released, clear,
                entries=lambda: len(_entries))
