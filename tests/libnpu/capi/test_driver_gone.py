"""The C APIs when the driver goes away while a C program holds a model or a device (the
driver stopped with ``npu-kmd stop``, or its daemon killed): every call of ``npu.h`` and of
``nvdla_port.h`` ends with a status (and for ``npu.h`` a one-line message naming the driver),
nothing is printed, no traceback, and freeing and closing succeed: what the program held
went with the driver (docs/c_api.md, "When the driver goes away")."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from libnpu.nvdla import NvError
from libnpu.tools.c_runtime import Status
from tests.support.device import chip_pid, core_pids, wait_until

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")

HERE = Path(__file__).resolve().parent


def _flags(*words: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "libnpu.tools", "capi", *words, "--cflags", "--libs"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("driver_gone")
    built = {}
    for name, words in (("runtime_driver_gone", ()), ("nvdla_driver_gone", ("--nvdla",))):
        built[name] = out / name
        subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", str(HERE / f"{name}.c"), *_flags(*words),
                        "-o", str(built[name])], check=True)
    return built


def _gone(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def stop_the_driver(npu, how: str) -> None:
    """``npu-kmd stop``, or SIGKILL to the daemon (its node then answers ENOTCONN until a stop).

    A killed daemon's chip and cores die after it (PR_SET_PDEATHSIG, one process after the
    other): until the last core is gone a job on a user queue may still complete, so the
    driver is gone once all of them are."""
    if how == "stopped":
        npu.kmd("stop")
        return
    pid = int(re.search(r"pid (\d+)", npu.kmd("status").stdout).group(1))
    chip = chip_pid(npu.devroot)
    processes = [pid, chip, *core_pids(npu.devroot)]
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: all(_gone(p) for p in processes), 60)


def run_past_the_driver(program: list[str], npu, how: str) -> tuple[dict[str, tuple[int, str]], str]:
    """Run ``program`` until it prints "ready", take the driver away, let it go on; its
    reports {call: (status, message)} and its stderr."""
    env = {**os.environ, "NPU_DEVROOT": str(npu.devroot)}
    proc = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline() == "ready\n", proc.communicate()[1]
        stop_the_driver(npu, how)
        out, err = proc.communicate("go\n", timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    reports = {}
    for line in out.splitlines():
        call, status, *message = line.split(" ", 2)
        reports[call] = (int(status), message[0] if message else "")
    return reports, err


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_runtime_calls_after_the_driver_went_away(fresh_npu, programs, resnet8_path, how):
    reports, err = run_past_the_driver([str(programs["runtime_driver_gone"]), str(resnet8_path)], fresh_npu, how)
    assert err == ""                                           # no "internal error", no traceback
    node, devroot = fresh_npu.node, fresh_npu.devroot
    status, message = reports["npu_runtime_infer"]
    assert status == Status.DEVICE_ERROR
    assert message.startswith(f"{node}: the driver is down (") and f"npu-kmd start --devroot {devroot}" in message
    assert reports["npu_runtime_num_inputs"] == (1, "")        # what the handle knows needs no driver
    assert reports["npu_runtime_num_outputs"] == (1, "")
    assert reports["npu_runtime_input_bytes"] == (3072, "")
    assert reports["npu_runtime_output_bytes"] == (10, "")
    assert reports["npu_runtime_get_input_size"][0] == Status.INVALID_ARGUMENT    # no face detector
    assert reports["npu_runtime_infer_image"][0] == Status.INVALID_ARGUMENT
    status, message = reports["npu_runtime_init"]
    assert status == Status.DEVICE_ERROR and f"npu-kmd start --devroot {devroot}" in message
    assert reports["npu_runtime_free"] == (0, "")              # freed: no message left behind


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_nvdla_calls_after_the_driver_went_away(fresh_npu, programs, how):
    reports, err = run_past_the_driver([str(programs["nvdla_driver_gone"])], fresh_npu, how)
    assert err == ""
    gone = NvError.NotInitialized                               # nvdla_port.h: the driver is gone
    no_node = NvError.FileOperationFailed if how == "stopped" else gone   # stop removes the node
    assert {call: status for call, (status, _) in reports.items()} == {
        "NvDlaSubmit": gone, "NvDlaAllocMem": gone, "NvDlaOpen": no_node,
        "NvDlaMemGetAddress": NvError.Success, "NvDlaFreeMem": NvError.Success,
        "NvDlaClose": NvError.Success, "NvDlaDestroy": NvError.Success}
