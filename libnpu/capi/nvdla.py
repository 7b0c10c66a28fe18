"""Build ``libnvdla_port.so``: NVDLA's portability layer in plain C (``nvdla_port.h``).

No Python runs in it: ``nvdla_port.c`` speaks the driver's ABI (``npu_uapi.h``) over the
device node and takes buffers over the hand-over socket itself. Built with the system C
compiler into ``$NPU_CACHE_DIR/clib/libnvdla_port-<hash>/libnvdla_port.so`` (the hash
covers the sources, the headers, the flags and the compiler), through a private
directory renamed into place like the chip's C kernels. The generated ``npu_tasks.h``
(:mod:`libnpu.capi.tasks_header`) goes to ``include/`` beside it.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from kmd_fuse.uapi import HEADER_PATH as UAPI_HEADER

from . import SOURCE_DIR, CBuildError, c_compiler, cache_entry, publish_build, tasks_header

__all__ = ["LIBRARY_NAME", "HEADER", "build", "include_dirs"]

LIBRARY_NAME = "libnvdla_port"
HEADER = SOURCE_DIR / "nvdla_port.h"
SOURCE = SOURCE_DIR / "nvdla_port.c"
_FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-pthread")


def build() -> Path:
    """Compile the library unless the cache holds it; returns its absolute path."""
    cc = c_compiler()
    headers = sorted(SOURCE_DIR.glob("*.h")) + [UAPI_HEADER]
    tasks_h = tasks_header.render()
    directory = cache_entry(LIBRARY_NAME, cc, (SOURCE.read_bytes(), *(h.read_bytes() for h in headers),
                                               tasks_h.encode(), " ".join(_FLAGS).encode()))
    target = directory / f"{LIBRARY_NAME}.so"
    if target.exists():
        return target
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{LIBRARY_NAME}-", dir=directory.parent))
    try:
        built = staging / target.name
        (staging / "include").mkdir()
        (staging / "include" / "npu_tasks.h").write_text(tasks_h)
        dirs = (SOURCE_DIR, UAPI_HEADER.parent, staging / "include")
        done = subprocess.run([cc, *_FLAGS, *(f"-I{d}" for d in dirs), f"-Wl,-soname,{target.name}",
                               "-o", str(built), str(SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            raise CBuildError(f"{cc} failed to build {SOURCE.name}:\n{done.stderr.strip()}")
        publish_build(staging, directory, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def include_dirs() -> tuple[Path, ...]:
    """What a program including nvdla_port.h needs: nvdla_port.h, npu_uapi.h and the
    generated npu_tasks.h (building the library if needed)."""
    return (SOURCE_DIR, UAPI_HEADER.parent, build().parent / "include")
