"""Build ``libnvdla_port.so``: NVDLA's portability layer in plain C (``nvdla_port.h``).

No Python runs in it: ``nvdla_port.c`` speaks the driver's ABI (``npu_uapi.h``) over the
device node and takes buffers over the hand-over socket itself. Built with the system C
compiler into ``$NPU_CACHE_DIR/clib/libnvdla_port-<hash>/libnvdla_port.so`` (the hash
covers the sources, the headers, the flags and the compiler), through a private
directory renamed into place like the chip's C kernels. The generated ``npu_tasks.h``
(:mod:`libnpu.capi.tasks_header`) goes to ``include/`` beside it.
"""
from __future__ import annotations

from pathlib import Path

from kmd_fuse.uapi import HEADER_PATH as UAPI_HEADER

from . import SOURCE_DIR, build_cached, tasks_header

__all__ = ["LIBRARY_NAME", "HEADER", "build", "include_dirs"]

LIBRARY_NAME = "libnvdla_port"
HEADER = SOURCE_DIR / "nvdla_port.h"
SOURCE = SOURCE_DIR / "nvdla_port.c"
_FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-pthread")


def build() -> Path:
    """Compile the library unless the cache holds it; returns its absolute path (its entry
    also holds the generated ``include/npu_tasks.h``)."""
    headers = sorted(SOURCE_DIR.glob("*.h")) + [UAPI_HEADER]
    return build_cached(LIBRARY_NAME, SOURCE, _FLAGS, (h.read_bytes() for h in headers),
                        (SOURCE_DIR, UAPI_HEADER.parent), {"include/npu_tasks.h": tasks_header.render()})


def include_dirs() -> tuple[Path, ...]:
    """What a program including nvdla_port.h needs: nvdla_port.h, npu_uapi.h and the
    generated npu_tasks.h (building the library if needed)."""
    return (SOURCE_DIR, UAPI_HEADER.parent, build().parent / "include")
