"""Arbitrary-style transfer networks in small (Magenta's kind) compiled with the defaults.

The networks of ``tests/support/style_models.py``: a content picture and a 100-value style
vector in, reflect-padded convolutions, conditional instance norms (gamma and beta from the
style vector at run time), residual blocks, a nearest-neighbour upsampling, a Sigmoid out.
Each case names its spelling (``tf``: TensorFlow's ``nn.batch_normalization`` as tf2onnx
writes it, ``centred``, ``onnx``: InstanceNormalization, no style input), its layout (``nhwc``:
channels last with Transposes around the convolutions and a 1x1 Conv per gamma / beta, as
tf2onnx leaves a TFLite model) and ``spread`` (each convolution's output channels 1 .. spread
times apart, as a trained network's are; epsilon 1e-5). Each row: the operators on the CPU
(the loadable's placement and the escalation's float layers), the worst cosine over 6
unseen inputs of ``npu compile`` with its defaults and a calibration of 16, run on a scratch
device against onnxruntime's run of the same file, what the escalation chose and the
compile's seconds. Run from the repository root::

    python -m benchmarks.style_transfer [--size 64] [--width 16] [--blocks 3] [--cases tf,onnx,...]

Measured (load 9-11, the defaults above): main at 894a746 gave the spread-100 cases 0.9165
(TensorFlow's spelling), 0.9164 (channels last, its Resize on the CPU) and 0.9119 (centred),
the escalation missing its target, and ONNX InstanceNormalization 0.9999 with 10 ops on
the CPU; with INSTANCE_NORM every case is 0.9999 with no op on the CPU (docs/models.md).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

import libnpu
from benchmarks.models_in_the_wild import cosine, cpu_ops
from benchmarks.scratch_device import ScratchDevice
from libnpu.loadable import Loadable
from tests.support.style_models import feeds, style_transfer

#: name -> (spelling, channels last, channel spread)
CASES = {"tf": ("tf", False, 1.0), "tf-spread": ("tf", False, 100.0), "nhwc-spread": ("tf", True, 100.0),
         "centred-spread": ("centred", False, 100.0), "onnx-spread": ("onnx", False, 100.0)}


def measure(case: str, args: argparse.Namespace, folder: Path, devroot: str) -> str:
    import onnxruntime  # type: ignore[import-untyped]   # a test dependency, as in the corpus scripts
    form, nhwc, spread = CASES[case]
    model = style_transfer(size=args.size, width=args.width, form=form, nhwc=nhwc, blocks=args.blocks,
                           spread=spread, eps=1e-5)
    path = folder / f"{case}.onnx"
    onnx.save(model, path)
    style = form != "onnx"
    cal, unseen = feeds(16, args.size, 1, style, nhwc), feeds(6, args.size, 2, style, nhwc)
    np.savez(folder / f"{case}.npz", **{k: np.stack([f[k] for f in cal]) for k in cal[0]})
    out = folder / f"{case}.nlb"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "libnpu.tools", "compile", str(path), "-o", str(out),
                           "--no-progress", "--cache-dir", str(folder / "cache"),
                           "--calibration", str(folder / f"{case}.npz")], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode:
        return f"{case:15s} compile failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1]}"
    loadable = Loadable.load(out)
    chosen = ((loadable.metadata.get("fidelity") or {}).get("chosen")) or "-"
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = libnpu.load(out, devroot=devroot)
    try:
        request = compiled.create_request()
        worst = 1.0
        for feed in unseen:
            (want,) = session.run(None, feed)
            request.infer(feed)
            got = request.outputs(dequantized=True)[0]
            worst = min(worst, cosine(got.reshape(want.shape), want))
    finally:
        compiled.close()
    cpu = cpu_ops(loadable)
    return f"{case:15s} cpu ops {len(cpu):3d}  worst cosine {worst:.4f}  chosen {chosen:22s} {seconds:6.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}: {', '.join(CASES)}")
    print(f"size {args.size}, width {args.width}, {args.blocks} residual blocks")
    with tempfile.TemporaryDirectory() as tmp, ScratchDevice(cores=2, memory="2G") as device:
        for case in cases:
            print(measure(case, args, Path(tmp), str(device.devroot)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
