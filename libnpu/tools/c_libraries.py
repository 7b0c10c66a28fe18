"""The C libraries a program can build against, and the flags ``npu capi`` prints for them.

- ``RUNTIME``: ``npu.h`` / ``libnpu_runtime.so``, the seed runtime's C API (Python inside,
  :mod:`libnpu.tools.c_runtime`).
- ``NVDLA``: ``nvdla_port.h`` / ``libnvdla_port.so``, NVDLA's portability layer in plain C
  (:mod:`libnpu.capi.nvdla`).

Each library is built on first use into the cache; the flags point into it and set an
rpath, so a program runs without ``LD_LIBRARY_PATH``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libnpu.capi import SOURCE_DIR, CBuildError, nvdla

from . import c_runtime

__all__ = ["CLibrary", "RUNTIME", "NVDLA", "CBuildError"]


@dataclass(frozen=True)
class CLibrary:
    header: Path
    build: Callable[[], Path]
    include_dirs: Callable[[], tuple[Path, ...]]

    def cflags(self) -> str:
        return " ".join(f"-I{d}" for d in self.include_dirs())

    def libs(self) -> str:
        path = self.build()
        return f"-L{path.parent} -l{path.stem.removeprefix('lib')} -Wl,-rpath,{path.parent}"

    def describe(self, what: str) -> str:
        """``cflags``, ``libs`` or ``path`` (the library's absolute path, built if needed)."""
        if what == "path":
            return str(self.build())
        return self.cflags() if what == "cflags" else self.libs()


RUNTIME = CLibrary(c_runtime.HEADER, c_runtime.library, lambda: (SOURCE_DIR,))
NVDLA = CLibrary(nvdla.HEADER, nvdla.build, nvdla.include_dirs)
