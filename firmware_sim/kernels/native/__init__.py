"""The C inner loops of the chip's kernels (``int8_kernels.c``, ``data_kernels.c``,
``int16_kernels.c``, ``binary16_kernels.c``, ``gemm_kernels.c``, ``int16x16_kernels.c``,
``resize_kernels.c``, ``softmax16_kernels.c``, ``transpose_conv_kernels.c``, ``norm_kernels.c``),
built on first use.

numpy cannot get under LiteRT's C++ reference for small depthwise layers and batch-1
fully connected layers: there the cost is per-call overhead, not arithmetic. These
kernels are compiled with the system C compiler into a shared library and called through
cffi (ABI mode, so no Python headers are needed).

Convolutions use oneDNN's int8 GEMM (``dnnl_gemm_s8s8s32``, Debian ``libdnnl-dev``) when
its header is installed. Measured 2026-11-24 on our layer shapes (M x N x K, one thread,
``-O3 -march=native``, 0 mismatches against exact sums for both): oneDNN 142-186 GMAC/s
(1024x16x144 in 16.6 us, 625x64x576 in 147 us) against gemmlowp's 13-24 GMAC/s (111 us and
1808 us); hence oneDNN. Without it (or with ``NPU_NATIVE_DNNL=0``) the library is built
without ``npu_conv_s8`` and convolutions take the numpy path; :func:`dnnl_missing` says why. The library is cached under
``$NPU_CACHE_DIR/native`` (default ``~/.cache/npu-emu/native``), named by a hash of the
source, the flags, the compiler and the CPU, so it is rebuilt whenever any of those change.

``library()`` returns the loaded library, or None when native kernels are turned off
(``NPU_NATIVE_KERNELS=0``) or cannot be built (no compiler): the kernels then take their
numpy paths, which compute the same bytes.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading

# CPython's built-in BLAKE2, not hashlib: hashlib loads OpenSSL, whose start-up touches
# 3 MB in every chip process (measured in /proc/<pid>/smaps) for one hash of the source.
from _blake2 import blake2b
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cffi

__all__ = ["library", "ffi", "build", "enabled", "has_dnnl", "dnnl_missing", "SOURCE", "SOURCES",
           "NativeBuildError"]

SOURCE = Path(__file__).with_name("int8_kernels.c")
HEADER = SOURCE.with_suffix(".h")
# Headers between the C files only (cffi reads HEADER alone); part of the build's hash.
PRIVATE_HEADERS = (SOURCE.with_name("gemm_kernels.h"), SOURCE.with_name("int16_common.h"))
# A graph job's steps on two threads (firmware_sim.task_graph), declared apart: it is not a kernel.
GRAPH_HEADER = SOURCE.with_name("graph_steps.h")
# A core's user-queue service loop (firmware_sim.queue_service), declared apart: not a kernel either.
QUEUE_HEADER = SOURCE.with_name("queue_service.h")
# Every C file of the library (one header for the kernels): the int8 kernels, data movement
# and tables, the int16 x int8 kernels, int16 ADD/MUL/PRELU/MAXIMUM/MINIMUM, the VNNI GEMM of small convolutions,
# the int16 x int16 kernels and int16 pooling, the graph runner, RESIZE, int16 SOFTMAX, TRANSPOSE_CONV and
# int8 L2_NORMALIZATION, and the user-queue service loop.
SOURCES = (SOURCE, SOURCE.with_name("data_kernels.c"), SOURCE.with_name("int16_kernels.c"),
           SOURCE.with_name("binary16_kernels.c"), SOURCE.with_name("gemm_kernels.c"),
           SOURCE.with_name("int16x16_kernels.c"), SOURCE.with_name("graph_steps.c"),
           SOURCE.with_name("resize_kernels.c"), SOURCE.with_name("softmax16_kernels.c"),
           SOURCE.with_name("transpose_conv_kernels.c"), SOURCE.with_name("norm_kernels.c"),
           SOURCE.with_name("queue_service.c"))
# -fno-trapping-math: nothing reads the floating-point exception flags, and without it GCC
# will not vectorize a float -> int conversion under a condition (QUANTIZE's loop). Results
# stay IEEE-exact (no -ffast-math). -Wundef: a feature switch tested by `#if` in a file that
# does not see its definition (int16_common.h's INT16_LANES) fails the build instead of
# compiling the scalar loop alone.
_FLAGS = ("-O3", "-fwrapv", "-fno-trapping-math", "-march=native", "-shared", "-fPIC", "-std=c11",
          "-Wall", "-Wundef", "-Werror")

ffi = cffi.FFI()
ffi.cdef(HEADER.read_text())
ffi.cdef(GRAPH_HEADER.read_text())
ffi.cdef(QUEUE_HEADER.read_text())


class NativeBuildError(RuntimeError):
    """The C kernels could not be compiled."""


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = [line for line in text.splitlines()
              if line.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(wanted))) or platform.machine()


def _cache_dir() -> Path:
    root = os.environ.get("NPU_CACHE_DIR") or str(Path.home() / ".cache" / "npu-emu")
    return Path(root) / "native"


DNNL_HEADER = "oneapi/dnnl/dnnl.h"


def dnnl_missing(cc: str | None = None) -> str | None:
    """Why the library would be built without oneDNN, or None when it is built with it."""
    if os.environ.get("NPU_NATIVE_DNNL", "1") == "0":
        return "NPU_NATIVE_DNNL=0"
    cc = cc or _compiler()
    if cc is None:
        return "no C compiler"
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input=f"#include <{DNNL_HEADER}>\n",
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{DNNL_HEADER} not found (apt-get install libdnnl-dev)"
    return None


def _variant(cc: str) -> tuple[str, ...]:
    """Extra compiler arguments: oneDNN's when it is there."""
    return () if dnnl_missing(cc) else ("-DNPU_HAVE_DNNL", "-ldnnl")


def _target(cc: str, variant: tuple[str, ...]) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    h = blake2b(digest_size=16)
    sources = (path.read_bytes() for path in (*SOURCES, *PRIVATE_HEADERS, GRAPH_HEADER, QUEUE_HEADER))
    for part in (*sources, HEADER.read_bytes(), " ".join(_FLAGS + variant).encode(),
                 version.encode(),
                 _cpu_signature().encode(), platform.machine().encode()):
        h.update(part)
        h.update(b"\0")
    return _cache_dir() / f"int8_kernels-{h.hexdigest()[:16]}.so"


def build() -> Path:
    """Compile the library unless the cache holds it already; returns its path.

    Safe when several processes build at once (each compiles to a private file and
    renames it into place)."""
    cc = _compiler()
    if cc is None:
        raise NativeBuildError("no C compiler (cc/gcc) found; install gcc")
    variant = _variant(cc)
    target = _target(cc, variant)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem, suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([cc, *_FLAGS, "-o", tmp, *map(str, SOURCES), *variant, "-lm", "-pthread"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(f"{cc} failed to build {', '.join(p.name for p in SOURCES)}:\n{done.stderr}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


_lock = threading.Lock()
_loaded: object | None = None
_tried = False
_enabled = os.environ.get("NPU_NATIVE_KERNELS", "1") != "0"


def library():
    """The loaded C kernels (a cffi library), or None when turned off or unbuildable."""
    global _loaded, _tried
    if _tried or not _enabled:
        return _loaded if _enabled else None
    with _lock:
        if not _tried:
            try:
                _loaded = ffi.dlopen(str(build()))
            except (NativeBuildError, OSError) as exc:
                print(f"npu-emu: native int8 kernels unavailable, using numpy: {exc}",
                      file=sys.stderr)
            _tried = True
    return _loaded


def has_dnnl() -> bool:
    """True when the loaded library has the oneDNN convolution."""
    lib = library()
    return lib is not None and bool(lib.npu_have_dnnl())


@contextmanager
def enabled(flag: bool) -> Iterator[None]:
    """Turn the C kernels on or off inside a ``with`` block (tests and benchmarks compare
    the two paths)."""
    global _enabled
    before, _enabled = _enabled, bool(flag)
    try:
        yield
    finally:
        _enabled = before
