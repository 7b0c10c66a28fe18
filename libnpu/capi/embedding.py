"""Build shared libraries whose C functions run Python, with cffi's embedding mode.

``build_embedded(name, api=..., init_code=...)`` compiles ``<name>.so`` once and returns its
path. The library exports the functions declared in ``api``; each is implemented in Python
by ``@ffi.def_extern()`` in code that ``init_code`` runs on the first call. Loaded into a
Python process the library uses that interpreter (ctypes, ``load_delegate``); loaded into
a C program it starts one.

- **Cache.** ``$NPU_CACHE_DIR/embedded/<name>-py<MAJOR><MINOR>-<hash>/<name>.so`` (default
  ``~/.cache/npu-emu``, the chip's C kernels' convention). The hash covers every input of
  the build: the declarations, the C source, the init code, the files in ``depends``,
  the Python that links it (cffi always links libpython: one build per Python version and
  installation), cffi's and the compiler's versions. A build compiles in a private
  directory and renames it into place, so concurrent builders never see half a library.
  The file keeps its plain name inside the hashed directory: ``-L<dir> -l<name minus lib>``
  links against it, and the directory is the rpath.
- **Python path in a C host.** A C program that loads the library starts the base Python
  (``sys.prefix`` is the installation, not the venv), so the venv's packages are missing.
  The generated init code first adds the builder's site-packages (``site.addsitedir``, so
  ``.pth`` files - the editable install - are honoured) and the directory holding
  ``libnpu``, when the interpreter runs outside any venv; then binds ``ffi`` and ``lib``
  (``from <module> import ffi, lib``) and runs ``init_code``.
- **libpython at run time.** The library is linked with an rpath to the directory of the
  ``libpython3.X.so`` it was built against, so a C program needs no ``LD_LIBRARY_PATH``.

- **Starting Python from C: call ``embedded_python_start()`` first.** cffi serializes its
  start-up with a spin lock on a word inside libpython (``PyCapsule_Type.tp_version_tag``
  up to Python 3.11) that it expects to be zero. In a Python host that word is non-zero as
  soon as any code looked up an attribute on a capsule (numpy does): the first call into
  the library then spins forever (measured: a ctypes call after
  ``getattr(datetime.datetime_CAPI, "x", None)`` never returns). The builder therefore
  puts ``static void embedded_python_start(void)`` into the C source: in a Python host it
  takes the GIL, invalidates that word through ``PyType_Modified`` (the public way to drop
  a type's cached version) and makes the first call while still holding the GIL, so no
  other thread can set it again; in a C host cffi starts the interpreter as usual. Exported
  entry points should be C functions in ``c_source`` that call ``embedded_python_start()``
  and then the Python-implemented functions of ``api`` (each later call returns at once).

Errors: :class:`EmbeddingBuildError` with the compiler's message and, when ``Python.h``
or the shared libpython is missing, the package to install (``python3-dev`` /
``libpython3.X-dev`` on Debian).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

import cffi  # type: ignore[import-untyped]  # no stubs shipped

from libnpu.capi import CBuildError, publish_build

__all__ = ["build_embedded", "cache_dir", "module_name", "EmbeddingBuildError"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EmbeddingBuildError(CBuildError):
    """The embedded library could not be built (no compiler, no Python headers, a C error)."""


def cache_dir() -> Path:
    """The root of the embedded libraries' cache (``$NPU_CACHE_DIR/embedded``)."""
    root = os.environ.get("NPU_CACHE_DIR") or str(Path.home() / ".cache" / "npu-emu")
    return Path(root) / "embedded"


def module_name(name: str) -> str:
    """The Python module name cffi gives the library (what ``init_code`` could import)."""
    return f"_{name}_cffi"


def _python_tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def _libpython_dir() -> str | None:
    """The directory of the shared libpython this interpreter provides, if it has one."""
    libdir = sysconfig.get_config_var("LIBDIR")
    library = sysconfig.get_config_var("LDLIBRARY") or ""
    if libdir and library.endswith(".so") and (Path(libdir) / library).exists():
        return str(libdir)
    return None


def _python_paths() -> list[str]:
    """What a C host's interpreter needs on sys.path to import what this one imports."""
    paths = [p for p in site.getsitepackages() if Path(p).is_dir()]
    here = str(Path(__file__).resolve().parents[2])      # the directory holding the libnpu package
    if here not in paths:
        paths.append(here)
    return paths


def _start_function(name: str) -> str:
    """The no-op Python function whose first call starts cffi's embedded interpreter."""
    return f"_{name}_python_started"


def _start_source(name: str) -> str:
    """C code put before ``c_source``: ``embedded_python_start()`` (see the module docstring)."""
    start = _start_function(name)
    return f"""
void {start}(void);      /* defined by cffi below; runs the init code on its first call */
static int embedded_python_started_flag;

/* Start the embedded interpreter safely; call it before any Python-implemented function. */
static void embedded_python_start(void)
{{
    if (__atomic_load_n(&embedded_python_started_flag, __ATOMIC_ACQUIRE))
        return;
    if (Py_IsInitialized()) {{              /* a Python host: see libnpu/capi/embedding.py */
        PyGILState_STATE gil = PyGILState_Ensure();
#if PY_VERSION_HEX < 0x030C0000
        PyType_Modified(&PyCapsule_Type);
#endif
        {start}();
        PyGILState_Release(gil);
    }} else {{
        {start}();                          /* a C host: cffi starts Python */
    }}
    __atomic_store_n(&embedded_python_started_flag, 1, __ATOMIC_RELEASE);
}}
"""


def _full_init_code(name: str, init_code: str) -> str:
    preamble = (
        "import site as _site, sys as _sys\n"
        "if _sys.prefix == _sys.base_prefix:      # no venv active: a C host, or the base Python\n"
        f"    for _path in {_python_paths()!r}:\n"
        "        if _path not in _sys.path:\n"
        "            _site.addsitedir(_path)\n"
        f"from {module_name(name)} import ffi, lib\n"
        f"ffi.def_extern(name={_start_function(name)!r})(lambda: None)\n")
    return preamble + init_code


def _compiler_version() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise EmbeddingBuildError("no C compiler (cc/gcc) found; install gcc (./scripts/bootstrap does)")
    return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout


def _check_python_dev() -> None:
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not include.exists():
        raise EmbeddingBuildError(f"Python.h not found in {include.parent}: install the headers of Python {minor} "
                                  f"(Debian: apt-get install python3-dev libpython{minor}-dev)")
    if _libpython_dir() is None and not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        # cffi links -lpython3.X: a static interpreter needs the system's shared one beside it.
        found = any(Path(d, f"libpython{minor}.so").exists() for d in ("/usr/lib", "/usr/lib/x86_64-linux-gnu",
                                                                       "/usr/lib/aarch64-linux-gnu"))
        if not found:
            raise EmbeddingBuildError(f"this Python ({sys.executable}) has no shared libpython{minor}.so: "
                                      f"install libpython{minor}-dev (Debian) or use a Python built with "
                                      "--enable-shared")


# The build runs in a child interpreter: setuptools' compiler machinery keeps global
# state and prints to the terminal; a child keeps both out of the caller's process.
_BUILD_SCRIPT = """
import json, sys, cffi
job = json.load(sys.stdin)
ffi = cffi.FFI()
if job["cdef"]:
    ffi.cdef(job["cdef"])
ffi.embedding_api(job["api"])
ffi.set_source(job["module"], job["c_source"], include_dirs=job["include_dirs"],
               extra_compile_args=job["cflags"], extra_link_args=job["ldflags"])
ffi.embedding_init_code(job["init_code"])
print(ffi.compile(tmpdir=job["tmpdir"], target=job["target"], verbose=False))
"""


def _compiler_messages(output: str) -> str:
    """The compiler's diagnostics out of a failed build's output (not setuptools' traceback)."""
    lines = output.strip().splitlines()
    diagnostics = [line for line in lines if re.search(r":\d+:\d+: (fatal error|error|warning|note):", line)]
    return "\n".join(diagnostics[:20] + lines[-1:])


def build_embedded(name: str, *, api: str, init_code: str, c_source: str = "", cdef: str = "",
                   include_dirs: Sequence[str | os.PathLike] = (), depends: Sequence[str | os.PathLike] = (),
                   extra_compile_args: Sequence[str] = ()) -> Path:
    """Build (unless cached) the shared library ``<name>.so``; returns its absolute path.

    ``name``: the file's stem, a C identifier such as ``"libnpu_runtime"``.
    ``api``: C declarations of the functions implemented in Python (each needs an
    ``@ffi.def_extern()`` in ``init_code``'s reach); C code in ``c_source`` calls them after
    ``embedded_python_start()``. ``cdef``: types, constants and C helper
    functions (defined in ``c_source``) that the Python side uses through ``ffi``/``lib``;
    it is parsed before ``api``. ``c_source``: C code compiled into the library (includes,
    helpers, other exported C functions). ``init_code``: Python run once, on the first call
    of an ``api`` function, with ``ffi`` and ``lib`` already bound (the functions it
    registers with ``@ffi.def_extern()`` must use that ``ffi``). ``include_dirs``: for
    ``c_source``'s ``#include``s; ``depends``: files whose contents also key the cache
    (the headers it includes).

    Raises :class:`EmbeddingBuildError` (with the compiler's output) when it cannot be built.
    """
    if not _NAME.match(name):
        raise ValueError(f"library name {name!r} must be a C identifier (e.g. libnpu_runtime)")
    full_init = _full_init_code(name, init_code)
    api = f"void {_start_function(name)}(void);\n{api}"
    c_source = _start_source(name) + c_source
    cflags = ["-O2", "-Wall", *extra_compile_args]
    libpython = _libpython_dir()
    ldflags = [f"-Wl,-soname,{name}.so"] + ([f"-Wl,-rpath,{libpython}"] if libpython else [])
    key = hashlib.sha256()
    for part in (name, api, cdef, c_source, full_init, json.dumps([str(d) for d in include_dirs]),
                 json.dumps(cflags + ldflags), *(Path(d).read_bytes().hex() for d in depends),
                 sys.version, sysconfig.get_config_var("LIBDIR") or "", cffi.__version__,
                 _compiler_version()):
        key.update(part.encode() if isinstance(part, str) else part)
        key.update(b"\0")
    directory = cache_dir() / f"{name}-{_python_tag()}-{key.hexdigest()[:16]}"
    target = directory / f"{name}.so"
    if target.exists():
        return target
    _check_python_dev()
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=directory.parent))
    try:
        job = {"module": module_name(name), "api": api, "cdef": cdef, "c_source": c_source,
               "init_code": full_init, "include_dirs": [str(d) for d in include_dirs], "cflags": cflags,
               "ldflags": ldflags, "tmpdir": str(staging / "build"), "target": str(staging / f"{name}.so")}
        done = subprocess.run([sys.executable, "-c", _BUILD_SCRIPT], input=json.dumps(job), capture_output=True,
                              text=True)
        built = staging / f"{name}.so"
        if done.returncode != 0 or not built.exists():
            raise EmbeddingBuildError(f"building {name}.so failed:\n{_compiler_messages(done.stdout + done.stderr)}")
        final = staging / "lib"
        final.mkdir()
        built.rename(final / built.name)
        os.chmod(final / built.name, 0o755)
        publish_build(final, directory, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
