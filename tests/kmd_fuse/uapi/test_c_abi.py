"""The ABI is language-neutral: a C program including npu_uapi.h drives the device,
built against today's header and against the ABI 2.0 header frozen in abi_v2/ (an
old client keeps working against a newer driver)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from kmd_fuse.uapi import HEADER_PATH

HEADERS = {"today": HEADER_PATH.parent, "abi_v2": Path(__file__).with_name("abi_v2")}


@pytest.fixture(scope="module", params=sorted(HEADERS))
def abi_client(tmp_path_factory, request):
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp(request.param) / "abi_client"
    source = Path(__file__).with_name("abi_client.c")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(HEADERS[request.param]),
                    str(source), "-o", str(out)], check=True)
    return out


def test_header_compiles_with_its_static_asserts(abi_client):
    assert abi_client.exists()     # _Static_assert checks every command number against _IOWR


def test_c_client_allocs_maps_submits_and_waits(npu, abi_client):
    result = subprocess.run([str(abi_client), str(npu.node)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "model npu-emu cores 2" in result.stdout
    assert result.stdout.strip().endswith("ok")
