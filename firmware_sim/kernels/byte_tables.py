"""Ops whose every output is a function of one int8 or int16 input, or of two int8 inputs,
rerun in C as table lookups (``native.data_calls``): RELU, REQUANTIZE (int8 and int16 either
way), hard swish, leaky ReLU, reciprocal square root, ABS (one input: 256 entries, 65536 for int16) and SUB,
MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, DIV, PRELU (two int8 inputs: 65536 entries, operands
broadcast).

The table is the op's own numpy kernel (the reference) run once on every possible input,
so a lookup gives the reference's bytes by construction. A kernel that refuses some input
(raises) gets no table: the op keeps running in numpy, where it raises as it should.
Tables are kept per (kernel, parameters) in a small LRU cache.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from firmware_sim import caches

from ..errors import InvalidCommand
from . import native
from .native import data_calls
from .native.calls import BoundCall

__all__ = ["unary_bound", "binary_bound", "table_of_op", "clear", "MAX_TABLES"]

MAX_TABLES = 128        # 64 KiB (two int8 inputs) or 128 KiB (int16 to int16) each
_BYTES = np.arange(256, dtype=np.uint8).view(np.int8)     # table[uint8(x)] order
_GRID_A, _GRID_B = np.repeat(_BYTES, 256), np.tile(_BYTES, 256)      # every (a, b) pair, same order
_WORDS = np.arange(1 << 16, dtype=np.uint16).view(np.int16)            # table[uint16(x)] order
for _grid in (_BYTES, _GRID_A, _GRID_B, _WORDS):
    _grid.flags.writeable = False
_WIDTHS = (np.dtype(np.int8), np.dtype(np.int16))
_tables: OrderedDict[Hashable, np.ndarray | None] = OrderedDict()     # None: the kernel refused
_lock = threading.Lock()


def table_of_op(kind: str, kernel: Callable, params: dict, operands: int, in_dtype=np.int8,
                out_dtype=np.int8) -> np.ndarray | None:
    """The table of op ``kind``'s ``kernel(*inputs, **params)`` over every input, of
    ``out_dtype``: for one operand 256 entries (int8 ``in_dtype``) or 65536 (int16), indexed
    by the input's unsigned bits; for two int8 operands 65536 indexed by ``uint8(a) << 8 |
    uint8(b)``. None when the kernel raises on some input."""
    in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
    key = (kind, operands, in_dtype.str, out_dtype.str, tuple(sorted(params.items())))
    with _lock:
        if key in _tables:
            _tables.move_to_end(key)
            return _tables[key]
    grid = (_WORDS if in_dtype == np.int16 else _BYTES,) if operands == 1 else (_GRID_A, _GRID_B)
    table: np.ndarray | None
    try:
        with np.errstate(all="ignore"):
            table = np.ascontiguousarray(kernel(*grid, **params), dtype=out_dtype)
        table.flags.writeable = False
    except (InvalidCommand, ArithmeticError, ValueError):
        table = None
    with _lock:
        _tables[key] = table
        while len(_tables) > MAX_TABLES:
            _tables.popitem(last=False)
    return table


def unary_bound(kind: str, kernel: Callable, x: np.ndarray, out: np.ndarray, **params) -> BoundCall | None:
    """``kernel(x, out=out, **params)`` (op ``kind``, int8 or int16 in and out) as a lookup
    in C, the call returned for its reruns; the kernel itself in numpy when there is no
    table (the kernel refused some input: it raises here as it should) or no C call (None).
    The first run is the lookup too: over a long int16 tensor the numpy kernel took ~60x
    the lookup (a 6000x128 spectrogram's REQUANTIZE: 288 ms against 4.8 ms)."""
    bound = None
    if native.library() is not None and x.dtype in _WIDTHS and out.dtype in _WIDTHS:
        table = table_of_op(kind, kernel, params, 1, x.dtype, out.dtype)
        bound = None if table is None else data_calls.bind_lut(x, table, out)
    if bound is None:
        kernel(x, out=out, **params)
    else:
        bound()
    return bound


def binary_bound(kind: str, kernel: Callable, a: np.ndarray, b: np.ndarray, out: np.ndarray,
                 **params) -> BoundCall | None:
    """``kernel(a, b, out=out, **params)`` (op ``kind``, int8, broadcasting), then its rerun
    as a two-byte lookup in C; None when not possible."""
    kernel(a, b, out=out, **params)
    if native.library() is None or any(v.dtype != np.int8 for v in (a, b, out)):
        return None
    table = table_of_op(kind, kernel, params, 2)
    return None if table is None else data_calls.bind_table2_broadcast(a, b, table, out)


def clear() -> None:
    """Forget every table."""
    with _lock:
        _tables.clear()


caches.register("byte_tables", "tables of int8 ops of one or two bytes, by kernel and parameters "
                "(contents only: never invalidated)", None, clear, entries=lambda: len(_tables))
