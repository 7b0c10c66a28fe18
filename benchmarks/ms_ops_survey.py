"""ONNX as users ship it: small float models saved after onnxruntime's graph optimizations,
or quantized in the QOperator format, compiled with the defaults and with ``--recipe fast``.

Each model of ``tests.support.ms_ops_models`` (a CNN, a 1-D audio front end, two transformer
blocks, an MLP, a model of every QLinear operator) is written as users ship it:

* ``ext`` / ``all``: onnxruntime's own optimizer at ``ORT_ENABLE_EXTENDED`` / ``ORT_ENABLE_ALL``
  (``SessionOptions.optimized_model_filepath``): FusedConv, FusedGemm, FusedMatMul,
  QuickGelu, Gelu, FastGelu, SkipLayerNormalization; ``all`` also writes the
  ``com.microsoft.nchwc`` blocked-layout ops of this machine;
* ``qop``: ``quantize_static`` in the QOperator format (QLinearConv, QLinearAdd, QGemm...);
  ``qop-ext``: that model optimized at ``ORT_ENABLE_EXTENDED``;
* ``dyn-ext``: ``quantize_dynamic`` (int8 weights) then ``ORT_ENABLE_EXTENDED``
  (DynamicQuantizeMatMul, MatMulIntegerToFloat), judged against onnxruntime's run of that
  file, which rounds each activation to uint8 on each run (the compiler's reference is the
  float model it stands for).

For each, a row per recipe: the file's non-ONNX operators, whether it compiles, the
worst cosine of the device's outputs against
onnxruntime's run of the file itself on inputs calibration never saw, and the file's
operators left on the CPU (of all its nodes).

``--work NAME ...`` also takes corpus models of the work half (never a held-out one), each as
shipped and optimized by onnxruntime at ``ORT_ENABLE_EXTENDED``, judged as
``benchmarks.corpus`` judges a model (``npu compile`` with the defaults, the package's own
calibration and evaluation inputs). Run from the repository root::

    python -m benchmarks.ms_ops_survey [--models cnn mlp ...] [--work rapidocr-cls ...]
"""
from __future__ import annotations

import argparse
import collections
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

import libnpu
from benchmarks.models_in_the_wild import cpu_ops
from benchmarks.scratch_device import ScratchDevice
from libnpu.compiler.lower import compile_model
from tests.support.dynamic_quant_models import quantize_dynamic_model
from tests.support.ms_ops_models import FLOAT_MODELS, feeds, optimized, quantized_qoperator

RECIPES = (("default", {}), ("fast", {"recipe": "fast"}))


def variants(name: str, folder: Path) -> dict[str, onnx.ModelProto]:
    """The files a user ships of model ``name``."""
    model = FLOAT_MODELS[name]()
    made = {"ext": optimized(model, folder, "extended"), "all": optimized(model, folder, "all")}
    if name in ("cnn", "qops", "encoder"):
        qop = quantized_qoperator(model, folder)
        made |= {"qop": qop, "qop-ext": optimized(qop, folder, "extended")}
    if name in ("encoder", "mlp"):
        dynamic = onnx.load_from_string(quantize_dynamic_model(model, folder))
        dynamic.graph.name = f"{name}-dynamic"
        made |= {"dyn-ext": optimized(dynamic, folder, "extended")}
    return made


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def foreign_ops(model: onnx.ModelProto) -> str:
    """The file's operators of a domain other than ONNX's, counted."""
    counts = collections.Counter(f"{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx"))
    return ",".join(f"{op}x{k}" if k > 1 else op for op, k in sorted(counts.items())) or "-"


def measure(name: str, tag: str, model: onnx.ModelProto, devroot: str) -> None:
    import onnxruntime  # type: ignore[import-untyped]   # a test dependency, as in the corpus scripts
    data = model.SerializeToString()
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    unseen = feeds(model, 4, seed=99)
    want = [session.run(None, dict(zip(names, f))) for f in unseen]
    for recipe, options in RECIPES:
        head = f"{name + '-' + tag:<18} {recipe:<8} {foreign_ops(model)[:60]:<60}"
        try:
            loadable = compile_model(data, feeds(model, 16, seed=1), **options)
        except Exception as exc:  # noqa: BLE001 - the survey reports every failure as a row
            print(f"{head} FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:150]}", flush=True)
            continue
        cpu = cpu_ops(loadable)         # the file's operators, as placement names them
        with libnpu.load(loadable, devroot=devroot) as compiled:
            worst = min(_cosine(g, w) for f, ws in zip(unseen, want)
                        for g, w in zip(compiled.infer(f, dequantized=True), ws))
        print(f"{head} ok   cos {worst:.4f}  cpu {len(cpu):>2} of {len(model.graph.node):>2} ops "
              f"{'+'.join(cpu)[:70]}", flush=True)


def measure_work(name: str, devroot: str, folder: Path) -> None:
    """Work-half corpus model ``name`` as shipped and as onnxruntime's optimizer saves it,
    judged by the corpus's own evaluation."""
    import benchmarks.corpus as corpus
    from benchmarks.corpus_manifest import BY_NAME
    model = BY_NAME[name]
    if model.half != "work":
        raise SystemExit(f"{name} is held out: never compiled or judged here")
    source = corpus.fetch(model)
    shipped = onnx.load(str(source))
    shipped.graph.name = name
    path = folder / f"{name}-ext.onnx"
    onnx.save(optimized(shipped, folder, "extended"), str(path))
    fetch = corpus.fetch
    try:
        for tag, file in (("as shipped", source), ("ext", path)):
            corpus.fetch = lambda _model, file=file: file      # the corpus's evaluation, on this file
            result = corpus.evaluate(model, devroot, None, corpus.TIMEOUT)
            print(f"{name} {tag} ({foreign_ops(onnx.load(str(file)))}): compile {result.compile_seconds} s\n  "
                  + corpus.format_row(result), flush=True)
    finally:
        corpus.fetch = fetch


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ms_ops_survey", description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", default=list(FLOAT_MODELS), choices=list(FLOAT_MODELS))
    p.add_argument("--work", nargs="*", default=[], help="work-half corpus models, also optimized by onnxruntime")
    args = p.parse_args(argv)
    logging.getLogger("libnpu").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="npu-msops-") as tmp, ScratchDevice(cores=2, memory="1G") as device:
        for name in args.models:
            for tag, model in variants(name, Path(tmp)).items():
                measure(name, tag, model, device.devroot)
        for name in args.work:
            measure_work(name, device.devroot, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
