"""How far a quantized graph's tensors drift from the float graph's, layer by layer.

:func:`layer_errors` runs the float graph and the quantized graph on the same data and
measures every tensor both graphs have, two ways. The quantized graph is simulated by the
float reference interpreter (every quantized tensor rounded to its int grid), not run by
the chip's integer kernels: each op differs from them by requantization rounding only,
but a network that amplifies rounding shows it. Measured on mediapipe's hand_landmark_lite
(one picture, against LiteRT's BUILTIN_REF int8 kernels, which the chip matches byte for
byte): mean differences under 0.4 LSB on every tensor, single elements up to 58 LSB apart
in depthwise layers. The figures are statistics of the same error process as the chip's,
not the chip's own values:

* **cumulative** (``sqnr_db``, ``cosine``): the quantized graph run end to end, so a
  tensor's error includes every error upstream of it; this is what the outputs show.
* **local** (``local_sqnr_db``): the op alone, fed the float graph's own inputs (its
  quantized weights and its output grid are the only error); this is the error the op
  itself adds, the figure to rank layers by when choosing which ones deserve more bits
  (int16 activations).

SQNR is ``10 log10(sum ref^2 / sum (ref - q)^2)`` over all values and samples (higher is
better; each int8 bit is worth about 6 dB); cosine is that of the flattened tensors,
summed over the samples. The quantized graph must come from the float graph given (the
quantizer keeps tensor names; the float I/O edges it adds are matched to their float
tensors).

:func:`output_scores` measures a quantized graph's outputs alone (cosine, or the largest
error for tiny outputs): what mixed precision and ``bias_correction="auto"`` aim at.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..dynamic_outputs import DYNAMIC_OUTPUTS
from .float_ref import FloatInterpreter, evaluate, snap_to_grid, to_real
from .folding import folded_input_scales, weight_fold
from .ir import Graph, IRError
from .step_reuse import once
from .swish_gates import RANGE_FLOORS

__all__ = ["LayerError", "layer_errors", "output_scores", "SMALL_OUTPUT", "SMALL_OUTPUT_SCALE", "float_names",
           "worst_layers", "format_layer_errors", "errors_to_json", "errors_from_json", "score",
           "quantized_feed"]

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


@dataclass(frozen=True)
class LayerError:
    """The quantization error of one tensor (an op's output) against float."""
    tensor: str
    op: str                  # the type of the op that produces it
    values: int              # elements per sample
    sqnr_db: float           # cumulative: the quantized graph run end to end
    cosine: float
    max_abs_error: float
    local_sqnr_db: float     # this op alone, on the float graph's inputs
    float_range: tuple[float, float]


class _Sums:
    """Running sums over samples for one tensor."""

    def __init__(self) -> None:
        self.ref2 = self.q2 = self.err2 = self.dot = self.max_abs = 0.0
        self.local_err2 = 0.0
        self.lo, self.hi = math.inf, -math.inf

    def add(self, ref: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Add one sample; returns ``ref`` flattened as float64 for :meth:`add_local`."""
        r, v = ref.astype(np.float64).reshape(-1), q.astype(np.float64).reshape(-1)
        d = r - v
        self.ref2 += float(r @ r)
        self.q2 += float(v @ v)
        self.err2 += float(d @ d)
        self.dot += float(r @ v)
        self.max_abs = max(self.max_abs, float(np.abs(d).max(initial=0.0)))
        if r.size:
            self.lo, self.hi = min(self.lo, float(r.min())), max(self.hi, float(r.max()))
        return r

    def add_local(self, r: np.ndarray, q: np.ndarray) -> None:
        """Add the op-alone value ``q`` of the sample whose float64 reference ``add`` returned
        (its ``ref2`` is the local one too: the same reference)."""
        d = r - q.astype(np.float64).reshape(-1)
        self.local_err2 += float(d @ d)


def _sqnr(ref2: float, err2: float) -> float:
    if err2 == 0.0:
        return math.inf
    if ref2 == 0.0:
        return -math.inf
    return 10.0 * math.log10(ref2 / err2)


def _cosine(s: _Sums) -> float:
    if s.ref2 == 0.0 and s.q2 == 0.0:
        return 1.0
    if s.ref2 == 0.0 or s.q2 == 0.0:
        return 0.0
    return s.dot / math.sqrt(s.ref2 * s.q2)


def float_names(quantized: Graph, float_graph: Graph) -> dict[str, str]:
    """Quantized tensor name -> the float tensor it stands for (edges included)."""
    names = {n: n for n in quantized.tensors if n in float_graph.tensors}
    for op in quantized.ops:
        if op.type == "QUANTIZE" and op.inputs[0] in quantized.inputs:
            names[op.outputs[0]] = op.inputs[0]
        elif op.type == "QUANTIZE" and op.inputs[0] in names and op.outputs[0] not in names:
            names[op.outputs[0]] = names[op.inputs[0]]  # an int8 <-> int16 conversion (mixed precision)
        elif op.type == "DEQUANTIZE" and op.outputs[0] in quantized.outputs:
            names[op.inputs[0]] = op.outputs[0]
    return names


def quantized_feed(quantized: Graph, float_graph: Graph, feed: Feed) -> dict[str, np.ndarray]:
    """``feed`` (float inputs, by name or in order) as the quantized graph's inputs take them,
    and the states it gives (by state input name) as the quantized graph's states hold them."""
    if not isinstance(feed, Mapping):
        feed = dict(zip(float_graph.inputs, feed, strict=True))
    out = {}
    # a stateful graph's states where the feed gives them (the escalation's held-out calls), on their grids
    given = [s.input for s in quantized.states if s.input in feed]
    for name in [*quantized.inputs, *given]:
        t = quantized.tensors[name]
        value = np.asarray(feed[name], np.float32)
        out[name] = t.quant.quantize(value, t.dtype) if t.quant is not None and t.dtype != "float32" else value
    return out


def layer_errors(float_graph: Graph, quantized_graph: Graph, dataset: Iterable[Feed]) -> dict[str, LayerError]:
    """The error of every op output of ``quantized_graph`` against ``float_graph`` on ``dataset``.

    ``float_graph`` is the float graph the quantizer quantized (after its optimizer: use
    the ``float_graph`` the quantizer returns alongside, or :func:`optimize` the model);
    ``dataset`` holds feeds of float inputs (by name or in input order). Keys are the
    quantized graph's tensor names, in op order; QUANTIZE / DEQUANTIZE edges are left out.
    """
    float_run = FloatInterpreter(float_graph)
    quant_run = FloatInterpreter(quantized_graph)
    names = float_names(quantized_graph, float_graph)
    # every output of an op (a host op may have several), by the op that makes it
    producer = {o: op for op in quantized_graph.ops for o in op.outputs}
    measured = [op for op in quantized_graph.ops if op.type not in ("QUANTIZE", "DEQUANTIZE")
                and any(o in names for o in op.outputs)]
    dynamic = quantized_graph.metadata.get(DYNAMIC_OUTPUTS, {})     # shapes per run: output_scores judges them
    sums = {o: _Sums() for op in measured for o in op.outputs if o in names and o not in dynamic}
    runs = 0
    for feed in dataset:
        ref = float_run.run(feed, keep=True)
        for name, floor in float_graph.metadata.get(RANGE_FLOORS, {}).items():
            if name in ref:   # values below the floor give what the floor gives downstream
                ref[name] = np.maximum(ref[name], np.float32(floor))
        if not isinstance(feed, Mapping):
            feed = dict(zip(float_graph.inputs, feed, strict=True))
        for name in float_graph.inputs:
            ref[name] = np.asarray(feed[name], np.float32)
        got = quant_run.run(quantized_feed(quantized_graph, float_graph, feed), keep=True)
        for op in measured:
            ins: list[np.ndarray | None] = []
            for i in op.inputs:
                if not i:
                    ins.append(None)
                elif quantized_graph.tensors[i].is_constant:
                    t = quantized_graph.tensors[i]
                    ins.append(to_real(t, t.data))
                elif i in names:
                    ins.append(np.asarray(ref[names[i]], np.float32))
                else:  # a tensor only the quantized graph has (e.g. a precision change): its own value
                    ins.append(np.asarray(got[i], np.float32))
            folded = folded_input_scales(quantized_graph, op)
            if folded is not None:   # per-channel int16 input: the weights carry its scales
                ins[1] = np.asarray(ins[1] / weight_fold(ins[1].shape, folded), np.float32)  # type: ignore[operator, union-attr]
            value = evaluate(op, ins, quantized_graph.tensors[op.outputs[0]])
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            for out, alone in zip(op.outputs, values):
                if out in sums:
                    want = sums[out].add(np.asarray(ref[names[out]], np.float32), np.asarray(got[out], np.float32))
                    alone = snap_to_grid(quantized_graph.tensors[out], np.asarray(alone, np.float32))
                    sums[out].add_local(want, np.asarray(alone, np.float32))
        runs += 1
    if not runs:
        raise IRError("accuracy: no data to measure on")
    result = {}
    for out, s in sums.items():
        op = producer[out]
        result[out] = LayerError(out, op.type, quantized_graph.tensors[out].size, _sqnr(s.ref2, s.err2), _cosine(s),
                                 s.max_abs, _sqnr(s.ref2, s.local_err2), (s.lo, s.hi))
    return result


#: Outputs with fewer values per sample are scored by their largest error, not cosine
#: (as issue 13's acceptance judges them).
SMALL_OUTPUT = 8
#: The largest error scale of a small output's score (:func:`score`). The acceptance bar asks
#: each value of a small output within 0.05 of float where it asks a cosine of 0.98 of the
#: others: a score of ``1 - max |error| / 2.5`` reaches 0.98 exactly at that bar, and
#: escalation's target 0.99 asks half of it (0.025), as it asks half the cosine's error.
#: Below 2.5 (a probability) the scale is the output's largest ``|value|`` (1% of it at
#: 0.99), as before. A raw logit in the tens (a face-presence logit of -60 to 60) was
#: scored relative to its magnitude alone: 0.08 off at int8 scored 0.9987 and passed,
#: while unseen inputs were 0.35 off, seven times the bar.
SMALL_OUTPUT_SCALE = 0.05 / (1 - 0.98)


def output_scores(float_graph: Graph, graph: Graph, dataset: Sequence[Feed]) -> dict[str, float]:
    """How closely each output of the quantized ``graph`` (simulated by the float
    reference) follows ``float_graph``'s over ``dataset``, 1.0 being exact: the cosine
    similarity of all values, or for an output of fewer than ``SMALL_OUTPUT`` values
    (a score, a probability, a logit) its largest error (:func:`score`)."""
    ref_run, q_run = FloatInterpreter(float_graph), FloatInterpreter(graph)
    refs: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    gots: dict[str, list[np.ndarray]] = {n: [] for n in graph.outputs}
    for feed in dataset:
        # the float side is the same for every graph an escalation measures: computed once (step_reuse)
        ref = once("float outputs", (float_graph, feed), None, lambda feed=feed: ref_run.run(feed))
        got = q_run.run(quantized_feed(graph, float_graph, feed))
        for fname, qname in zip(float_graph.outputs, graph.outputs):
            t = graph.tensors[qname]
            v = np.asarray(got[qname])
            v = t.quant.dequantize(v) if t.quant is not None and t.dtype != "float32" else v
            refs[qname].append(np.asarray(ref[fname], np.float64).reshape(-1))
            gots[qname].append(np.asarray(v, np.float64).reshape(-1))
    return {n: score(np.concatenate(refs[n]), np.concatenate(gots[n]), graph.tensors[n].size < SMALL_OUTPUT)
            for n in graph.outputs}


def score(ref: np.ndarray, got: np.ndarray, small: bool, largest_scale: float = SMALL_OUTPUT_SCALE) -> float:
    """How closely ``got`` follows ``ref`` (flat float64 arrays), 1.0 being exact: their
    cosine similarity, or when ``small`` (an output of fewer than ``SMALL_OUTPUT`` values
    per sample) ``1 - max |error| / min(max |ref|, largest_scale)``: relative to the
    output's magnitude, but never more lenient than the acceptance bar's absolute error
    (``SMALL_OUTPUT_SCALE``; ``math.inf``: relative alone). Arrays of different sizes (an
    output whose shape each run decides, :mod:`.dynamic_shapes`, that differs) score 0."""
    if ref.size != got.size:
        return 0.0
    if small:
        scale = min(float(np.abs(ref).max(initial=0.0)), largest_scale)
        err = float(np.abs(ref - got).max(initial=0.0))
        return 1.0 - (err / scale if scale > 0 else float(err > 0))
    rr, vv = float(ref @ ref), float(got @ got)
    return 1.0 if rr == vv == 0.0 else 0.0 if rr == 0.0 or vv == 0.0 else float(ref @ got) / math.sqrt(rr * vv)


def worst_layers(errors: Mapping[str, LayerError], count: int = 10, *, local: bool = True) -> list[LayerError]:
    """The ``count`` layers with the lowest SQNR (the op's own, ``local``, or cumulative)."""
    key = (lambda e: e.local_sqnr_db) if local else (lambda e: e.sqnr_db)
    return sorted(errors.values(), key=key)[:count]


def format_layer_errors(errors: Mapping[str, LayerError], worst: int | None = 10) -> str:
    """The per-layer accuracy section of ``npu compile --report``: every layer (``worst=None``)
    in graph order, or the ``worst`` ones by their own error, worst first."""
    rows = list(errors.values()) if worst is None else worst_layers(errors, worst)
    title = "quantization accuracy per layer (vs float, on the calibration data)"
    if worst is not None and len(errors) > worst:
        title += f": the {worst} worst of {len(errors)} by their own SQNR"
    lines = [title + ":", f"  {'tensor':<40} {'op':<20} {'own SQNR':>9} {'SQNR':>8} {'cosine':>8} "
                          f"{'max|err|':>9} {'float range':>20}"]
    for e in rows:
        lines.append(f"  {e.tensor[-40:]:<40} {e.op[:20]:<20} {e.local_sqnr_db:>6.1f} dB {e.sqnr_db:>5.1f} dB "
                     f"{e.cosine:>8.4f} {e.max_abs_error:>9.4g} "
                     f"{f'[{e.float_range[0]:.3g}, {e.float_range[1]:.3g}]':>20}")
    return "\n".join(lines)


def errors_to_json(errors: Mapping[str, LayerError]) -> list[dict[str, Any]]:
    """JSON-ready rows (e.g. for a loadable's metadata), infinities as None."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, tuple):
            return [clean(x) for x in v]
        return v
    return [{k: clean(v) for k, v in asdict(e).items()} for e in errors.values()]


def errors_from_json(rows: Iterable[Mapping[str, Any]]) -> dict[str, LayerError]:
    """The inverse of :func:`errors_to_json` (None SQNR: no error, +inf)."""
    out = {}
    for r in rows:
        def num(v: Any, missing: float = math.inf) -> float:
            return missing if v is None else float(v)
        lo, hi = r["float_range"]
        out[r["tensor"]] = LayerError(r["tensor"], r["op"], int(r["values"]), num(r["sqnr_db"]), float(r["cosine"]),
                                      float(r["max_abs_error"]), num(r["local_sqnr_db"]),
                                      (num(lo, -math.inf), num(hi)))
    return out
