"""The chip's caches, listed in one place, and their one invalidation path.

A core process keeps state across jobs so that a model's tasks, which repeat on every
inference, cost less the second time. Every such cache registers here, saying what it
holds and what an invalidation does to it. The only invalidation is the driver's IOTLB
invalidation (``OP_INVALIDATE`` on a core's ring, sent whenever the KMD unmaps pages:
a buffer freed, a context closed): the core calls :func:`invalidate`, which drops the
DMA engine's translations and mappings for the ASID (or one buffer object) and then asks
every registered cache to drop what could still refer to the released memory. After
it returns, no cache holds a view of a released buffer, so its pages leave the core's
address space (``memfd:npu-bo<id>`` disappears from /proc/<pid>/maps).

Caches keyed only by contents (descriptor bytes, quantization parameters) and holding
copies never refer to device memory: they register without a hook, so the list is
complete and docs/hardware.md can describe all of them from here.

Every cache also says how many entries it holds (``entries``): :func:`census` counts
them, so a test can check that a closed context leaves nothing behind.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Cache", "register", "registered", "invalidate", "clear", "census", "AddressRange"]

AddressRange = tuple[int, int]
"""[start, end) of a host mapping of a released buffer object, in this process."""

Invalidate = Callable[[int, int, Sequence[AddressRange]], None]


@dataclass(frozen=True)
class Cache:
    """One of the chip's caches: its name, what it holds, its invalidation hook
    (``hook(asid, bo_id, released)``; bo_id 0 means the whole ASID), if it needs one, how
    to empty it, how many entries it holds, and whether its entries are keyed by
    contents (then a whole ASID's invalidation empties it: nobody knows whose they are)."""
    name: str
    holds: str
    hook: Invalidate | None = None
    clear: Callable[[], None] | None = None
    entries: Callable[[], int] | None = None
    by_contents: bool = True


_CACHES: dict[str, Cache] = {}


def register(name: str, holds: str, hook: Invalidate | None = None,
             clear: Callable[[], None] | None = None, *, entries: Callable[[], int] | None = None,
             by_contents: bool | None = None) -> Cache:
    """Declare a cache (idempotent per name: a module imported again replaces its entry).
    ``by_contents`` defaults to "has no hook"."""
    cache = _CACHES[name] = Cache(name, holds, hook, clear, entries,
                                  hook is None if by_contents is None else by_contents)
    return cache


def census() -> dict[str, int]:
    """Entries held by each cache that counts them (every one but the IOTLB, which is
    per DMA engine), by name."""
    return {c.name: c.entries() for c in _CACHES.values() if c.entries is not None}


def registered() -> list[Cache]:
    """Every cache of the chip, in registration order (the IOTLB first)."""
    return list(_CACHES.values())


def invalidate(dma, asid: int, bo_id: int = 0) -> None:
    """The IOTLB invalidation: forget ``asid``'s translations (one buffer object's with
    ``bo_id``, else all), then let every cache drop what may refer to the released memory.

    A whole ASID's invalidation (its context closed: a model unloaded) also empties the
    caches keyed by contents, which no longer know whose they are, and hands the freed
    heap back to the system, so the core's memory returns to its idle size; other
    contexts' next jobs rebuild what they need."""
    released = dma.invalidate(asid, bo_id)
    for cache in _CACHES.values():
        if cache.hook is not None:
            cache.hook(asid, bo_id, released)
    if not bo_id:
        for cache in _CACHES.values():
            if cache.by_contents and cache.clear is not None:
                cache.clear()
        _trim_heap()


def _trim_heap() -> None:
    """glibc's malloc_trim(0): return free heap pages to the system (no-op elsewhere)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def clear() -> None:
    """Empty every cache that can be emptied (tests, and a core's reset)."""
    for cache in _CACHES.values():
        if cache.clear is not None:
            cache.clear()


register("iotlb", "per core and ASID: translations (iova, length, permission) -> segments, array "
         "views of single-buffer accesses, and each buffer object's host mapping (firmware_sim.dma)")
