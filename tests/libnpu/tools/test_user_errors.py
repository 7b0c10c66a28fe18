"""A user's mistakes with ``npu`` and ``npu-kmd`` get one line on stderr that names the
problem and the next step, exit 1 (failed) or 2 (usage), and never a traceback
(``--debug`` or ``NPU_DEBUG=1`` shows it).  The CLIs run as the user runs them: a process."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.device import REPO, wait_until
from tests.support.shell import attr_dir

NPU = [sys.executable, "-m", "libnpu.tools"]
KMD = [sys.executable, "-m", "kmd_fuse.cli"]

# (cli, arguments, exit code, what stderr's one line must contain); {dev} is a devroot with
# no device in it, {missing} one that does not exist, {model} ResNet-8, {tmp} a scratch dir
BAD_INVOCATIONS = [
    (NPU, "bench nop --devroot {dev}", 1, "no device {dev}/npu0: no driver serves {dev}; start one with: "
                                          "npu-kmd start --devroot {dev}"),
    (NPU, "run {model} --devroot {dev}", 1, "start one with: npu-kmd start --devroot {dev}"),
    (NPU, "bench model {model} --devroot {dev} --no-litert", 1, "start one with: npu-kmd start --devroot {dev}"),
    (NPU, "bench ops --quick --devroot {dev}", 1, "npu-kmd start --devroot {dev}"),
    (NPU, "info --devroot {dev}", 1, "no NPU devices under {dev}; start one with: npu-kmd start --devroot {dev}"),
    (NPU, "smi --devroot {dev}", 1, "no driver serves {dev}; start one with: npu-kmd start --devroot {dev}"),
    (NPU, "top -n 1 --devroot {dev}", 1, "npu-kmd start --devroot {dev}"),
    (NPU, "bench nop --devroot {missing}", 1, "{missing} does not exist (wrong --devroot or NPU_DEVROOT?)"),
    (NPU, "run nosuch.tflite --devroot {dev}", 2, "nosuch.tflite: no such model file"),
    (NPU, "run {tmp}/garbage.nlb --devroot {dev}", 1, "not an NPU loadable"),
    (NPU, "compile {tmp}/garbage.tflite -o {tmp}/out.nlb", 1, "not a TFLite flatbuffer"),
    (NPU, "compile {tmp}/truncated.tflite -o {tmp}/out.nlb", 1, "corrupted or truncated TFLite file"),
    (NPU, "compile {tmp}/reverse.tflite -o {tmp}/out.nlb --strict", 1,
     "reverse: 1 operator(s) cannot run on the NPU (missing: REVERSE_V2) and strict mode refuses CPU fallback"),
    (NPU, "compile {model} -o {tmp}/out.nlb --ops ,", 2, "--ops needs at least one operator name"),
    (NPU, "compile {model} -o {tmp}/out.tflite --strict", 2, "a .tflite output keeps them all"),
    (NPU, "compile {model} -o {tmp}/out.txt", 2, "the output is a loadable (.nlb) or an int8 model (.tflite)"),
    (NPU, "compile {model} -o {missing}/out.nlb", 2, "{missing}/out.nlb: the directory {missing} does not exist"),
    (NPU, "compile {model} -o {tmp}/garbage.nlb/out.tflite", 2, "{tmp}/garbage.nlb is not a directory"),
    (NPU, "run {model} --input {tmp}/input.txt --devroot {dev}", 2,
     "{tmp}/input.txt: not a .npy file (write arrays with numpy.save)"),
    (NPU, "run {model} --input {tmp}/garbage.nlb --devroot {dev}", 2, "{tmp}/garbage.nlb: not a .npy file"),
    (NPU, "run {model} --repeat many --devroot {dev}", 2, "argument --repeat: invalid int value: 'many'"),
    (NPU, "bench nop -n 0 --devroot {dev}", 2, "-n must be at least 1"),
    (NPU, "bench model {model} --seconds 0 --devroot {dev}", 2, "--seconds must be > 0"),
    (NPU, "faces --threshold 2 --devroot {dev}", 2, "--threshold is a score between 0 and 1"),
    (NPU, "compile --devroot {dev} {model} -o x.nlb", 2, "unrecognized arguments: --devroot"),
    (NPU, "frobnicate", 2, "invalid choice: 'frobnicate'"),
    (KMD, "start --memory 5X --devroot {dev}", 2, "argument --memory: not a size: '5X'"),
    (KMD, "start --cores 0 --devroot {dev}", 2, "argument --cores: not a count >= 1: '0'"),
    (KMD, "start --mode 999 --devroot {dev}", 2, "argument --mode: not a file mode: '999'"),
    (KMD, "start --max-job-timeout 0 --devroot {dev}", 2, "argument --max-job-timeout"),
    (KMD, "frobnicate", 2, "invalid choice: 'frobnicate'"),
]


@pytest.fixture
def places(tmp_path, resnet8_path) -> dict[str, str]:
    (tmp_path / "dev").mkdir()
    (tmp_path / "garbage.nlb").write_bytes(b"not a loadable")
    (tmp_path / "garbage.tflite").write_bytes(b"not a model")
    (tmp_path / "input.txt").write_text("1 2 3\n")
    (tmp_path / "truncated.tflite").write_bytes(resnet8_path.read_bytes()[:40_000])
    import tflite

    from tests.support import host_models
    (tmp_path / "reverse.tflite").write_bytes(host_models.int8_fc_sandwich(tflite.BuiltinOperator.REVERSE_V2))
    return {"dev": str(tmp_path / "dev"), "missing": str(tmp_path / "nowhere"), "model": str(resnet8_path),
            "tmp": str(tmp_path)}


def _cli(cli: list[str], words: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("NPU_DEBUG", "NPU_DEVROOT", "NPU_SYSROOT")}
    return subprocess.run([*cli, *words], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**environ, **env}, stdin=subprocess.DEVNULL)


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _name(row: tuple) -> str:
    return f"{'npu' if row[0] is NPU else 'npu-kmd'} {row[1]}"


@pytest.mark.parametrize(("cli", "words", "code", "says"), BAD_INVOCATIONS, ids=[_name(r) for r in BAD_INVOCATIONS])
def test_bad_invocation_is_one_line(cli, words, code, says, places):
    result = _cli(cli, words.format(**places).split())
    line = _one_line(result)
    prog = "npu" if cli is NPU else "npu-kmd"
    assert line.startswith(f"{prog}") and ": error: " in line
    assert says.format(**places) in line
    assert result.returncode == code


def test_debug_shows_the_traceback(places):
    words = f"bench nop --devroot {places['dev']}".split()
    for result in (_cli(NPU, ["--debug", *words]), _cli(NPU, [*words, "--debug"]), _cli(NPU, words, NPU_DEBUG="1")):
        assert result.returncode == 1
        assert "Traceback" in result.stderr and "FileNotFoundError" in result.stderr
        assert result.stderr.splitlines()[-1].startswith("npu bench nop: error: no device ")


def test_a_driver_that_died_says_restart(fresh_npu):
    pid = int(re.search(r"pid (\d+)", fresh_npu.kmd("status").stdout).group(1))
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}/status")
                      or "State:\tZ" in open(f"/proc/{pid}/status").read())
    devroot = fresh_npu.devroot
    line = _one_line(_cli(NPU, ["bench", "nop", "-n", "10", "--devroot", str(devroot)]))
    assert line == (f"npu bench nop: error: {devroot}/npu0: the driver is down (Transport endpoint is not "
                    f"connected); restart it with: npu-kmd stop --devroot {devroot} && "
                    f"npu-kmd start --devroot {devroot}")
    doctor = _cli(NPU, ["doctor", "--devroot", str(devroot)])
    assert doctor.returncode == 1 and "FAIL  npu0: " in doctor.stdout and "the driver is down" in doctor.stdout
    status = _cli(KMD, ["status", "--devroot", str(devroot)])      # README: 3 when the driver is not running
    assert status.returncode == 3 and status.stderr == ""
    assert status.stdout.startswith(f"{devroot}/npu0: pid -, driver not running, ")
    assert f"`npu-kmd start --devroot {devroot}` starts it" in status.stdout


def test_a_driver_stopped_under_bench_model_says_so(fresh_npu):
    """The driver stopped while the bench holds the model: one line saying so and how to
    start it (before: a bare "[Errno 107] Transport endpoint is not connected")."""
    devroot, clients = fresh_npu.devroot, attr_dir(fresh_npu) / "clients"
    environ = {k: v for k, v in os.environ.items() if k not in ("NPU_DEBUG", "NPU_DEVROOT", "NPU_SYSROOT")}
    bench = subprocess.Popen([*NPU, "bench", "model", "resnet8", "--no-litert", "--seconds", "600", "--devroot",
                              str(devroot)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                             env=environ, stdin=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: bench.poll() is not None or any(clients.iterdir()), 300)   # it holds the model
        fresh_npu.kmd("stop")
        out, err = bench.communicate(timeout=300)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.communicate()
    line = _one_line(subprocess.CompletedProcess(bench.args, bench.returncode, out, err))
    assert line.startswith(f"npu bench model: error: {devroot}/npu0: the driver is down (")    # ENOTCONN, ENODEV
    assert line.endswith(f"); restart it with: npu-kmd stop --devroot {devroot} && npu-kmd start --devroot {devroot}")
    assert bench.returncode == 1


def test_smi_reads_the_tree_its_devroot_recorded(npu, tmp_path):
    """NPU_SYSROOT left over from another devroot does not hide this devroot's devices."""
    result = _cli(NPU, ["smi", "--interval", "0", "--devroot", str(npu.devroot)], NPU_SYSROOT=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert f"{npu.devroot}/npu0" in result.stdout
