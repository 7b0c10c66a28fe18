"""The cffi embedding builder: a library whose C functions run Python, used from a Python
host (ctypes) and from a C host (a gcc-built program that starts the interpreter itself)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from libnpu.capi.embedding import EmbeddingBuildError, build_embedded, cache_dir

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

API = "int demo_scaled_sum_py(int a, int b);"
CDEF = "int demo_scale(void);"
# The exported entry point is C: it starts Python safely, then calls the Python function.
C_SOURCE = """
int demo_scale(void) { return 10; }
int demo_scaled_sum(int a, int b) { embedded_python_start(); return demo_scaled_sum_py(a, b); }
"""
# Imports numpy and libnpu: in a C host they come from the venv's site-packages, which
# the builder's init preamble puts on sys.path.
INIT = """
import numpy, libnpu

@ffi.def_extern()
def demo_scaled_sum_py(a, b):
    return int(numpy.int64(a + b) * lib.demo_scale())
"""

HOST = r"""
#include <stdio.h>
int demo_scaled_sum(int a, int b);
int main(void) {
    printf("%d %d\n", demo_scaled_sum(1, 2), demo_scaled_sum(20, 22));
    return 0;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def build() -> Path:
    return build_embedded("libdemo_sum", api=API, cdef=CDEF, c_source=C_SOURCE, init_code=INIT)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The demo library built once for the tests that only use it (a build is a gcc run
    against Python's headers); test_builds_into_the_cache_once builds in a cache of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NPU_CACHE_DIR", str(tmp_path_factory.mktemp("embedded") / "cache"))
        return build()


def test_builds_into_the_cache_once(cache):
    first = build()
    assert first.is_file() and first.name == "libdemo_sum.so"
    assert first.parent.parent == cache_dir() == cache / "embedded"
    assert first.parent.name.startswith("libdemo_sum-py3")
    stamp = first.stat().st_mtime_ns
    assert build() == first and first.stat().st_mtime_ns == stamp        # a cache hit
    other = build_embedded("libdemo_sum", api=API, cdef=CDEF, c_source=C_SOURCE.replace("10", "11"), init_code=INIT)
    assert other != first and other.parent.parent == first.parent.parent  # another source, another entry
    assert not [p for p in cache.joinpath("embedded").iterdir() if p.name.startswith(".")]  # no staging left


def test_python_host_through_ctypes(built):
    library = ctypes.PyDLL(str(built))
    assert library.demo_scaled_sum(2, 3) == 50


# cffi's start-up spin lock is a word of libpython that a capsule attribute lookup makes
# non-zero; without embedded_python_start() the first call below never returns.
PYTHON_HOST = """
import ctypes, datetime, sys
getattr(datetime.datetime_CAPI, "anything", None)
library = getattr(ctypes, sys.argv[2])(sys.argv[1])
print(library.demo_scaled_sum(4, 5), library.demo_scaled_sum(1, 1))
"""


@pytest.mark.parametrize("loader", ["PyDLL", "CDLL"])
def test_python_host_whose_capsule_type_is_version_tagged(built, loader):
    done = subprocess.run([sys.executable, "-c", PYTHON_HOST, str(built), loader], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["90", "20"]


def test_c_host_starts_python_with_the_venvs_packages(built, tmp_path):
    path = built
    source = tmp_path / "host.c"
    source.write_text(HOST)
    program = tmp_path / "host"
    subprocess.run(["gcc", "-Wall", "-Werror", str(source), f"-L{path.parent}", "-ldemo_sum",
                    f"-Wl,-rpath,{path.parent}", "-o", str(program)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["30", "420"]


def test_a_c_error_is_reported_with_the_compilers_message(cache):
    with pytest.raises(EmbeddingBuildError, match="undeclared_thing"):
        build_embedded("libdemo_broken", api=API, c_source="int demo_broken(void) { return undeclared_thing; }",
                       init_code=INIT)
    assert not [p for p in cache.joinpath("embedded").iterdir()]       # nothing half-built left behind


def test_a_name_that_is_no_c_identifier_is_refused(cache):
    with pytest.raises(ValueError, match="C identifier"):
        build_embedded("lib-npu", api=API, init_code=INIT)
