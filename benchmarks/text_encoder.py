"""A BERT-style text encoder (all-MiniLM-L6-v2's layout, in small) compiled with the defaults.

The encoder of ``tests/support/encoder_models.py`` (token ids, attention mask and token
types in, int64; embeddings, LayerNorms spelled out, HF's ``(1 - mask) * finfo.min``, an
Erf GELU), in three kinds: ``plain``; ``massive``, whose feed-forward networks add ~50 to
two hidden dimensions of the delimiter tokens alone (the massive activations of trained
encoders, which set the int8 grids of the sums before each LayerNorm); ``gamma``, two
dimensions with large LayerNorm gains and shifts on every token. Each as the float model,
``w8`` (int8 weights, ``Cast`` and ``Mul`` by a scale before each MatMul), ``dyn``
(onnxruntime's ``quantize_dynamic``) and ``dynact`` (the same with ``MatMulConstBOnly``
off, as older onnxruntime quantized attention's products of activations too); calibrated
on 12 sentences padded to the sequence length (``pad``), on 12 that fill it (``nopad``:
no key ever masked) or on 12 short ones (``short``: 4-8 tokens). Each row: the worst cosine
over 6 unseen padded sentences of the default compile (``compile_model`` with calibration,
no options) run on a scratch device, against onnxruntime's run of the same file; the CPU
steps, the compile's seconds and what the escalation chose. Run from the repository root::

    python -m benchmarks.text_encoder [--kinds plain,massive] [--seq 16] [--hidden 64] [--layers 2]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import libnpu
from benchmarks.scratch_device import ScratchDevice
from libnpu.compiler.lower import compile_model
from tests.support.dynamic_quant_models import cosine
from tests.support.encoder_models import INPUTS, encoder, int8_weights, quantize_dynamic_encoder, sentences

KINDS = {"plain": {}, "massive": {"massive": 50.0}, "gamma": {"outliers": (3, 17), "big": 6.0, "writes": 1.0},
         "fused": {"fused": True, "pooled": True}, "fused-massive": {"massive": 50.0, "fused": True, "pooled": True}}
FORMS = ("float", "w8", "dyn", "dynact")
CALIBRATIONS = ("pad", "nopad", "short")


def model_bytes(form: str, kind: str, args: argparse.Namespace, folder: Path) -> bytes:
    model = encoder(seq=args.seq, hidden=args.hidden, heads=args.hidden // 16, layers=args.layers, **KINDS[kind])
    if form == "w8":
        return int8_weights(model).SerializeToString()
    if form.startswith("dyn"):
        return quantize_dynamic_encoder(model, folder, **({"extra_options": {"MatMulConstBOnly": False}}
                                                          if form == "dynact" else {}))
    return model.SerializeToString()


def calibration(name: str, seq: int) -> list:
    return {"pad": sentences(12, seq, 1), "nopad": sentences(12, seq, 1, min_len=seq),
            "short": sentences(12, seq, 1, min_len=4, max_len=8)}[name]


def measure(label: str, data: bytes, cal: list, unseen: list, devroot: str) -> None:
    import onnxruntime  # type: ignore[import-untyped]   # a test dependency, as in the corpus scripts
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = [session.run(None, feed) for feed in unseen]
    started = time.perf_counter()
    try:
        loadable = compile_model(data, cal)
        seconds = time.perf_counter() - started
        with libnpu.load(loadable, devroot=devroot) as compiled:
            got = [compiled.infer([feed[n] for n in INPUTS], dequantized=True) for feed in unseen]
    except Exception as exc:  # a row that fails is a figure too
        print(f"{label:<24} {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
        return
    worst = min(cosine(g, w) for gs, ws in zip(got, want) for g, w in zip(gs, ws))   # over every output
    chosen = loadable.metadata.get("fidelity", {}).get("chosen", "-")
    print(f"{label:<24} cosine {worst:.4f}  cpu steps {len(loadable.host_steps)}  compile {seconds:4.1f} s  "
          f"chose {chosen}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.text_encoder", description=__doc__.split("\n")[0])
    p.add_argument("--kinds", default=",".join(KINDS), help="of " + ", ".join(KINDS))
    p.add_argument("--forms", default=",".join(FORMS), help="of " + ", ".join(FORMS))
    p.add_argument("--calibrations", default=",".join(CALIBRATIONS), help="of " + ", ".join(CALIBRATIONS))
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    args = p.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)     # quantize_dynamic's advice to pre-process first
    unseen = sentences(6, args.seq, 99)
    with ScratchDevice(cores=2, memory="2G", watchdog_ms=5000) as device, \
            tempfile.TemporaryDirectory(prefix="npu-encoder-") as tmp:
        for kind in args.kinds.split(","):
            for form in args.forms.split(","):
                data = model_bytes(form, kind, args, Path(tmp))
                for cal in args.calibrations.split(","):
                    measure(f"{kind} {form} {cal}", data, calibration(cal, args.seq), unseen, str(device.devroot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
