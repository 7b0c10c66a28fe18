"""libnpu's C libraries: their sources (``*.c``, ``*.h``) and the builder they share.

- ``embedding``: builds a shared library whose exported C functions run Python (cffi's
  embedding mode), cached by content hash and Python version. The seed runtime's C API
  (``npu.h``, implemented in ``libnpu.tools.capi``) and the LiteRT delegate use it.
- ``nvdla_port.h`` / ``nvdla_port.c``: NVDLA's portability layer in plain C over the device
  node and ``kmd_fuse/uapi/npu_uapi.h`` (no Python), built by ``libnpu.capi.nvdla``.
- ``npu_tasks.h``: the chip's task descriptor formats for C, checked against
  ``firmware_sim/spec`` by the tests.
"""
from pathlib import Path

#: Where the C sources and headers of this package live (also an include directory).
SOURCE_DIR = Path(__file__).resolve().parent

__all__ = ["SOURCE_DIR", "CBuildError", "publish_build"]


class CBuildError(RuntimeError):
    """A C library could not be built (no compiler, missing headers, a compile error)."""


def publish_build(built: Path, directory: Path, target: Path) -> None:
    """Rename the finished private build directory ``built`` to the cache entry ``directory``
    (one atomic step, so no reader sees half a library). Losing that race to another
    builder of the same entry is fine: ``target``, the library in ``directory``, is there."""
    try:
        built.rename(directory)
    except OSError:
        if not target.exists():          # another builder won the race, or a real error
            raise
