"""libnpu's C libraries: their sources (``*.c``, ``*.h``) and the builder they share.

- ``embedding``: builds a shared library whose exported C functions run Python (cffi's
  embedding mode), cached by content hash and Python version. The seed runtime's C API
  (``npu.h``, implemented in ``libnpu.tools.capi``) and the LiteRT delegate use it.
- ``nvdla_port.h`` / ``nvdla_port.c``: NVDLA's portability layer in plain C over the device
  node and ``kmd_fuse/uapi/npu_uapi.h`` (no Python), built by ``libnpu.capi.nvdla``.
- ``npu_tasks.h``: the chip's task descriptor formats for C, checked against
  ``firmware_sim/spec`` by the tests.
"""
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: Where the C sources and headers of this package live (also an include directory).
SOURCE_DIR = Path(__file__).resolve().parent

__all__ = ["SOURCE_DIR", "CBuildError", "publish_build", "c_compiler", "cache_entry"]


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


def c_compiler() -> str:
    """The C compiler to build with: ``$CC``, else ``cc`` or ``gcc`` on the PATH."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise CBuildError("no C compiler (cc/gcc) found; install gcc (./scripts/bootstrap does)")
    return cc


def _compiler_identity(cc: str) -> bytes:
    """The compiler's resolved path, size and modification time: every process that loads a
    library looks it up, and running ``cc --version`` for it cost 10 ms."""
    path = shutil.which(cc) or cc
    try:
        real = os.path.realpath(path)
        stat = os.stat(real)
    except OSError:
        return subprocess.run([cc, "--version"], capture_output=True).stdout
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}".encode()


def cache_entry(library_name: str, cc: str, parts: Iterable[bytes]) -> Path:
    """The cache directory of ``library_name`` built by ``cc`` from ``parts`` (sources,
    headers, flags): ``$NPU_CACHE_DIR/clib/<name>-<hash>`` (default ``~/.cache/npu-emu``)."""
    key = hashlib.sha256()
    for part in (*parts, _compiler_identity(cc)):
        key.update(part)
        key.update(b"\0")
    root = Path(os.environ.get("NPU_CACHE_DIR") or str(Path.home() / ".cache" / "npu-emu")) / "clib"
    return root / f"{library_name}-{key.hexdigest()[:16]}"
