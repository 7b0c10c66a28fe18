"""Dynamically quantized ONNX models (onnxruntime's ``quantize_dynamic``) compiled with the defaults.

For each model, quantized by ``quantize_dynamic`` with int8 and uint8 weights, one scale
per tensor and one per channel, this prints:

* ``rounding``: the worst cosine between onnxruntime's run of the float model the import
  makes of the file (:mod:`libnpu.compiler.dynamic_quant`) and its run of the file itself,
  on inputs calibration never saw: what onnxruntime's rounding of each activation to uint8
  on each run makes the two differ by (the compiler's reference is the float model);
* ``device``: the worst cosine of the default compile (``compile_model`` with calibration,
  no options) run on a scratch device against onnxruntime's run of the file, on those inputs,
  with the CPU steps the loadable has and the compile's seconds.

The models: ``crnn``, the small text-line recognizer of the tests (Conv + BN + Relu ->
MaxPool -> MatMul -> bidirectional LSTM -> MatMul), and ``crnn-wide``, the same with a
512-class head whose output channels span 144x in magnitude (a CTC head over a large
charset). ``--work`` also runs the corpus's work-half ``ddddocr-rec`` quantized the same way
(int8 weights per channel, uint8 per tensor), judged as ``benchmarks.corpus`` judges a model
(its own calibration and evaluation lines). Run from the repository root::

    python -m benchmarks.dynamic_quant [--work]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import libnpu
from benchmarks.scratch_device import ScratchDevice
from libnpu.compiler.dynamic_quant import dequantize_dynamic
from libnpu.compiler.lower import compile_model
from tests.support.dynamic_quant_models import cosine, crnn, crnn_inputs, quantize_dynamic_model

VARIANTS = (("QInt8", False), ("QInt8", True), ("QUInt8", False), ("QUInt8", True))


def crnn_wide(classes: int = 512, spread: float = 12.0, seed: int = 7) -> onnx.ModelProto:
    """``crnn`` (hidden 16) with a ``classes``-wide head whose columns' magnitudes are
    log-uniform in [1/spread, spread]."""
    model = crnn(hidden=16)
    rng = np.random.default_rng(seed)
    head = rng.standard_normal((32, classes)) / np.sqrt(32) * np.exp(rng.uniform(-np.log(spread), np.log(spread),
                                                                                 classes))
    for i, init in enumerate(model.graph.initializer):
        if init.name in ("hw", "hb"):
            data = head if init.name == "hw" else rng.normal(0, .3, classes)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(data.astype(np.float32), init.name))
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = classes
    return model


def measure(name: str, model: onnx.ModelProto, devroot: str, folder: Path) -> None:
    import onnxruntime  # type: ignore[import-untyped]   # a test dependency, as in the corpus scripts
    for weight_type, per_channel in VARIANTS:
        quantized = quantize_dynamic_model(model, folder, weight_type, per_channel)
        floats = dequantize_dynamic(onnx.load_from_string(quantized)).model.SerializeToString()
        sessions = [onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]) for m in (quantized, floats)]
        unseen = crnn_inputs(6, seed=99)
        want = [sessions[0].run(None, {"x": x})[0] for x in unseen]
        rounding = min(cosine(sessions[1].run(None, {"x": x})[0], w) for x, w in zip(unseen, want))
        started = time.perf_counter()
        loadable = compile_model(quantized, [[x] for x in crnn_inputs(16, seed=1)])
        seconds = time.perf_counter() - started
        with libnpu.load(loadable, devroot=devroot) as compiled:
            device = min(cosine(compiled.infer([x], dequantized=True)[0], w) for x, w in zip(unseen, want))
        print(f"{name:<10} {weight_type:<6} {'per channel' if per_channel else 'per tensor ':<11}  rounding "
              f"{rounding:.5f}  device {device:.4f}  cpu steps {len(loadable.host_steps)}  compile {seconds:.1f} s",
              flush=True)


def measure_work(devroot: str, folder: Path) -> None:
    """The corpus's ddddocr-rec (work half) quantized by quantize_dynamic, judged as the corpus judges."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import benchmarks.corpus as corpus
    from benchmarks.corpus_manifest import BY_NAME
    model = BY_NAME["ddddocr-rec"]
    assert model.half == "work"
    source = corpus.fetch(model)
    fetch = corpus.fetch
    try:
        for weight_type, per_channel in (("QInt8", True), ("QUInt8", False)):
            path = folder / f"ddddocr-rec-{weight_type}-{int(per_channel)}.onnx"
            quantize_dynamic(str(source), str(path), weight_type=getattr(QuantType, weight_type),
                             per_channel=per_channel)
            corpus.fetch = lambda _model, path=path: path      # the corpus's evaluation, on this file
            result = corpus.evaluate(model, devroot, None, corpus.TIMEOUT)
            print(f"ddddocr-rec {weight_type} {'per channel' if per_channel else 'per tensor'}: rounding "
                  f"{_work_rounding(model, path):.5f}, compile {result.compile_seconds} s\n  "
                  + corpus.format_row(result), flush=True)
    finally:
        corpus.fetch = fetch


def _work_rounding(model, path: Path) -> float:
    """The worst cosine between onnxruntime's runs of the float import and of ``path`` on
    the corpus's evaluation inputs of ``model``."""
    import onnxruntime

    from benchmarks.corpus_feeds import prepare
    floats = dequantize_dynamic(onnx.load(str(path))).model.SerializeToString()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3          # the file's declared output shape, which it does not keep
    sessions = [onnxruntime.InferenceSession(m, options, providers=["CPUExecutionProvider"])
                for m in (str(path), floats)]
    return min(cosine(*(s.run(None, feed)[0] for s in sessions)) for feed in prepare(model, path).evaluation)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dynamic_quant", description=__doc__.split("\n")[0])
    p.add_argument("--work", action="store_true", help="also the corpus's ddddocr-rec, dynamically quantized")
    args = p.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)     # quantize_dynamic's advice to pre-process first
    with ScratchDevice(cores=2, memory="2G", watchdog_ms=5000) as device, \
            tempfile.TemporaryDirectory(prefix="npu-dynq-") as tmp:
        for name, model in (("crnn", crnn()), ("crnn-wide", crnn_wide())):
            measure(name, model, str(device.devroot), Path(tmp))
        if args.work:
            measure_work(str(device.devroot), Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
