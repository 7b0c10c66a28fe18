"""Where a quantized model's output error comes from: each activation tensor's rounding,
simulated as noise.

For a mediapipe model of issue 13, quantized as ``benchmarks/models_in_the_wild.py``
quantizes it (``--recipe accurate`` unless ``--plain``; ``--option key=json`` adds
quantizer options), this runs the float graph (equalized, when the options equalize)
on the calibration and evaluation pictures with uniform noise of one grid step added to
quantized activation tensors, and reports the output's rms error:

* with every tensor's noise at once, which predicts the rounding part of the device's
  error (hand_recrop, ``--recipe accurate``: 0.027 pixels predicted, 0.026 measured on the
  device over 18 unseen picture variants);
* tensor by tensor, each one's share of that error's variance (``--top`` rows): which
  tensors' grids are worth making finer;
* the floors of other grids, with the same noise model: symmetric per tensor, asymmetric
  per tensor and symmetric per channel, each spanning the calibrated range exactly, and
  symmetric per channel with the compiler's int16 headroom (twice the range).

Weights are the float graph's: this measures the activations alone (int16 weights leave
little else on hand_recrop). Run from the repository root::

    python -m benchmarks.rounding_noise hand_recrop [--top 12] [--draws 3] [--option int16_headroom=2.0]
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.models_in_the_wild import CALIBRATION, EVALUATION, RECIPE, picture_feed, recipe_options
from libnpu import model_zoo
from libnpu.compiler.float_ref import evaluate
from libnpu.compiler.frontend import load_model, to_int8_graph
from libnpu.compiler.ir import Graph
from libnpu.compiler.mixed_precision import INT16_HEADROOM
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import equalized
from libnpu.compiler.recipes import apply_recipe

Steps = Mapping[str, np.ndarray]


def run_noisy(graph: Graph, feed: Sequence[np.ndarray], steps: Steps, rng: np.random.Generator,
              keep: bool = False) -> dict[str, np.ndarray]:
    """One float run of ``graph`` with uniform noise of ``steps[t]`` (a scalar or one step
    per channel) added to each tensor t named in ``steps``: its outputs, or every tensor."""
    env = {t.name: np.asarray(t.data, np.float64) for t in graph.constants()}
    env.update({n: np.asarray(v, np.float64) for n, v in zip(graph.inputs, feed)})
    for op in graph.ops:
        y = np.asarray(evaluate(op, [env[i] if i else None for i in op.inputs], graph.tensors[op.outputs[0]]),
                       np.float64)
        name = op.outputs[0]
        if name in steps:
            y = y + rng.uniform(-0.5, 0.5, y.shape) * steps[name]
        env[name] = y
    return env if keep else {n: env[n] for n in graph.outputs}


def output_rms(graph: Graph, feeds: Sequence[Sequence[np.ndarray]], reference: Sequence[Mapping[str, np.ndarray]],
               steps: Steps, draws: int, seed: int = 0) -> dict[str, float]:
    """Each output's rms error over ``feeds`` x ``draws`` noisy runs."""
    rng = np.random.default_rng(seed)
    squares: dict[str, list[float]] = {n: [] for n in graph.outputs}
    for _ in range(draws):
        for feed, ref in zip(feeds, reference):
            got = run_noisy(graph, feed, steps, rng)
            for n in graph.outputs:
                squares[n].append(float(((got[n] - ref[n]) ** 2).mean()))
    return {n: float(np.sqrt(np.mean(v))) for n, v in squares.items()}


def grid_steps(quantized: Graph, float_graph: Graph) -> dict[str, np.ndarray]:
    """The step of every quantized activation tensor the float graph also has (one per
    channel for a per-channel int16 grid)."""
    made = {o for op in float_graph.ops for o in op.outputs}
    steps = {}
    for name in made:
        t = quantized.tensors.get(name)
        if t is not None and t.quant is not None and t.dtype in ("int8", "int16") and not t.is_constant:
            steps[name] = np.asarray(t.quant.scale, np.float64) if t.quant.per_channel \
                else np.asarray(float(t.quant.scale[0]))
    return steps


def floors(float_graph: Graph, calibration: Sequence[Sequence[np.ndarray]], names: Sequence[str],
           headroom: float = INT16_HEADROOM) -> dict[str, Steps]:
    """int16 steps spanning each tensor's calibrated range exactly, three ways, and
    symmetric per channel with ``headroom`` times the range (the compiler's int16 grids)."""
    rng = np.random.default_rng(0)
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    per_channel: dict[str, np.ndarray] = {}
    for feed in calibration:
        env = run_noisy(float_graph, feed, {}, rng, keep=True)
        for n in names:
            v = env[n]
            lo[n], hi[n] = min(lo.get(n, 0.0), float(v.min())), max(hi.get(n, 0.0), float(v.max()))
            peak = np.abs(v).reshape(-1, v.shape[-1]).max(axis=0)
            per_channel[n] = np.maximum(per_channel.get(n, peak), peak)
    return {"symmetric per tensor": {n: np.asarray(max(-lo[n], hi[n]) / 32767) for n in names},
            "asymmetric per tensor": {n: np.asarray((hi[n] - lo[n]) / 65535) for n in names},
            "symmetric per channel": {n: per_channel[n] / 32767 for n in names},
            f"per channel, {headroom:g}x range": {n: headroom * per_channel[n] / 32767 for n in names}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rounding_noise", description=__doc__.split("\n")[0])
    p.add_argument("model", choices=model_zoo.MEDIAPIPE_MODELS)
    p.add_argument("--plain", action="store_true", help=f"the compiler's defaults, not {RECIPE}")
    p.add_argument("--option", action="append", default=[], metavar="KEY=JSON", help="another quantizer option")
    p.add_argument("--output", help="the output whose error the per-tensor shares split (default the first)")
    p.add_argument("--top", type=int, default=12, help="tensors listed, largest share first")
    p.add_argument("--draws", type=int, default=3, help="noise draws per picture")
    args = p.parse_args(argv)
    options = recipe_options(p, args.plain, args.option)
    graph = load_model(model_zoo.mediapipe_model(args.model))
    shape = graph.tensors[graph.inputs[0]].shape
    calibration = [[picture_feed(model_zoo.picture(n), shape)] for n in CALIBRATION]
    pictures = calibration + [[picture_feed(model_zoo.picture(n), shape)] for n in EVALUATION]
    quantized = to_int8_graph(graph, calibration, **options)
    float_graph = optimize(graph)
    if apply_recipe(options).get("equalize"):
        float_graph = equalized(float_graph, calibration)
    reference = [run_noisy(float_graph, f, {}, np.random.default_rng(0)) for f in pictures]
    steps = grid_steps(quantized, float_graph)
    out = args.output or float_graph.outputs[0]
    total = output_rms(float_graph, pictures, reference, steps, args.draws)
    print(f"{args.model}: {len(steps)} quantized activation tensors; output rms error from their rounding:")
    for name, rms in total.items():
        print(f"  {name}: {rms:.4g}")
    shares = {n: output_rms(float_graph, pictures, reference, {n: s}, args.draws)[out] ** 2 for n, s in steps.items()}
    budget = sum(shares.values()) or 1.0
    print(f"tensors by share of {out}'s error variance (sum of the shares alone: rms {np.sqrt(budget):.4g}):")
    for name in sorted(shares, key=shares.get, reverse=True)[:args.top]:  # type: ignore[arg-type]
        print(f"  {name:<36} {shares[name] / budget:6.3f}  step {float(np.max(steps[name])):.3g}")
    print("floors (int16 grids spanning the calibrated range exactly, and per channel with headroom):")
    for label, grid in floors(float_graph, calibration, list(steps)).items():
        print(f"  {label:<26} {out} rms {output_rms(float_graph, pictures, reference, grid, args.draws)[out]:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
