"""libnvdla_port.so misused from C (docs/security.md, "Round 3 attacks"): forged, freed and
foreign handles, double frees, use after close, and calls racing a close or a destroy in
other threads. Each attack runs in a process of its own (tests/libnpu/capi/nvdla_misuse.c)
and must end with every call answered by an NvError: no crash, no hang, nothing leaked.
The handle attacks run a second time on the library's source built with AddressSanitizer,
which sees a read of freed memory that happens not to crash."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import libnpu
from libnpu.capi import nvdla

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

SOURCE = Path(__file__).with_name("nvdla_misuse.c")


def _flags(*which: str) -> list[str]:
    return subprocess.run([sys.executable, "-m", "libnpu.tools", "capi", "--nvdla", *which],
                          capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("nvdla_misuse")
    built = {"library": out / "misuse", "asan": out / "misuse_asan"}
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(SOURCE), *_flags("--cflags", "--libs"),
                    "-pthread", "-o", str(built["library"])], check=True)
    asan = subprocess.run(["gcc", "-std=gnu11", "-g", "-fsanitize=address", "-Wall", "-Wextra", "-Werror", str(SOURCE),
                           str(nvdla.SOURCE), *_flags("--cflags"), "-pthread", "-o", str(built["asan"])],
                          capture_output=True, text=True)
    if asan.returncode != 0:
        del built["asan"]            # no libasan here: the library build still runs every attack
    return built


def memory_used(devroot: Path) -> int:
    with libnpu.initialize(devroot) as session:
        return session.open(0).info()["memory_used"]


@pytest.mark.parametrize("build, attack", [("library", "forged"), ("library", "freed"),
                                           ("library", "racing_close"), ("asan", "forged"), ("asan", "freed")])
def test_misused_handles_are_refused_with_an_nverror(npu, programs, build, attack):
    if build not in programs:
        pytest.skip("gcc cannot build with -fsanitize=address here")
    before = memory_used(npu.devroot)
    # the timeout only ends a hang (a failure this test looks for); it bounds no timing
    done = subprocess.run([str(programs[build]), attack], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NPU_DEVROOT": str(npu.devroot)})
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr[-3000:]}"
    assert done.stdout.strip() == "ok"
    assert memory_used(npu.devroot) == before       # every buffer given back


def test_a_devroot_too_long_for_a_path_is_refused_not_cut(npu, monkeypatch):
    """NPU_DEVROOT + "/npu0" past PATH_MAX used to be cut to fit, which named another file:
    here the devroot names the node itself (a file: <devroot>/npu0/npu0 does not exist),
    spelled out to 4095 characters, which the cut path then opened as a device."""
    import ctypes
    lib = ctypes.CDLL(str(nvdla.build()))
    head = f"{npu.devroot}/"
    root = head + "./" * ((4095 - len(head) - len("npu0")) // 2) + "npu0"
    root = root[:len(head)] + "/" * (4095 - len(root)) + root[len(head):]    # exactly 4095 characters
    assert len(root) == 4095 and os.path.samefile(root, npu.devroot / "npu0")
    monkeypatch.setenv("NPU_DEVROOT", root)
    session, device = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.NvDlaInitialize(ctypes.byref(session)) == 0
    try:
        assert lib.NvDlaOpen(session, 0, ctypes.byref(device)) == 4        # NvError_BadParameter
        assert device.value is None
    finally:
        lib.NvDlaDestroy(session)
