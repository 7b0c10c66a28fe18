"""Two checkouts of the project side by side on the same models: which is faster, by how much.

A change's speed-up is only visible against the code before it measured in the same minutes
(a 2-vCPU machine shared with test suites swings a model's p50 by 10x within an hour). This
starts a scratch device for each checkout (each with its own ``.venv``, e.g. a ``git
worktree`` of the base branch and the branch under test), then for every model, in rounds
whose order alternates (A B, B A, ...):

- ``npu bench model --json --seconds S`` through each checkout's own CLI on its own device:
  the device p50 (inputs in to outputs out), the same run's LiteRT XNNPACK p50, the chip's
  wall time per job;
- ``benchmarks.chip_replay`` in each checkout: the chip's CPU time per job replayed
  in-process (thread time, which preemption does not inflate: the figure to compare kernels
  by on a loaded machine).

It prints, per model, the medians over rounds: XNNPACK p50, each side's p50 and its ratio to
XNNPACK, p50 A / p50 B, and chip CPU A -> B. Each checkout compiles into its own cache
(``--cache-root``/<side>), so neither reads the other's compiled models or C kernels.

Run from the checkout under test::

    python -m benchmarks.worktree_ab --base /work/wt-base model1.tflite model2.tflite [--rounds 3]

Measured 2026-11-29 (branch perfops against main e023e5a, load average 8-15: the p50 columns
are noise there, the chip CPU column is not) in the report of that branch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.scratch_device import ScratchDevice

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Side:
    """One checkout: its root, its device and its cache."""
    name: str
    root: Path
    cache: Path
    device: ScratchDevice | None = None
    bench: list[tuple[float, float, float]] = field(default_factory=list)   # p50 us, XNNPACK p50 us, chip us
    chip_cpu: list[float] = field(default_factory=list)

    @property
    def python(self) -> str:
        return str(self.root / ".venv" / "bin" / "python")

    def env(self) -> dict[str, str]:
        return dict(os.environ, NPU_CACHE_DIR=str(self.cache), PYTHONPATH=str(self.root))

    def start(self, parent: Path) -> None:
        """A scratch device run by this checkout's own driver and chip (its C kernels built
        first: a chip building them while it powers on may miss the driver's deadline)."""
        subprocess.run([self.python, "-m", "firmware_sim.kernels.native"], cwd=self.root, env=self.env(),
                       capture_output=True, text=True, timeout=600)
        self.device = ScratchDevice(parent=parent)
        result = subprocess.run([self.python, "-m", "kmd_fuse.cli", "start", *self.device.args, "--devroot",
                                 str(self.device.devroot)], cwd=self.root, env=self.env(), capture_output=True,
                                text=True, timeout=300)
        if result.returncode:
            raise RuntimeError(f"{self.name}: npu-kmd start failed: {result.stdout}{result.stderr}")

    def stop(self) -> None:
        if self.device is not None:
            subprocess.run([self.python, "-m", "kmd_fuse.cli", "stop", "--devroot", str(self.device.devroot)],
                           cwd=self.root, env=self.env(), capture_output=True, text=True, timeout=120)
            self.device.stop()

    def run_bench(self, model: str, seconds: float) -> None:
        assert self.device is not None
        done = subprocess.run([str(self.root / ".venv" / "bin" / "npu"), "bench", "model", model, "--devroot",
                               str(self.device.devroot), "--json", "--seconds", str(seconds)],
                              cwd=self.root, env=self.env(), capture_output=True, text=True, timeout=900)
        try:
            d = json.loads(done.stdout)
        except json.JSONDecodeError:
            print(f"{self.name}: npu bench model {model} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
            return
        self.bench.append((d["latency"]["p50_ms"] * 1000, d["litert"]["xnnpack"]["p50_ms"] * 1000,
                           d["latency_stages"]["chip"]["p50_us"]))

    def run_replay(self, model: str, jobs: int) -> None:
        done = subprocess.run([self.python, "-m", "benchmarks.chip_replay", model, "--jobs", str(jobs),
                               "--rounds", "5"], cwd=self.root, env=self.env(), capture_output=True, text=True,
                              timeout=900)
        for line in done.stdout.splitlines():
            if "chip CPU" in line:
                self.chip_cpu.append(float(line.split("chip CPU")[1].split()[0]))
                return
        print(f"{self.name}: chip_replay {model} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def compare(base: Path, models: list[str], rounds: int, seconds: float, jobs: int, cache_root: Path) -> None:
    sides = [Side("A", base.resolve(), cache_root / "A"), Side("B", REPO, cache_root / "B")]
    with tempfile.TemporaryDirectory(prefix="worktree-ab-") as parent:
        try:
            for side in sides:
                side.start(Path(parent))
            print(f"A = {sides[0].root}, B = {sides[1].root}; medians of {rounds} alternated rounds")
            print(f"{'model':40} {'XNNPACK':>8} {'p50 A':>8} {'p50 B':>8} {'A/xnn':>6} {'B/xnn':>6} {'A/B':>5}"
                  f" {'chip CPU A -> B us':>20}")
            for model in models:
                for side in sides:
                    side.bench.clear()
                    side.chip_cpu.clear()
                for r in range(rounds):
                    for side in (sides if r % 2 == 0 else sides[::-1]):
                        side.run_bench(model, seconds)
                        side.run_replay(model, jobs)
                a, b = sides
                xnn = _median([v[1] for s in sides for v in s.bench])
                pa, pb = _median([v[0] for v in a.bench]), _median([v[0] for v in b.bench])
                print(f"{Path(model).name[:40]:40} {xnn:8.1f} {pa:8.1f} {pb:8.1f} {pa / xnn:6.2f} {pb / xnn:6.2f}"
                      f" {pa / pb:5.2f} {_median(a.chip_cpu):9.1f} -> {_median(b.chip_cpu):6.1f}", flush=True)
        finally:
            for side in sides:
                side.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help=".tflite / .onnx files or model-zoo names")
    parser.add_argument("--base", required=True, type=Path, help="the other checkout (with its own .venv): side A")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="npu bench model --seconds")
    parser.add_argument("--jobs", type=int, default=100, help="chip_replay --jobs")
    parser.add_argument("--cache-root", type=Path, default=None,
                        help="where each side compiles and builds (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.cache_root is not None:
        compare(args.base, args.models, args.rounds, args.seconds, args.jobs, args.cache_root)
        return 0
    with tempfile.TemporaryDirectory(prefix="worktree-ab-cache-") as cache:
        compare(args.base, args.models, args.rounds, args.seconds, args.jobs, Path(cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
