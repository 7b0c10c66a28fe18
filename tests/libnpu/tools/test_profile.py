"""Profiling: per-layer counters of inferences (PERF_COUNT, GET_PROFILE), `npu profile`'s
table, and the device's trace collected into a Chrome/Perfetto trace-event file and a
PNG, with the jobs of two processes."""
from __future__ import annotations

import dataclasses
import errno
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import libnpu
from libnpu import model_zoo
from libnpu.compiler.lower import compile_model
from libnpu.tools.cli import main
from libnpu.tools.profile import trace_file
from tests.support.device import REPO
from tests.support.diamond import diamond_calibration, diamond_model

OTHER_PROCESS = textwrap.dedent("""
    import sys, threading, numpy as np, libnpu
    model = libnpu.load(sys.argv[2], devroot=sys.argv[1])
    model.device.use_queues = False     # through SUBMIT (interrupts in the trace); npu profile's go by queue
    x = np.zeros(model.inputs[0].shape, np.int8)
    stop = threading.Event()
    def loop():
        while not stop.is_set():
            model.infer([x])
    threads = [threading.Thread(target=loop) for _ in range(2)]     # two jobs in flight: both cores busy
    for t in threads: t.start()
    print("ready", flush=True)
    sys.stdin.read()            # runs until the test has its trace (a fixed time was too short on a loaded machine)
    stop.set()
    for t in threads: t.join()
    model.close()
""")



def test_layers_add_up_to_the_inference(device, resnet8_nlb):
    """Simulated cycles add up exactly to the inference's; measured chip times to the
    job's within 10% (the rest: fetching the command buffer, binding the address space).
    A run whose core was preempted between two layers counts the gap in the job only, so
    the best of 5 runs is checked (every run's layers fit inside its job). On one core
    (NPU_TILES 1): on several, the inference's cycles are its critical path (test_task_graph)."""
    with libnpu.load(resnet8_nlb, device, config={"PERF_COUNT": True, "NPU_TILES": 1}) as model:
        x = np.random.default_rng(3).integers(-128, 128, model.inputs[0].shape, dtype=np.int8)
        model.infer([x])
        ratios = []
        for _ in range(5):
            model.infer([x])
            profile = model.get_profiling_info()
            assert profile is not None and profile.complete
            assert [layer.index for layer in profile.layers] == list(range(len(model.loadable.tasks)))
            assert [layer.op for layer in profile.layers] == [task.op for task in model.loadable.tasks]
            assert sum(layer.cycles for layer in profile.layers) == profile.cycles
            assert profile.cycles * 1000 // device.info()["clock_mhz"] == profile.device_time_ns
            assert all(layer.device == "NPU" and layer.start_ns <= layer.end_ns for layer in profile.layers)
            assert profile.queue_ns >= 0
            ratios.append(sum(layer.chip_ns for layer in profile.layers) / profile.chip_ns)
        assert max(ratios) >= 0.9 and all(ratio <= 1 for ratio in ratios), ratios
        request = model.create_request()                      # a request's own, through start/wait too
        request.set_inputs([x])
        request.start()
        request.wait()
        assert request.profile is not None and request.profile.cycles == profile.cycles
        model.set_property({"PERF_COUNT": False})
        model.infer([x])
        assert model.create_request().profile is None


def test_get_profile_errors(device):
    src, dst = device.alloc_mem(4096), device.alloc_mem(4096)
    cmds = device.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=4096)
    plain = device.run(cmds, [src, dst])
    with pytest.raises(libnpu.NpuError) as missing:
        device.get_profile(plain)
    assert missing.value.errno == errno.ENOENT
    with pytest.raises(libnpu.NpuError) as never:
        device.get_profile(plain.id + 100)
    assert never.value.errno == errno.EINVAL
    profiled = device.submit_prepared(device.prepare_submit(cmds, [src, dst], wait=True, profile=True))
    timing = device.get_profile(profiled)
    assert [t.opcode for t in timing.tasks] == [0x01] and timing.cycles == timing.tasks[0].cycles
    assert timing.submit_ns <= timing.start_ns <= timing.end_ns <= timing.signal_ns


def test_npu_profile_prints_the_table(npu, resnet8_nlb, capsys):
    assert main(["profile", str(resnet8_nlb), "--runs", "2", "--devroot", str(npu.devroot)]) == 0
    out = capsys.readouterr().out
    assert "layers (sum)" in out and "inference (job)" in out
    assert "on a user queue" in out                          # PERF_COUNT inferences take the device's queue
    assert out.count(" CONV_2D ") == 9 and " SOFTMAX " in out
    assert main(["profile", str(resnet8_nlb), "--runs", "2", "--json", "--devroot", str(npu.devroot)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["layer_cycles_sum"] >= report["inference_cycles"]     # on two cores: the critical path
    assert len(report["profile"]["layers"]) == 15


def test_trace_of_two_processes(npu, resnet8_nlb, tmp_path, capsys):
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(npu.devroot), str(resnet8_nlb)],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        trace, png = tmp_path / "t.json", tmp_path / "t.png"
        assert main(["profile", str(resnet8_nlb), "--runs", "20", "--trace", str(trace), "--png", str(png),
                     "--devroot", str(npu.devroot)]) == 0
    finally:
        other.stdin.close()
        other.wait(60)
    assert other.returncode == 0
    out = capsys.readouterr().out
    assert f"trace (open in ui.perfetto.dev): {trace}" in out
    events = json.loads(trace.read_text())["traceEvents"]
    for e in events:
        assert e["ph"] in ("X", "i", "M") and isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["dur"] >= 0 and isinstance(e["ts"], (int, float))
        if e["ph"] == "i":
            assert e["s"] == "t" and "ts" in e
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names[(1, None)] == "npu0 chip" and names[(2, None)] == "npu0 contexts"
    cores = {tid for (pid, tid), name in names.items() if pid == 1 and name.startswith("core ")}
    assert cores == {0, 1}
    for core in cores:                                        # job and layer slices on each core's track
        assert any(e["ph"] == "X" and e["pid"] == 1 and e["tid"] == core and e["cat"] == "job" for e in events)
        assert any(e["ph"] == "X" and e["pid"] == 1 and e["tid"] == core and e["cat"] == "layer" for e in events)
    contexts = {name for (pid, tid), name in names.items() if pid == 2 and tid is not None}
    pids = {int(name.split("pid ")[1].split()[0]) for name in contexts}
    assert {other.pid, __import__("os").getpid()} <= pids      # both processes' contexts
    layer_names = {e["name"] for e in events if e["ph"] == "X" and e["cat"] == "layer"}
    assert {"CONV_2D", "ADD", "SOFTMAX", "FULLY_CONNECTED"} <= layer_names      # the operators' own names
    jobs = [e for e in events if e["ph"] == "X" and e["pid"] == 1 and e["cat"] == "job"]
    for layer in (e for e in events if e["ph"] == "X" and e["cat"] == "layer"):    # within their job
        assert any(j["args"]["fence"] == layer["args"]["fence"]
                   and j["args"]["context"] == layer["args"]["context"]
                   and j["ts"] - 0.01 <= layer["ts"] and layer["ts"] + layer["dur"] <= j["ts"] + j["dur"] + 0.01
                   for j in jobs)
    assert any(e["ph"] == "i" and e["cat"] == "fence" and e["pid"] == 2 for e in events)
    assert any(e["ph"] == "i" and e["cat"] == "irq" for e in events)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    picture = model_zoo.load_png(png)
    assert picture.shape[2] == 3 and len(np.unique(picture.reshape(-1, 3), axis=0)) > 4   # bars of several colours
    assert json.loads(trace_file(npu.devroot).read_text().splitlines()[0])["recording"] is False


def test_the_trace_file_takes_only_0_and_1(npu):
    path = trace_file(npu.devroot)
    with pytest.raises(OSError) as bad:
        path.write_text("yes\n")
    assert bad.value.errno == errno.EINVAL
    path.write_text("1\n")
    path.write_text("0\n")
    header = json.loads(path.read_text().splitlines()[0])
    assert header["type"] == "trace" and header["clock"] == "CLOCK_MONOTONIC"


def test_a_profile_in_parts_shows_host_layers_as_cpu(device, resnet8_nlb):
    """An inference run as chip jobs with host layers between them (a CPU fallback): the
    chip's layers keep their model indices, the host's show as CPU with no cycles."""
    from libnpu.loadable import Loadable
    from libnpu.profiling import ChipPart, HostPart, InferenceProfile
    loadable = Loadable.load(resnet8_nlb)
    with libnpu.load(loadable, device, config={"PERF_COUNT": True}) as model:
        model.infer([np.zeros(model.inputs[0].shape, np.int8)])
        whole = model.get_profiling_info()
    job = whole.timing
    first, second = dataclasses.replace(job, tasks=job.tasks[:7]), dataclasses.replace(job, tasks=job.tasks[8:])
    second = dataclasses.replace(second, tasks=[dataclasses.replace(t, index=t.index - 8) for t in second.tasks])
    host = HostPart(7, loadable.tasks[7].name, loadable.tasks[7].op, job.tasks[7].start_ns, job.tasks[7].end_ns)
    parts = InferenceProfile.from_parts(loadable, [ChipPart(first), host, ChipPart(second, first_task=8)],
                                        whole.clock_mhz)
    assert [(layer.index, layer.device) for layer in parts.layers] == \
        [(i, "CPU" if i == 7 else "NPU") for i in range(15)]
    assert parts.layers[7].cycles == 0 and parts.layers[7].chip_ns == job.tasks[7].end_ns - job.tasks[7].start_ns
    assert [layer.op for layer in parts.layers] == [task.op for task in loadable.tasks]
    assert " CPU " in parts.table()


def test_a_layer_has_the_number_the_report_gives_its_operator(npu, tmp_path):
    """The profile numbers each layer by the source model's operator it runs, as `npu compile
    --report` numbers them: the CumSum the host runs (a CPU step after some chip tasks) is
    op K in both, and every chip layer's number is one the report places on the NPU."""
    import onnx

    from libnpu.compiler.placement import CPU, NPU, plan_placement
    from tests.support.host_models import with_cumsum
    path = tmp_path / "with_cumsum.onnx"
    onnx.save(with_cumsum(), path)
    placements = plan_placement(path).placements
    cpu = [p.index for p in placements if p.device == CPU]
    assert len(cpu) == 1
    with libnpu.load(path, devroot=npu.devroot, cache_dir=tmp_path / "cache", config={"PERF_COUNT": True},
                     recipe="fast") as model:
        model.infer([np.zeros(model.inputs[0].shape, np.float32)])
        profile = model.get_profiling_info()
    host = [layer for layer in profile.layers if layer.device == "CPU"]
    assert [layer.source for layer in host] == cpu and host[0].index != cpu[0]     # a task index would differ
    chip = {layer.source for layer in profile.layers if layer.device == "NPU" and layer.source >= 0}
    assert chip and chip <= {p.index for p in placements if p.device == NPU}
    row = next(line for line in profile.table().splitlines() if " CPU " in line)
    assert row.split()[0] == str(cpu[0])


def _run_traced(npu, loadable, tiles: int, x: np.ndarray) -> tuple[list[np.ndarray], dict, int]:
    """Outputs, the job's trace records ({task index: core}) and its modeled cycles; the
    profile (GET_PROFILE) names the same core for each layer."""
    path = trace_file(npu.devroot)
    path.write_text("1\n")
    try:
        with libnpu.load(loadable, devroot=npu.devroot, config={"NPU_TILES": tiles, "PERF_COUNT": True}) as model:
            model.device.use_queues = False       # through SUBMIT: its records are in the trace at its fence
            outputs = model.infer([x])
            profile = model.get_profiling_info()
        events = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    finally:
        path.write_text("0\n")
    fence = max(e["fence"] for e in events if e["type"] == "job")
    cores = {e["index"]: e["core"] for e in events if e["type"] == "task" and e["fence"] == fence}
    assert cores == {layer.index: layer.core for layer in profile.layers}
    return outputs, cores, profile.cycles


def test_a_diamonds_branches_run_on_both_cores_with_the_same_bytes(npu):
    """One inference on both cores (docs/hardware.md, Task graphs): the trace and the profile show
    each task on the core it was placed on; the bytes are those of one core; the compiler's row
    bands too."""
    model, calibration = diamond_model(), diamond_calibration()
    loadable = compile_model(model, calibration, recipe="fast")
    convs = [i for i, t in enumerate(loadable.tasks) if t.op == "CONV_2D"]
    assert len(convs) == 3
    one, cores_one, cycles_one = _run_traced(npu, loadable, 1, calibration[0][0])
    both, cores_both, cycles_both = _run_traced(npu, loadable, -1, calibration[0][0])
    assert all(np.array_equal(a, b) for a, b in zip(one, both, strict=True))
    assert len(set(cores_one.values())) == 1
    assert cores_both[convs[1]] != cores_both[convs[2]]          # B and C side by side
    assert cycles_both < cycles_one
    split = compile_model(model, calibration, recipe="fast", tiles=2)
    assert len(split.tasks) > len(loadable.tasks)                   # A in row bands (and the input's QUANTIZE)
    banded, _, cycles_banded = _run_traced(npu, split, -1, calibration[0][0])
    assert all(np.array_equal(a, b) for a, b in zip(one, banded, strict=True))
    assert cycles_banded < cycles_both
