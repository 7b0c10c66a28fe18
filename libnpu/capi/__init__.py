"""libnpu's C libraries: their sources (``*.c``, ``*.h``) and the builder they share.

- ``embedding``: builds a shared library whose exported C functions run Python (cffi's
  embedding mode), cached by content hash and Python version. The seed runtime's C API
  (``npu.h``, implemented in ``libnpu.tools.capi``) and the LiteRT delegate use it.
- ``nvdla_port.h`` / ``nvdla_port.c``: NVDLA's portability layer in plain C over the device
  node and ``kmd_fuse/uapi/npu_uapi.h`` (no Python), built by ``libnpu.capi.nvdla``.
- ``npu_tasks.h``: the chip's task descriptor formats for C, checked against
  ``npu_hw`` by the tests.
"""
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

#: Where the C sources and headers of this package live (also an include directory).
SOURCE_DIR = Path(__file__).resolve().parent

__all__ = ["SOURCE_DIR", "CBuildError", "publish_build", "c_compiler", "cache_entry", "build_cached"]


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


def build_cached(library_name: str, source: Path, flags: tuple[str, ...], key_parts: Iterable[bytes],
                 include_dirs: Iterable[Path], generated: Mapping[str, str] | None = None) -> Path:
    """Compile ``source`` into the cache entry ``<library_name>-<hash>/<library_name>.so``
    unless it is there; returns its absolute path. ``key_parts``: what the library is made
    of besides ``source`` and ``flags`` (its headers). ``generated``: files (path in the entry
    -> text) written before compiling, their directories included; they stay in the entry."""
    cc = c_compiler()
    generated = dict(generated or {})
    directory = cache_entry(library_name, cc, (source.read_bytes(), *key_parts, " ".join(flags).encode(),
                                               *(f"{name}\0{text}".encode() for name, text in generated.items())))
    target = directory / f"{library_name}.so"
    if target.exists():
        return target
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{library_name}-", dir=directory.parent))
    try:
        dirs = list(include_dirs)
        for name, text in generated.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if path.parent not in dirs:
                dirs.append(path.parent)
        done = subprocess.run([cc, *flags, *(f"-I{d}" for d in dirs), f"-Wl,-soname,{target.name}",
                               "-o", str(staging / target.name), str(source)], capture_output=True, text=True)
        if done.returncode != 0:
            raise CBuildError(f"{cc} failed to build {source.name}:\n{done.stderr.strip()}")
        publish_build(staging, directory, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
