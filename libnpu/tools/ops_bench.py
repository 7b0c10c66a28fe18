"""``npu bench ops``: single int8 layers of MobileNet-like shapes through the device, next
to LiteRT and onnxruntime in the same run.

Each layer (conv2d 3x3/2 first layer, pointwise 1x1, depthwise 3x3 stride 1 and 2, fully
connected) is built as a one-op int8 IR graph with random weights and per-channel
quantization, lowered to a loadable and run on a mounted device through ``libnpu.load``
(so every timing includes the whole path: input copy, submit, the chip, wait, output copy).
The same graph is exported to .tflite and run by LiteRT with its reference kernels
(BUILTIN_REF, which our chip must equal byte for byte: checked on every layer) and with
its default kernels (XNNPACK), one thread each. onnxruntime runs the equivalent
QLinearConv / QGemm model (:mod:`libnpu.tools.ops_bench_ort`, uint8 activations), one thread;
it rounds differently, so its output is only compared (max absolute difference in LSBs,
expect 0 or 1) against BUILTIN_REF's, or against the device's when LiteRT is skipped. All contenders are timed
interleaved, one call each per round, so they see the same load on a shared machine; the
report gives the median per call, the device (timing-model) time and the ratios.
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from libnpu.compiler.ir import Graph, Op, QuantParams, Tensor, same_pads
from libnpu.compiler.lower import lower
from libnpu.compiler.tflite_export import export_tflite
from libnpu.tools.models import litert_available
from libnpu.tools.ops_bench_ort import OrtLayer, ort_available

__all__ = ["Layer", "MOBILENET", "QUICK", "OutputMismatch", "build_graph", "bench_layer", "bench_ops",
           "format_report"]


class OutputMismatch(RuntimeError):
    """The device's output differs from LiteRT BUILTIN_REF's."""


@dataclass(frozen=True)
class Layer:
    """One benchmark layer: ``kind`` conv | dw | fc; ``hw`` the input height and width
    (fc: the batch rows); ``k`` the square filter size."""
    name: str
    kind: str
    hw: int
    cin: int
    cout: int
    k: int = 1
    stride: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("conv", "dw", "fc"):
            raise ValueError(f"layer kind must be conv, dw or fc, not {self.kind!r}")
        if self.kind == "dw" and self.cin != self.cout:
            raise ValueError("depthwise layers keep the channel count")
        if min(self.hw, self.cin, self.cout, self.k, self.stride) < 1:
            raise ValueError(f"layer {self.name}: sizes must be positive")

    @property
    def out_hw(self) -> int:
        return -(-self.hw // self.stride)  # SAME padding

    @property
    def macs(self) -> int:
        if self.kind == "fc":
            return self.hw * self.cin * self.cout
        per_out = self.k * self.k * (1 if self.kind == "dw" else self.cin)
        return self.out_hw ** 2 * self.cout * per_out


# MobileNet v1 (224x224, width 1.0): the first layer, depthwise/pointwise pairs at each
# resolution, and the classifier at batch 1 and 16.
MOBILENET = [
    Layer("conv1 3x3/2", "conv", 224, 3, 32, 3, 2),
    Layer("dw1 112", "dw", 112, 32, 32, 3, 1),
    Layer("pw1 112", "conv", 112, 32, 64),
    Layer("dw2 112/2", "dw", 112, 64, 64, 3, 2),
    Layer("pw2 56", "conv", 56, 64, 128),
    Layer("dw3 56", "dw", 56, 128, 128, 3, 1),
    Layer("pw3 56", "conv", 56, 128, 128),
    Layer("dw4 56/2", "dw", 56, 128, 128, 3, 2),
    Layer("pw4 28", "conv", 28, 128, 256),
    Layer("dw5 28", "dw", 28, 256, 256, 3, 1),
    Layer("pw5 28", "conv", 28, 256, 256),
    Layer("dw6 28/2", "dw", 28, 256, 256, 3, 2),
    Layer("pw6 14", "conv", 14, 256, 512),
    Layer("dw7 14", "dw", 14, 512, 512, 3, 1),
    Layer("pw7 14", "conv", 14, 512, 512),
    Layer("dw12 14/2", "dw", 14, 512, 512, 3, 2),
    Layer("pw12 7", "conv", 7, 512, 1024),
    Layer("dw13 7", "dw", 7, 1024, 1024, 3, 1),
    Layer("pw13 7", "conv", 7, 1024, 1024),
    Layer("fc 1024->1000", "fc", 1, 1024, 1000),
    Layer("fc x16 1024->1000", "fc", 16, 1024, 1000),
]

# Every layer kind at MobileNet 0.25 / 96x96 sizes: seconds, not minutes.
QUICK = [
    Layer("conv1 3x3/2", "conv", 96, 3, 8, 3, 2),
    Layer("dw 48", "dw", 48, 8, 8, 3, 1),
    Layer("pw 48", "conv", 48, 8, 16),
    Layer("dw 48/2", "dw", 48, 16, 16, 3, 2),
    Layer("pw 6", "conv", 6, 256, 256),
    Layer("fc 256->100", "fc", 1, 256, 100),
]

_IN_Q, _OUT_Q = (0.05, -3), (0.2, 4)


def build_graph(layer: Layer, rng: np.random.Generator) -> Graph:
    """The layer as an int8 IR graph: input ``x``, output ``y``, random int8 weights with
    per-channel scales, int32 bias, no fused activation."""
    g = Graph(layer.name)
    n = layer.cout
    w_scale = rng.uniform(0.002, 0.01, n).astype(np.float32)
    b_scale = (w_scale.astype(np.float64) * np.float32(_IN_Q[0])).astype(np.float32)
    in_q, out_q = QuantParams(*_IN_Q), QuantParams(*_OUT_Q)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    if layer.kind == "fc":
        x_shape, y_shape, w_shape, w_axis = (layer.hw, layer.cin), (layer.hw, n), (n, layer.cin), 0
    else:
        oh = layer.out_hw
        x_shape, y_shape = (1, layer.hw, layer.hw, layer.cin), (1, oh, oh, n)
        if layer.kind == "dw":
            w_shape, w_axis = (1, layer.k, layer.k, n), 3
        else:
            w_shape, w_axis = (n, layer.k, layer.k, layer.cin), 0
    g.add_tensor(Tensor("x", x_shape, "int8", in_q))
    g.add_tensor(Tensor("w", w_shape, "int8", QuantParams(w_scale, np.zeros(n, np.int64), w_axis),
                        rng.integers(-127, 128, w_shape, dtype=np.int8)))
    g.add_tensor(Tensor("b", (n,), "int32", QuantParams(b_scale, np.zeros(n, np.int64)), bias))
    g.add_tensor(Tensor("y", y_shape, "int8", out_q))
    if layer.kind == "fc":
        g.add_op(Op("FULLY_CONNECTED", ["x", "w", "b"], ["y"],
                    dict(activation="NONE", keep_num_dims=False), name=layer.name))
    else:
        _, top, bottom = same_pads(layer.hw, layer.k, layer.stride, 1)
        common = dict(stride=(layer.stride,) * 2, dilation=(1, 1), pads=(top, bottom, top, bottom),
                      activation="NONE")
        if layer.kind == "dw":
            g.add_op(Op("DEPTHWISE_CONV_2D", ["x", "w", "b"], ["y"],
                        dict(common, depth_multiplier=1), name=layer.name))
        else:
            g.add_op(Op("CONV_2D", ["x", "w", "b"], ["y"], dict(common, groups=1), name=layer.name))
    g.inputs, g.outputs = ["x"], ["y"]
    g.validate()
    return g


def _litert(model: Path, reference: bool) -> Callable[[np.ndarray], np.ndarray]:
    from ai_edge_litert import interpreter as litert
    options = ({"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_REF}
               if reference else {})
    it = litert.Interpreter(model_path=str(model), num_threads=1, **options)
    it.allocate_tensors()
    x_index, y_index = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run(x: np.ndarray) -> np.ndarray:
        it.set_tensor(x_index, x)
        it.invoke()
        return it.get_tensor(y_index).copy()
    return run


BLOCK = 5   # back-to-back timed calls per contender and turn


def bench_layer(layer: Layer, rng: np.random.Generator, *, repeat: int, workdir: Path,
                devroot: str | Path | None, litert: bool, ort: bool = False,
                ort_activations: str = "uint8") -> dict[str, Any]:
    """Time one layer on the device and (when ``litert``) on LiteRT and (when ``ort``) on
    onnxruntime; raises :class:`OutputMismatch` if the device's output differs from
    BUILTIN_REF's. onnxruntime's largest difference from the reference output (BUILTIN_REF,
    else the device) is ``ort_max_diff_lsb``."""
    graph = build_graph(layer, rng)
    x = rng.integers(-128, 128, graph.tensors["x"].shape, dtype=np.int8)
    model = libnpu.load(lower(graph), devroot=devroot)
    row: dict[str, Any] = {**asdict(layer), "macs": layer.macs}
    try:
        request = model.create_request()
        device_ns: list[int] = []

        def npu() -> np.ndarray:
            (y,) = request.infer([x])
            device_ns.append(request.timing.device_time_ns)
            return y
        steps: dict[str, Callable[[], np.ndarray]] = {"npu": npu}
        if litert:
            path = workdir / "layer.tflite"
            path.write_bytes(export_tflite(graph))
            ref, xnn = _litert(path, True), _litert(path, False)
            steps["builtin_ref"] = lambda: ref(x)
            steps["xnnpack"] = lambda: xnn(x)
        if ort:
            ort_layer = OrtLayer(graph, ort_activations)
            ort_feed = ort_layer.feed(x)  # the input in the model's type, made once, not timed
            steps["ort"] = lambda: ort_layer.run(ort_feed)
        try:
            results = {name: step() for name, step in steps.items()}  # warm-up and check
            if litert:
                differ = int(np.count_nonzero(results["npu"] != results["builtin_ref"]))
                row["matches_builtin_ref"] = differ == 0
                if differ:
                    raise OutputMismatch(f"{layer.name}: device output differs from LiteRT "
                                         f"BUILTIN_REF in {differ} bytes")
            if ort:
                reference = results["builtin_ref" if litert else "npu"].astype(np.int16)
                ort_y = ort_layer.as_int8(results["ort"]).astype(np.int16)
                row["ort_max_diff_lsb"] = int(np.abs(ort_y - reference).max())
            device_ns.clear()
            samples: dict[str, list[float]] = {name: [] for name in steps}
            busy_ns = 0
            # Steady state, as benchmark tools measure: the contenders take turns in blocks
            # of BLOCK back-to-back calls, each block after one untimed warm-up call, so
            # every contender sees the same machine load and none is timed cold.
            for first in range(0, repeat, BLOCK):
                for name, step in steps.items():
                    step()
                    busy_before = model.device.stats()["busy_time_ns"] if name == "npu" else 0
                    for _ in range(min(BLOCK, repeat - first)):
                        started = time.perf_counter()
                        step()
                        samples[name].append(time.perf_counter() - started)
                    if name == "npu":   # the chip's wall-clock time on the timed jobs
                        busy_ns += model.device.stats()["busy_time_ns"] - busy_before
            # Per job: only this model's jobs run on this context.
            chip_ns = busy_ns / repeat
        finally:
            request.release()
    finally:
        model.close()
    for name, values in samples.items():
        row[f"{name}_ms"] = round(float(np.median(values)) * 1e3, 4)
    row["device_time_ms"] = round(float(np.median(device_ns)) / 1e6, 4)
    row["chip_ms"] = round(chip_ns / 1e6, 4)
    if litert:
        row["ref_over_npu"] = round(row["builtin_ref_ms"] / row["npu_ms"], 3)
        row["ref_over_chip"] = round(row["builtin_ref_ms"] / row["chip_ms"], 3)
        row["xnnpack_over_npu"] = round(row["xnnpack_ms"] / row["npu_ms"], 3)
    if ort:
        row["ort_over_npu"] = round(row["ort_ms"] / row["npu_ms"], 3)
    return row


def bench_ops(layers: Sequence[Layer], *, repeat: int = 5, devroot: str | Path | None = None,
              litert: bool = True, ort: bool = True, ort_activations: str = "uint8",
              seed: int = 0) -> dict[str, Any]:
    """Run every layer; returns ``{"layers": [...], "totals": {...}}`` (times in ms), with
    ``litert_skipped`` / ``ort_skipped`` giving the reason when a contender did not run.
    ``ort_activations`` (uint8 or int8) is the onnxruntime model's activation type."""
    if repeat < 1:
        raise ValueError("--repeat must be at least 1")
    if ort_activations not in ("uint8", "int8"):
        raise ValueError(f"onnxruntime activations must be uint8 or int8, not {ort_activations!r}")
    skipped = None if not litert or litert_available() else "ai-edge-litert is not installed"
    if not litert:
        skipped = "--no-litert"
    litert = skipped is None
    ort_skipped = "--no-ort" if not ort else ort_available()
    ort = ort_skipped is None
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="npu-bench-ops-") as tmp:
        rows = [bench_layer(layer, rng, repeat=repeat, workdir=Path(tmp), devroot=devroot, litert=litert,
                            ort=ort, ort_activations=ort_activations)
                for layer in layers]
    keys = (["npu_ms", "chip_ms", "device_time_ms"] + (["builtin_ref_ms", "xnnpack_ms"] if litert else [])
            + (["ort_ms"] if ort else []))
    totals: dict[str, Any] = {k: round(sum(r[k] for r in rows), 4) for k in keys}
    totals["macs"] = sum(r["macs"] for r in rows)
    if litert:
        totals["ref_over_npu"] = round(totals["builtin_ref_ms"] / totals["npu_ms"], 3)
        totals["ref_over_chip"] = round(totals["builtin_ref_ms"] / totals["chip_ms"], 3)
        totals["xnnpack_over_npu"] = round(totals["xnnpack_ms"] / totals["npu_ms"], 3)
    if ort:
        totals["ort_over_npu"] = round(totals["ort_ms"] / totals["npu_ms"], 3)
        totals["ort_max_diff_lsb"] = max(r["ort_max_diff_lsb"] for r in rows)
    report: dict[str, Any] = {"repeat": repeat, "layers": rows, "totals": totals}
    if not litert:
        report["litert_skipped"] = f"{skipped}: outputs not checked against BUILTIN_REF"
    if ort:
        report["ort_diff_against"] = "builtin_ref" if litert else "npu"
        report["ort_activations"] = ort_activations
    else:
        report["ort_skipped"] = ort_skipped
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a table (median ms per call; ratios above 1 mean the device is faster)."""
    with_litert, with_ort = "litert_skipped" not in report, "ort_skipped" not in report
    head = f"{'layer':20} {'MMACs':>8} {'npu ms':>8} {'chip ms':>8} {'dev ms':>8}"
    if with_litert:
        head += f" {'ref ms':>8} {'xnn ms':>8} {'ref/npu':>8} {'ref/chip':>8} {'xnn/npu':>8}"
    if with_ort:
        head += f" {'ort ms':>8} {'ort/npu':>8} {'ort LSB':>8}"
    lines = [head]
    for r in report["layers"] + [dict(report["totals"], name="total")]:
        line = (f"{r['name']:20} {r['macs'] / 1e6:8.2f} {r['npu_ms']:8.3f} {r['chip_ms']:8.3f}"
                f" {r['device_time_ms']:8.3f}")
        if with_litert:
            line += (f" {r['builtin_ref_ms']:8.3f} {r['xnnpack_ms']:8.3f} {r['ref_over_npu']:8.2f}"
                     f" {r['ref_over_chip']:8.2f} {r['xnnpack_over_npu']:8.2f}")
        if with_ort:
            line += f" {r['ort_ms']:8.3f} {r['ort_over_npu']:8.2f} {r['ort_max_diff_lsb']:8d}"
        lines.append(line)
    lines.append("npu ms: infer() end to end (client, driver, chip); chip ms: the chip's core "
                 "running the job (wall clock); dev ms: simulated device time (timing model)")
    if with_litert:
        lines.append("every layer's output equals LiteRT BUILTIN_REF's byte for byte")
    else:
        lines.append(f"LiteRT: skipped ({report['litert_skipped']})")
    if with_ort:
        against = "BUILTIN_REF" if report["ort_diff_against"] == "builtin_ref" else "the device"
        worst = report["totals"]["ort_max_diff_lsb"]
        lines.append(f"onnxruntime ({report['ort_activations']} activations): 'ort LSB' is the "
                     f"largest |ort - {against}| per layer (float "
                     f"requantization; expect 0 or 1)" + ("" if worst <= 1 else
                                                          f"; WARNING: {worst} LSB, check the model"))
    else:
        lines.append(f"onnxruntime: skipped ({report['ort_skipped']})")
    return "\n".join(lines)

