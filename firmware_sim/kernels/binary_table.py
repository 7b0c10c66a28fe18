"""int8 binary ops as one 256 x 256 table lookup.

An int8 ADD or MUL with fixed quantization parameters is a function of two int8 values,
so its whole result table has 65536 entries. The table is computed once per parameter set
by the op's own exact arithmetic on every pair of inputs (so a lookup gives the same bytes
by construction) and kept in a small LRU cache. Models rerun the same layers on every
inference, so from the second call on an ADD of any size costs a few passes over its
output instead of dozens of int64 passes.

A parameter set gets a table on its second use, or at once when the output is large
enough to pay for building one (a table costs about as much as one 64K-element op).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from firmware_sim import caches

__all__ = ["table_for", "lookup", "clear", "BUILD_AT_ONCE_ELEMENTS", "MAX_TABLES"]

BUILD_AT_ONCE_ELEMENTS = 1 << 16
MAX_TABLES = 256        # 64 KiB each

_tables: OrderedDict[Hashable, np.ndarray | None] = OrderedDict()  # None: seen once
_lock = threading.Lock()

# Every (a, b) int8 pair, laid out so that table[(uint8(a) << 8) | uint8(b)] is f(a, b).
_GRID_A = np.repeat(np.arange(256, dtype=np.uint8).view(np.int8), 256)
_GRID_B = np.tile(np.arange(256, dtype=np.uint8).view(np.int8), 256)
_GRID_A.flags.writeable = False
_GRID_B.flags.writeable = False


def table_for(key: Hashable, out_elements: int,
              compute: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray | None:
    """The 65536-entry int8 table of ``compute`` for parameter set ``key``, or None when
    the caller should compute directly this time (first use of a small op).

    ``compute(a, b)`` must be the op's exact elementwise arithmetic on int8 arrays.
    """
    with _lock:
        table = _tables.get(key, False)
        if table is not None and table is not False:
            _tables.move_to_end(key)
            return table
        if table is False and out_elements < BUILD_AT_ONCE_ELEMENTS:
            _remember(key, None)
            return None
    table = np.ascontiguousarray(compute(_GRID_A, _GRID_B), dtype=np.int8)
    table.flags.writeable = False
    with _lock:
        _remember(key, table)
    return table


def _remember(key: Hashable, value: np.ndarray | None) -> None:
    _tables[key] = value
    _tables.move_to_end(key)
    while len(_tables) > MAX_TABLES:
        _tables.popitem(last=False)


def lookup(table: np.ndarray, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...],
           out: np.ndarray | None = None) -> np.ndarray:
    """``table[(uint8(a) << 8) | uint8(b)]`` with numpy broadcasting to ``shape``."""
    index = a.view(np.uint8).astype(np.uint16)  # uint16 indices: the fewest bytes to move
    index <<= 8
    if index.shape == shape:
        index |= b.view(np.uint8)
    else:
        index = index | b.view(np.uint8)
    if out is None:
        return np.take(table, index, mode="clip")
    if out.flags.c_contiguous:
        np.take(table, index, out=out, mode="clip")
    else:
        out[...] = np.take(table, index, mode="clip")
    return out


def clear() -> None:
    """Forget every table (and every parameter set seen once)."""
    with _lock:
        _tables.clear()


caches.register("binary_table", "ADD/MUL 256 x 256 result tables, by quantization parameters "
                "(contents only: never invalidated)", None, clear,
                entries=lambda: len(_tables))
