"""A long chip job: a float conv net over a long spectrogram, its first inference and its replays.

The DNSMOS-like model users bring (a few int16 3x3 convolutions, 32-64 channels, over
FRAMES x BINS of a spectrogram) is built with ``onnx.helper``, compiled (``--recipe fast``
with its convolutions and pool int16, as the default recipe's escalation makes such a
model's layers) and run on a scratch device with the default job timeout: the first
inference (the chip decodes the job and makes its plan), then replays. For each run it
prints the outcome, the job's chip time and the timing model's, and the first run's and the
last replay's top layers; and the timeout the job asked for (``libnpu.job_timeouts``).

Run from the repository root::

    python -m benchmarks.long_job [--frames 6000] [--bins 128] [--runs 3]

Measured 2026-11-30 (2-vCPU VM, load 6-12; docs/runtime.md, "How a model job's timeout is
chosen"): at main 894a746 the first run of --frames 6000 failed with ETIMEDOUT past 5 s (the
numpy int16 convolutions: 7.8 s for the 7.1 GMAC layer); with the first run in C it takes
0.64-0.78 s against 0.29-0.53 s a replay, and the job asks 10 000 ms (its predicted work
capped by MAX_JOB_TIMEOUT_MS).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import libnpu
from benchmarks.scratch_device import ScratchDevice
from libnpu.compiler.lower import compile_model
from libnpu.errors import NpuError
from npu_hw.regs import DEFAULT_JOB_TIMEOUT_MS

INT16_LAYERS = "conv1,conv2,conv3,conv4,pool1"


def spectrogram_convnet(frames: int, bins: int, seed: int = 0) -> onnx.ModelProto:
    """[1, 1, frames, bins] -> four 3x3 convolutions (1 -> 32 -> 32, pool 2x2, -> 64 -> 64),
    global max pool, a 64 x 3 MatMul: DNSMOS's shape of network over a long input."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, name: str) -> str:
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_c"], pads=[1, 1, 1, 1],
                                      name=name))
        nodes.append(helper.make_node("Relu", [name + "_c"], [name], name=name + "_relu"))
        return name

    x = conv(conv("spec", 1, 32, "conv1"), 32, 32, "conv2")
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"))
    x = conv(conv("pool1", 32, 64, "conv3"), 64, 64, "conv4")
    nodes.append(helper.make_node("GlobalMaxPool", [x], ["gmp"], name="gmp"))
    nodes.append(helper.make_node("Flatten", ["gmp"], ["flat"], name="flat"))
    inits.append(numpy_helper.from_array((rng.standard_normal((64, 3)) * 0.1).astype(np.float32), "fc_w"))
    nodes.append(helper.make_node("MatMul", ["flat", "fc_w"], ["mos"], name="fc"))
    graph = helper.make_graph(nodes, "long_spectrogram",
                              [helper.make_tensor_value_info("spec", TensorProto.FLOAT, [1, 1, frames, bins])],
                              [helper.make_tensor_value_info("mos", TensorProto.FLOAT, [1, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def top_layers(profile, count: int = 3) -> list[dict]:
    layers = sorted(profile.layers, key=lambda layer: -layer.chip_ns)[:count]
    return [{"op": layer.op, "name": layer.name, "chip_ms": round(layer.chip_ns / 1e6, 2),
             "model_ms": round(layer.device_time_ns / 1e6, 3)} for layer in layers]


def measure(frames: int, bins: int, runs: int) -> dict:
    started = time.perf_counter()
    loadable = compile_model(spectrogram_convnet(frames, bins).SerializeToString(), recipe="fast",
                             int16=INT16_LAYERS)
    report: dict = {"frames": frames, "bins": bins, "compile_s": round(time.perf_counter() - started, 1),
                    "macs": sum(t.macs for t in loadable.tasks), "runs": []}
    x = np.random.default_rng(1).standard_normal((1, 1, frames, bins)).astype(np.float32)
    with ScratchDevice(cores=1, memory="2G", watchdog_ms=DEFAULT_JOB_TIMEOUT_MS) as device:
        model = libnpu.load(loadable, devroot=device.devroot, config={"PERF_COUNT": True})
        try:
            report["timeout_asked_ms"] = getattr(model, "job_timeout_ms", 0)
            request = model.create_request()
            for _ in range(runs):
                begun = time.perf_counter()
                try:
                    request.infer([x])
                except NpuError as exc:
                    report["runs"].append({"outcome": f"{type(exc).__name__}: {exc}",
                                           "wall_s": round(time.perf_counter() - begun, 2)})
                    break
                profile = request.profile
                report["runs"].append({"outcome": "ok", "wall_s": round(time.perf_counter() - begun, 2),
                                       "chip_ms": round(profile.chip_ns / 1e6, 1),
                                       "model_ms": round(profile.device_time_ns / 1e6, 2),
                                       "top": top_layers(profile)})
        finally:
            model.close()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.long_job", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=6000)
    p.add_argument("--bins", type=int, default=128)
    p.add_argument("--runs", type=int, default=3, help="inferences: the first, then replays (default 3)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    report = measure(args.frames, args.bins, args.runs)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{args.frames}x{args.bins} spectrogram, {report['macs'] / 1e9:.1f} GMAC, compiled in "
          f"{report['compile_s']} s; the job asks timeout_ms {report['timeout_asked_ms']} (0: the device's "
          f"default, {DEFAULT_JOB_TIMEOUT_MS})")
    for i, run in enumerate(report["runs"]):
        label = "first run" if i == 0 else f"replay {i}"
        if run["outcome"] != "ok":
            print(f"  {label}: {run['outcome']} after {run['wall_s']} s")
            continue
        print(f"  {label}: chip {run['chip_ms']} ms (modeled {run['model_ms']} ms), wall {run['wall_s']} s")
        for layer in run["top"]:
            print(f"      {layer['op']:<16} {layer['name']:<12} {layer['chip_ms']:>9} ms")
    ok = [r for r in report["runs"] if r["outcome"] == "ok"]
    if len(ok) >= 2 and report["runs"][0]["outcome"] == "ok":
        print(f"  first run / last replay: {ok[0]['chip_ms'] / ok[-1]['chip_ms']:.1f}x")
    return 0 if report["runs"] and all(r["outcome"] == "ok" for r in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
