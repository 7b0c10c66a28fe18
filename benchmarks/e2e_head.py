"""A YOLO detector exported end to end (TopK post-processing in the graph), compiled and judged as the corpus judges.

Round 4's ``nudenet-best`` (YOLOv8, work half: 18 classes, 2100 anchors at 320x320) with
ultralytics' end-to-end head appended (``tests.support.model_builders.end_to_end_head``:
Transpose, Split, ReduceMax, TopK 300, GatherElements, TopK, Mod / Div, Concat to
``dets`` [1, 300, 6]: x1, y1, x2, y2, score, class), calibrated and evaluated on the
inputs ``benchmarks/corpus_inputs_vision.nudenet_v3`` prepares (10 pictures, 2 unseen).
Each variant is compiled with ``npu compile`` (the options given), run on a scratch
device and judged per output as ``benchmarks/corpus.py`` does (worst cosine over the
unseen inputs, bar 0.98), with what the cosine hides:

* ``same rank``: rows whose class and box (within ``BOX_PX`` pixels) are the reference's at
  the same rank; ``found``: reference rows present at any rank;
* ``>T``: the rows the reference scores above each of ``SCORES`` (a detector's confidence
  threshold: ultralytics' 0.25), how many are the reference's at the same rank, their
  cosine (paired by rank) and their largest score error;
* ``ties``: reference rows whose score is within ``TIE`` of the next row's.

``--noise`` adds the floor no precision short of float passes: the float head on the
float raw output plus uniform noise of a share of each channel's range.

Run from the repository root (one compile at a time; the 2-core VM is shared)::

    python -m benchmarks.e2e_head                                   # default options
    python -m benchmarks.e2e_head --variant "fast=--recipe fast" --noise
    python -m benchmarks.e2e_head --npu /work/main/.venv/bin/npu    # another tree's compiler

Measured 2026-11-29 (branch e2ehead, main at cf025e6; load ~8 on the 2-core VM): see
docs/models.md, "YOLO heads exported end to end".
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from benchmarks.corpus import run_device, write_calibration
from benchmarks.corpus_feeds import prepare
from benchmarks.corpus_manifest import BY_NAME, fetch
from benchmarks.models_in_the_wild import COSINE_BAR, cosine, cpu_ops
from benchmarks.scratch_device import ScratchDevice
from libnpu.loadable import Loadable
from npu_hw.regs import DEFAULT_JOB_TIMEOUT_MS
from tests.support.model_builders import end_to_end_head

MODEL = "nudenet-best"
CLASSES = 18
K = 300
BOX_PX = 2.0       # a row's box within this many pixels of the reference's counts as the same
SCORES = (0.25, 0.05)   # the rows a detector keeps (ultralytics' default confidence), and more
TIE = 1e-4         # scores this close to the next row's are near ties
NOISE = (1e-2, 1e-3, 1e-4, 1e-5)


def row_figures(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    """What one input's [K, 6] rows show beside their cosine (module docstring)."""
    got, want = got.reshape(-1, 6).astype(np.float64), want.reshape(-1, 6).astype(np.float64)

    def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (np.abs(a[..., :4] - b[..., :4]).max(-1) <= BOX_PX) & (a[..., 5] == b[..., 5])

    at_rank = same(got, want)
    figures = {"cosine": cosine(got, want), "same rank": int(at_rank.sum()),
               "found": int(same(want[:, None], got[None]).any(1).sum()),
               "ties": int((np.abs(np.diff(want[:, 4])) < TIE).sum())}
    for t in SCORES:
        kept = want[:, 4] > t
        figures[f"rows>{t}"] = int(kept.sum())
        figures[f"same>{t}"] = int(at_rank[kept].sum())
        figures[f"cos>{t}"] = cosine(got[kept], want[kept]) if kept.any() else float("nan")
        figures[f"score>{t}"] = float(np.abs(got[kept, 4] - want[kept, 4]).max(initial=0.0))
    return figures


def _line(name: str, figures: list[dict[str, float]], extra: str = "") -> str:
    worst = min(f["cosine"] for f in figures)
    per = "; ".join(f"cos {f['cosine']:.4f} same rank {f['same rank']}/{K} found {f['found']} ties {f['ties']}"
                    + "".join(f", >{t}: {f[f'rows>{t}']} rows, {f[f'same>{t}']} same, cos {f[f'cos>{t}']:.4f}, "
                              f"score err {f[f'score>{t}']:.3f}" for t in SCORES) for f in figures)
    return f"{name:<22} worst {worst:.4f} {'pass' if worst >= COSINE_BAR else 'FAIL'}  [{per}]{extra}"


def _head_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """The end-to-end head of ``model`` alone, reading the raw output ``output0``."""
    raw = "output0"
    head = onnx.ModelProto()
    head.CopyFrom(model)
    made = {o for n in model.graph.node for o in n.output}
    nodes = [n for n in model.graph.node if any(o.startswith("e2e") or o == "dets" for o in n.output)]
    del head.graph.node[:]
    head.graph.node.extend(nodes)
    del head.graph.input[:]
    head.graph.input.append(onnx.helper.make_tensor_value_info(raw, onnx.TensorProto.FLOAT, [1, 4 + CLASSES, 2100]))
    del head.graph.initializer[:]
    head.graph.initializer.extend(i for i in model.graph.initializer if i.name.startswith("e2e") and i.name not in made)
    return head


def noise_floor(base: onnx.ModelProto, model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> list[str]:
    """The float head on the float raw output plus noise of each share of every channel's range."""
    raw = ort.InferenceSession(base.SerializeToString())
    head = ort.InferenceSession(_head_only(model).SerializeToString())
    rng = np.random.default_rng(0)
    lines = []
    outs = [raw.run(None, {"images": x})[0] for x in inputs]
    wants = [head.run(None, {"output0": r})[0] for r in outs]
    for share in NOISE:
        figures = []
        for r, want in zip(outs, wants):
            span = r.max(axis=2, keepdims=True) - r.min(axis=2, keepdims=True)
            noisy = (r + rng.uniform(-.5, .5, r.shape) * span * share).astype(np.float32)
            figures.append(row_figures(head.run(None, {"output0": noisy})[0], want))
        lines.append(_line(f"float + noise {share:g}", figures))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.e2e_head", description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                   help="a variant: its name and npu compile options, as one argument (repeatable; "
                        "default: one, 'default', with no options)")
    p.add_argument("--npu", default=None, help="the npu command to compile with (default: this tree's; "
                   "another tree's runs from / without PYTHONPATH, so it imports its own code)")
    p.add_argument("--judge", action="append", default=[], metavar="NAME=FILE.nlb",
                   help="also judge this loadable, compiled before from the same model (repeatable)")
    p.add_argument("--noise", action="store_true", help="also the float head under noise (the floor)")
    p.add_argument("--keep", metavar="DIR", help="keep the model, calibration and loadables in DIR")
    args = p.parse_args(argv)
    corpus = BY_NAME[MODEL]
    path = fetch(corpus)
    feeds = prepare(corpus, path)
    base = onnx.load(path)
    model = end_to_end_head(base, CLASSES, K)
    unseen = [f["images"] for f in feeds.evaluation]
    ref = ort.InferenceSession(model.SerializeToString())
    wants = [ref.run(None, {"images": x})[0] for x in unseen]
    variants = [v.split("=", 1) for v in args.variant] or ([] if args.judge else [["default", ""]])
    npu = [args.npu] if args.npu else [sys.executable, "-m", "libnpu.tools"]
    env = {k: v for k, v in os.environ.items() if not (args.npu and k == "PYTHONPATH")}
    with tempfile.TemporaryDirectory(prefix="npu-e2e-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, folder / "e2e.onnx")
        calibration = write_calibration(feeds.calibration, folder)
        if args.noise:
            print("\n".join(noise_floor(base, model, unseen)), flush=True)
        with ScratchDevice(cores=2, memory="2G", watchdog_ms=DEFAULT_JOB_TIMEOUT_MS) as device:
            for name, options in variants:
                out = folder / f"{name}.nlb"
                cmd = [*npu, "compile", str(folder / "e2e.onnx"), "-o", str(out), "--no-progress",
                       "--cache-dir", str(folder / "cache"), "--calibration", str(calibration),
                       *options.split()]
                started = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/" if args.npu else None)
                took = time.perf_counter() - started
                if proc.returncode:
                    print(f"{name:<22} compile failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1]}")
                    continue
                _, floats, _ = run_device(out, str(device.devroot), [{"images": x} for x in unseen], ["images"])
                chosen = [ln.strip() for ln in proc.stdout.splitlines() if "<- chosen" in ln or "per output" in ln]
                print(_line(name, [row_figures(f[0], w) for f, w in zip(floats, wants)],
                            f"  compile {took:.0f} s, {len(cpu_ops(Loadable.load(out)))} ops on the CPU"
                            + (f"; {' | '.join(chosen)}" if chosen else "")), flush=True)
            for name, nlb in (j.split("=", 1) for j in args.judge):
                _, floats, _ = run_device(Path(nlb), str(device.devroot), [{"images": x} for x in unseen], ["images"])
                print(_line(name, [row_figures(f[0], w) for f, w in zip(floats, wants)],
                            f"  {len(cpu_ops(Loadable.load(nlb)))} ops on the CPU"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
