"""NVDLA's portability layer in C (nvdla_port.h, libnvdla_port.so, no Python inside) and the
generated task-descriptor header, built with the flags `npu capi --nvdla` prints and run
against a real device."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import libnpu
from libnpu.capi import nvdla, tasks_header
from libnpu.nvdla import NvDlaHeap, NvError
from npu_hw import tasks

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "nvdla_fc.c"


def npu_cli(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "libnpu.tools", *args], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.fixture(scope="module")
def flags() -> list[str]:
    return npu_cli("capi", "--nvdla", "--cflags", "--libs")


def compile_c(source: Path, out: Path, flags: list[str]) -> Path:
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(source), *flags, "-o", str(out)],
                   check=True)
    return out


@pytest.fixture(scope="module")
def example(tmp_path_factory, flags) -> Path:
    return compile_c(EXAMPLE, tmp_path_factory.mktemp("nvdla") / "nvdla_fc", flags)


def test_the_library_runs_no_python(flags):
    library = nvdla.build()
    dynamic = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    assert "python" not in dynamic.lower()
    assert f"-L{library.parent}" in flags and "-lnvdla_port" in flags


def memory_used(devroot: Path) -> int:
    with libnpu.initialize(devroot) as session:
        return session.open(0).info()["memory_used"]


def test_example_copies_and_runs_an_int8_fc_job(npu, example):
    before = memory_used(npu.devroot)
    done = subprocess.run([str(example)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NPU_DEVROOT": str(npu.devroot)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dma copy 65536 bytes ok; fully connected 2x16 -> 2x8 ok" in done.stdout
    assert done.stdout.strip().endswith("ok")
    assert done.stderr == ""                      # diagnostics only with NPU_DEBUG
    assert memory_used(npu.devroot) == before     # everything freed


def test_no_device_is_nverror_file_operation_failed(example, tmp_path):
    done = subprocess.run([str(example)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NPU_DEVROOT": str(tmp_path), "NPU_DEBUG": "1"})
    assert done.returncode == 1
    assert f"nvdla_port: open {tmp_path}/npu0: No such file or directory" in done.stderr
    assert f"failed: NvError {NvError.FileOperationFailed.value}" in done.stderr


def test_error_codes_and_heaps_match_the_python_port_layer(tmp_path, flags):
    header = nvdla.HEADER.read_text()
    names = re.findall(r"^\s*(NvSuccess|NvError_\w+|NvDlaHeap_\w+) = ", header, re.M)
    source = tmp_path / "codes.c"
    source.write_text('#include <stdio.h>\n#include "nvdla_port.h"\nint main(void) {\n' +
                      "".join(f'    printf("{n} %d\\n", (int){n});\n' for n in names) + "    return 0;\n}\n")
    program = compile_c(source, tmp_path / "codes", flags)
    values = dict(line.split() for line in subprocess.run([str(program)], capture_output=True, text=True,
                                                          check=True).stdout.splitlines())
    expected = {"NvSuccess": NvError.Success.value,
                **{f"NvError_{e.name}": e.value for e in NvError if e is not NvError.Success},
                **{f"NvDlaHeap_{h.name}": h.value for h in NvDlaHeap}}
    assert {k: int(v) for k, v in values.items()} == expected


def test_task_header_covers_the_spec_and_compiles_with_its_layout_checks(tmp_path, flags):
    text = tasks_header.render()
    for task in tasks.TASK_TYPES.values():
        assert f"#define NPU_OP_{task.name} {task.opcode:#04x}\n" in text
        assert f"struct npu_task_{task.name.lower()} {{" in text
        assert f"NPU_TASKS_ASSERT(sizeof(struct npu_task_{task.name.lower()}) == {task.size}" in text
        for field, (_, offset, *_rest) in task.dtype.fields.items():
            assert f"NPU_TASKS_ASSERT(offsetof(struct npu_task_{task.name.lower()}, {field}) == {offset}" in text
    # the header the build wrote is the spec's, and the C compiler agrees with every offset
    assert (nvdla.build().parent / "include" / "npu_tasks.h").read_text() == text
    source = tmp_path / "layout.c"
    source.write_text('#include "npu_tasks.h"\nint main(void) { return 0; }\n')
    compile_c(source, tmp_path / "layout", flags)
    if not shutil.which("g++"):
        return
    include = next(f for f in flags if f.startswith("-I") and f.endswith("/include"))
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-x", "c++", str(source), include, "-o",
                    str(tmp_path / "layout_cxx")], check=True)             # C++ programs too


def test_allocations_reconnect_after_the_driver_drops_an_idle_hand_over(tmp_path, monkeypatch, flags):
    from tests.support.device import start_npu, stop_npu
    program = compile_c(Path(__file__).with_name("nvdla_reconnect.c"), tmp_path / "reconnect", flags)
    monkeypatch.setenv("NPU_HANDOVER_IDLE_S", "0.3")
    npu = start_npu(tmp_path)
    try:
        done = subprocess.run([str(program)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NPU_DEVROOT": str(npu.devroot), "NPU_DEBUG": "1"})
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "ok"
    finally:
        stop_npu(npu)
