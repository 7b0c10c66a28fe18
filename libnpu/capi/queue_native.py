"""Build and load ``libnpu_queue.so``: a user queue's submit and wait in C (``queue_client.c``).

``libnpu.user_queue`` calls it through cffi (ABI mode: no Python headers needed; cffi
releases the GIL during each call, so a thread waiting in C holds no other thread up).
Built with the system C compiler into ``$NPU_CACHE_DIR/clib/libnpu_queue-<hash>/`` (the
hash covers the sources, the headers, the flags and the compiler binary), through a private
directory renamed into place, as ``libnpu.capi.nvdla`` builds its library.

``library()`` returns the loaded library, or None when it is turned off
(``NPU_QUEUE_NATIVE=0``) or cannot be built (no compiler): the queue then runs its Python
path, which follows the same protocol; ``unavailable()`` says why.

Its waiter sleeps on the queue header's ``done`` with a futex where the device offers it (ABI
2.8, NPU_PARAM_QUEUE_WAKEUPS), on the completion line otherwise or with ``NPU_QUEUE_FUTEX=0``
(``FUTEX_WAKEUPS``, read when a queue is made: benchmarks set it to compare the two).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import cffi  # type: ignore[import-untyped]  # no stubs shipped

from kmd_fuse.uapi import HEADER_PATH as UAPI_HEADER

from . import SOURCE_DIR, CBuildError, build_cached

__all__ = ["LIBRARY_NAME", "build", "library", "unavailable", "ffi", "FUTEX_WAKEUPS"]

LIBRARY_NAME = "libnpu_queue"
HEADER = SOURCE_DIR / "queue_client.h"
SOURCE = SOURCE_DIR / "queue_client.c"
_FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-pthread")

FUTEX_WAKEUPS = os.environ.get("NPU_QUEUE_FUTEX", "1") != "0"

ffi = cffi.FFI()
ffi.cdef(HEADER.read_text())

_lock = threading.Lock()
_loaded: Any = None
_why_not: str | None = None


def build() -> Path:
    """Compile the library unless the cache holds it; returns its absolute path."""
    return build_cached(LIBRARY_NAME, SOURCE, _FLAGS, (HEADER.read_bytes(), UAPI_HEADER.read_bytes()),
                        (SOURCE_DIR, UAPI_HEADER.parent))


def library() -> Any:
    """The loaded library (cffi), or None: turned off or not buildable (``unavailable()``)."""
    global _loaded, _why_not
    if os.environ.get("NPU_QUEUE_NATIVE", "1") == "0":
        return None
    with _lock:
        if _loaded is None and _why_not is None:
            try:
                _loaded = ffi.dlopen(str(build()))
            except (CBuildError, OSError) as exc:
                _why_not = str(exc)
        return _loaded


def unavailable() -> str | None:
    """Why ``library()`` is None (None when it is loaded or not tried yet)."""
    if os.environ.get("NPU_QUEUE_NATIVE", "1") == "0":
        return "turned off (NPU_QUEUE_NATIVE=0)"
    return _why_not
