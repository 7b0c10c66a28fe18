"""Per-token decoder steps on the npu next to onnxruntime, two checkouts side by side.

A step model (one call = one token: an embedding lookup, a GRU cell, attention over a short
encoder output, a Linear + softmax) costs what a call costs, not multiply-adds: chip jobs,
host calls between them, inputs in and outputs out. This builds synthetic steps
(``tests/support/step_models.py``: PyTorch's ``AttnDecoderRNN`` with a GRU node or the cell
written out, int64 token, state in and out, encoder outputs of T x H), compiles each as a
user would (``npu compile`` with its defaults and calibration feeds of a decoding loop) in
each checkout, and times it on each checkout's own scratch device with ``npu bench
model``'s interleaved loop (``libnpu.tools.model_bench``, inputs in to outputs out) beside
onnxruntime's CPU provider on one thread, in the same loop. Rounds alternate the checkouts
(A B, B A, ...); each row is the median over rounds of: npu p50, onnxruntime p50, their
ratio, the stages' p50 (inputs, job, outputs), and the loadable's chip jobs and host calls.

Run from the checkout under test (B); ``--base`` is the other (A, with its own .venv)::

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.step_bench --base /work/main --rounds 4

The worker half (``--worker``) runs under either checkout's interpreter and imports only
what both have (``libnpu``, ``benchmarks.corpus_inputs.Runner``, ``model_bench``'s loop).

Measured 2026-11-29, branch rnnstep (B) against main at cf025e6 (A), the command above,
load average 8.5 at the start, 9.2 at the end (2-vCPU VM shared with other sessions); us::

    model                side jobs host   npu p50   ort p50  ratio   inputs      job outputs
    gru-step-h128-t32    A       2    1    1049.7     131.6  8.25x     12.6   1011.3     7.1
    gru-step-h128-t32    B       1    0     106.4      65.5  1.65x     18.8     84.0     1.7
    gru-cell-h128-t32    A       2    1    1480.6     128.1 11.56x     11.7   1405.6     6.8
    gru-cell-h128-t32    B       1    0     109.7      67.6  1.62x     18.2     86.1     1.8
    gru-step-h256-t48    A       2    1    1942.7     305.8  7.37x     16.8   1893.5     8.5
    gru-step-h256-t48    B       1    0     228.2     163.8  1.39x     25.0    191.4     2.8
    gru-beam-h128-t32    A       2    2     807.7     106.8  7.37x     10.4    784.3     4.6
    gru-beam-h128-t32    B       1    1     150.6      61.5  2.45x     19.6    126.2     2.0
    gru-mask-h128-t32    A       2    1    1539.2     140.2 10.17x     16.3   1500.2     7.9
    gru-mask-h128-t32    B       2    1     251.8      78.9  3.19x     24.8    212.6     2.1

A's job holds its int64 token's lookup on the host between two jobs and LOG_SOFTMAX and
BATCH_MATMUL in numpy (395 us of chip CPU per job, ``benchmarks.chip_replay``; 37 us in
C). The masked step keeps two jobs on B: its ``Where`` (the -1e10 sentinel of
``masked_fill``) runs on the host between them. The same run at load 14-17 gave A 17-37x,
B 1.6-1.8x without host steps, 3.8x with the beam's TopK, 11.1x with the mask's Where:
each host call and each extra job costs most under load.

Branch masks2 (B) against main at 01a000c (A), ``--rounds 2 --seconds 0.5``, load 6.8 at
the start, 5.8 at the end: the masked step's sentinel becomes an added mask the CPU makes
from the bool input before the chip's one job (``compiler.attention_masks``)::

    gru-mask-h128-t32    A       2    1     209.3      71.9  2.91x     22.9    181.2     1.8
    gru-mask-h128-t32    B       1    1     156.5      85.8  1.87x     23.9    127.4     1.9

(The other rows of that run differed only by main's newer escalation, since merged.)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TAG = "STEP-BENCH "

#: name -> gru_attention_step's options: the sizes of small seq2seq decoders (H 128-256, T 20-60).
VARIANTS: dict[str, dict[str, Any]] = {
    "gru-step-h128-t32": dict(hidden=128, positions=32, vocab=64),
    "gru-cell-h128-t32": dict(hidden=128, positions=32, vocab=64, spelled=True),
    "gru-step-h256-t48": dict(hidden=256, positions=48, vocab=96),
    "gru-beam-h128-t32": dict(hidden=128, positions=32, vocab=64, beam=5),       # TopK on the host
    "gru-mask-h128-t32": dict(hidden=128, positions=32, vocab=64, masked=True),  # masked_fill's Where on the host
}


def write_models(folder: Path) -> list[Path]:
    """Each variant's model.onnx, calibration.npz (64 decoding-loop feeds) and feed.npz (the
    timed feed, from another seed) under ``folder``/<name>."""
    import onnx  # the builders need onnx; the worker half does not import them

    from tests.support.step_models import gru_attention_step, step_feeds
    made = []
    for name, options in VARIANTS.items():
        model = gru_attention_step(**options)
        out = folder / name
        out.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(out / "model.onnx"))
        cal = step_feeds(model, 64, seed=1)
        np.savez(out / "calibration.npz", **{k: np.stack([f[k] for f in cal]) for k in cal[0]})  # type: ignore[arg-type]
        np.savez(out / "feed.npz", **step_feeds(model, 1, seed=99)[0])  # type: ignore[arg-type]
        made.append(out)
    return made


def worker(folder: Path, devroot: str, seconds: float) -> dict[str, Any]:
    """Time ``folder``/model.nlb against ``folder``/model.onnx (in this checkout's process)."""
    import libnpu
    from benchmarks.corpus_inputs import Runner
    from libnpu.loadable import Loadable
    from libnpu.tools.model_bench import _interleaved, _StagedInference

    loadable = Loadable.load(folder / "model.nlb")
    feed = dict(np.load(folder / "feed.npz"))
    jobs = sum(1 for tasks, _ in loadable.partitions() if len(tasks))
    with libnpu.load(loadable, devroot=devroot) as model:
        request = model.create_request()
        try:
            npu = _StagedInference(request, [feed[d.name] for d in model.inputs])
            runner = Runner(folder / "model.onnx")
            steps = {"npu": npu, "reference": lambda: runner(feed)}
            for step in steps.values():
                for _ in range(3):
                    step()
            npu.clear()
            samples = _interleaved(steps, seconds)
        finally:
            request.release()
    npu_us, ref_us = (float(np.median(samples[k])) * 1e6 for k in ("npu", "reference"))
    return {"npu_us": npu_us, "ort_us": ref_us, "jobs": jobs, "host_calls": len(loadable.host_steps),
            "stages": {k: v["p50_us"] for k, v in npu.report().items()}}


class Side:
    """One checkout: its interpreter, its compile cache and its scratch device."""

    def __init__(self, name: str, root: Path, scratch: Path) -> None:
        self.name, self.root = name, root.resolve()
        self.python = str(self.root / ".venv" / "bin" / "python")
        self.cache = scratch / f"cache-{name}"
        self.devroot = scratch / f"dev-{name}"
        self.devroot.mkdir()
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def env(self) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(self.root), NPU_CACHE_DIR=str(self.cache))

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, *args], cwd=self.root, env=self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def start(self) -> None:
        self.run("-m", "firmware_sim.kernels.native")          # its C kernels built before the chip powers on
        done = self.run("-m", "kmd_fuse.cli", "start", "--cores", "2", "--memory", "1G", "--devroot",
                        str(self.devroot))
        if done.returncode:
            raise RuntimeError(f"{self.name}: npu-kmd start failed: {done.stdout}{done.stderr}")

    def stop(self) -> None:
        self.run("-m", "kmd_fuse.cli", "stop", "--devroot", str(self.devroot), timeout=120)

    def compile(self, model: Path, out: Path) -> Path:
        """``npu compile`` with its defaults and the model's calibration, into ``out``/<side>/."""
        out.mkdir(parents=True, exist_ok=True)
        for name in ("model.onnx", "feed.npz"):
            (out / name).write_bytes((model / name).read_bytes())
        done = self.run("-m", "libnpu.tools", "compile", str(model / "model.onnx"), "-o", str(out / "model.nlb"),
                        "--calibration", str(model / "calibration.npz"), "--no-progress")
        if done.returncode:
            raise RuntimeError(f"{self.name}: npu compile {model.name} failed: {done.stderr.strip()[-300:]}")
        return out

    def measure(self, name: str, folder: Path, seconds: float) -> None:
        done = self.run(str(Path(__file__).resolve()), "--worker", str(folder), "--devroot", str(self.devroot),
                        "--seconds", str(seconds))
        lines = [line for line in done.stdout.splitlines() if line.startswith(TAG)]
        if not lines:
            print(f"{self.name}: {name} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
            return
        self.rows.setdefault(name, []).append(json.loads(lines[-1][len(TAG):]))


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows) if rows else float("nan")


def compare(base: Path, rounds: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="step-bench-") as tmp:
        scratch = Path(tmp)
        models = write_models(scratch / "models")
        sides = [Side("A", base, scratch), Side("B", REPO, scratch)]
        try:
            for side in sides:
                side.start()
            compiled = {(s.name, m.name): s.compile(m, scratch / "compiled" / s.name / m.name)
                        for s in sides for m in models}
            load = os.getloadavg()
            for r in range(rounds):
                for m in models:
                    for side in (sides if r % 2 == 0 else sides[::-1]):
                        side.measure(m.name, compiled[(side.name, m.name)], seconds)
            print(f"A = {sides[0].root}, B = {sides[1].root}; medians of {rounds} alternated rounds of {seconds:g} s; "
                  f"load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
            print(f"{'model':20} {'side':4} {'jobs':>4} {'host':>4} {'npu p50':>9} {'ort p50':>9} {'ratio':>6}  "
                  f"{'inputs':>7} {'job':>8} {'outputs':>7}  (us)")
            for m in models:
                for side in sides:
                    rows = side.rows.get(m.name, [])
                    if not rows:
                        continue
                    stage = {k: statistics.median(r["stages"][k] for r in rows) for k in ("inputs", "job", "outputs")}
                    ratio = statistics.median(r["npu_us"] / r["ort_us"] for r in rows)
                    print(f"{m.name:20} {side.name:4} {rows[0]['jobs']:>4} {rows[0]['host_calls']:>4} "
                          f"{_median(rows, 'npu_us'):9.1f} {_median(rows, 'ort_us'):9.1f} {ratio:5.2f}x  "
                          f"{stage['inputs']:7.1f} {stage['job']:8.1f} {stage['outputs']:7.1f}", flush=True)
        finally:
            for side in sides:
                side.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", type=Path, help="the other checkout (with its own .venv): side A")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=1.0, help="timed loop per model and round (at least 20 calls)")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--devroot", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(TAG + json.dumps(worker(args.worker, args.devroot, args.seconds)), flush=True)
        return 0
    compare(args.base or REPO, args.rounds, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
