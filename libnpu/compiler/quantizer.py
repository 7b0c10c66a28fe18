"""Post-training int8 quantization of a float IR graph (in the style of FuriosaAI's
quantizer: optimize -> calibration model -> calibrate -> quantize [-> bias correction]
[-> per-layer accuracy report]).

The result follows the TFLite int8 quantization spec, so the chip's TFLite-exact
kernels run it as they run a TFLite int8 model:
- activations: int8, per-tensor, asymmetric (zero point in [-128, 127]);
- weights (an operator's ``weight_axis``): int8, symmetric, per output channel, fully
  connected weights (``fc_weights``) included (LiteRT's reference FULLY_CONNECTED takes
  per-channel int8 weights, byte-exact with the chip: tests/libnpu/compiler/
  test_int8_on_kernels.py); ``fc_per_channel=False`` gives per-tensor FC weights;
- biases: int32, zero point 0, scale = input scale * weight scale (per channel);
- outputs the int8 spec fixes (``fixed_output``, e.g. scale 1/256, zero point -128) get that,
  requantized where they join wider tensors (:mod:`libnpu.compiler.grid_joins`);
- ops that move data without rescaling (``same_scale``: pools, reshapes, ...) share one
  scale/zero point between inputs and output.
Each operator declares its rule in ``compiler.ops``. Activation ranges come from the
calibration data by one of the methods of :mod:`libnpu.compiler.calibration`; the scales
from those ranges and the weights by :mod:`libnpu.compiler.scales`.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from . import registry
from .accuracy import errors_to_json, layer_errors, output_scores
from .attention_masks import widen_mask_ranges
from .bias_correction import correct_biases
from .calibration import METHODS, Histogram, choose_range
from .dynamic_shapes import DYNAMIC_OUTPUTS
from .equalization import equalize as equalize_channels
from .float_ref import FloatInterpreter
from .grid_joins import fixed_grids, requantize_joins, shared_grid_groups
from .host_outputs import host_only_values
from .integer_inputs import INTEGER_INPUTS, integer_activations, random_integers
from .ir import Graph, IRError, Op, QuantParams, State, Tensor
from .layer_faults import LAYER_FAULTS, LayerFault
from .optimize import optimize
from .output_grids import signed_small_outputs
from .progress import Progress, stage
from .qdq_import import QDQ_PER_TENSOR, QDQ_RANGES
from .scales import SHARED_GRIDS, bias_scale, choose_activation_scale, quantize_weights, symmetric
from .selection_keys import selected_rows, widen_key_ranges
from .step_reuse import once
from .swish_gates import GATED, RANGE_FLOORS, gate_chains, gate_swishes
from .weight_rounding import input_moments, round_layer

__all__ = ["QuantizationError", "NonFiniteValuesError", "build_calibration_model", "Calibrator", "calibrate",
           "quantize", "quantize_model", "random_dataset", "Range"]

Range = tuple[float, float]


def _weight_axis(op: Op) -> int | None:
    """Axis of per-channel weight scales if ``op`` takes weights (input 1), else None."""
    return registry.get(op.type, "weight_axis")


class QuantizationError(IRError):
    """The graph cannot be quantized as asked."""


class NonFiniteValuesError(QuantizationError):
    """The calibration data drive a tensor to infinity or NaN: no grid holds it."""


# calibration ------------------------------------------------------------------------

def build_calibration_model(graph: Graph) -> Graph:
    """A copy of ``graph`` whose outputs are every activation tensor (inputs and states included)."""
    g = graph.copy()
    extra = [n for op in g.ops for n in op.outputs if n not in g.outputs]
    sources = [*g.inputs, *(s.input for s in g.states)]
    g.outputs = list(g.outputs) + [n for n in sources if n not in g.outputs] + extra
    return g


def random_dataset(graph: Graph, count: int = 8, *, low: float = -1.0, high: float = 1.0,
                   seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` feeds of uniform random values in [low, high) for every graph input."""
    rng = np.random.default_rng(seed)
    return [{n: random_integers(rng, graph.tensors[n]) if graph.tensors[n].dtype in INTEGER_INPUTS
             else rng.uniform(low, high, graph.tensors[n].shape).astype(np.float32) for n in graph.inputs}
            for _ in range(count)]


class Calibrator:
    """Collects activation statistics over calibration runs.

    ``method="minmax"`` keeps the running min/max; the other methods (``percentile``,
    ``mse``, ``entropy``; see :mod:`libnpu.compiler.calibration`) keep a histogram of each
    tensor's values and choose its range from it once every run is in. A stateful graph's
    runs are one stream: each run starts from the states the previous one left.
    """

    def __init__(self, graph: Graph, method: str = "minmax", percentile: float = 99.99, seed: int = 0) -> None:
        if method not in METHODS:
            raise QuantizationError(f"unknown calibration method {method!r} (expected one of {', '.join(METHODS)})")
        if not 50.0 < percentile <= 100.0:
            raise QuantizationError(f"percentile must be in (50, 100], not {percentile}")
        self.model = build_calibration_model(graph)
        self.interp = FloatInterpreter(self.model)
        self.method, self.percentile = method, percentile
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.histograms: dict[str, Histogram] = {}
        self.runs = 0
        self.carried: dict[str, np.ndarray] = {}      # state -> its value after the last run

    def collect(self, feeds: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> None:
        if not isinstance(feeds, Mapping):
            feeds = dict(zip(self.model.inputs, feeds, strict=True))
        outs = self.interp.run({**feeds, **self.carried})
        self.carried = {s.input: outs[s.output] for s in self.model.states}
        for name in self.model.outputs:
            v = np.asarray(outs[name], np.float32).reshape(-1)
            if not np.all(np.isfinite(v)):
                raise NonFiniteValuesError(f"calibration: tensor {name!r} has non-finite values")
            if v.size == 0:  # an empty tensor: any range will do
                v = np.zeros(1, np.float32)
            self.lo[name] = min(self.lo.get(name, np.inf), float(v.min()))
            self.hi[name] = max(self.hi.get(name, -np.inf), float(v.max()))
            if self.method != "minmax":
                self.histograms.setdefault(name, Histogram()).add(v)
        self.runs += 1

    def ranges(self) -> dict[str, Range]:
        if not self.runs:
            raise QuantizationError("calibration: no data collected")
        if self.method == "minmax":
            return {n: (self.lo[n], self.hi[n]) for n in self.lo}
        return {n: choose_range(h, self.method, self.percentile) for n, h in self.histograms.items()}


def calibrate(graph: Graph, dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None,
              *, method: str = "minmax", percentile: float = 99.99, random_count: int = 8,
              seed: int = 0, progress: Progress | None = None) -> dict[str, Range]:
    """Run ``dataset`` (or ``random_count`` random feeds) and return value ranges per tensor.

    ``progress`` hears ("calibrate", runs done, runs) before the first run and after each."""
    cal = Calibrator(graph, method, percentile, seed=seed)
    feeds = list(dataset) if dataset is not None else random_dataset(graph, random_count, seed=seed)
    if progress is not None:
        progress("calibrate", 0, len(feeds))
    for done, feed in enumerate(feeds, 1):
        cal.collect(feed)
        if progress is not None:
            progress("calibrate", done, len(feeds))
    return cal.ranges()


# quantization -----------------------------------------------------------------------

def _roles(g: Graph) -> dict[str, tuple[str, Op]]:
    """Constants used as weights or biases, with the op using them."""
    roles: dict[str, tuple[str, Op]] = {}
    for op in g.ops:
        if _weight_axis(op) is not None:
            for role, name in zip(("weight", "bias"), op.inputs[1:3]):
                if name:
                    if name in roles or not g.tensors[name].is_constant:
                        raise QuantizationError(f"{op.describe()}: {role} {name!r} must be a constant "
                                                f"used by this op only")
                    roles[name] = (role, op)
    return roles


_PROBE = np.linspace(-64.0, 64.0, 16385, dtype=np.float32).reshape(-1, 1)


@functools.cache
def _unsaturated_domain(op_type: str) -> Range | None:
    """The inputs over which an operator with a fixed output grid (LOGISTIC, TANH) has not
    yet reached the grid's ends, probed with its float reference; None if it has no such
    finite domain (e.g. SOFTMAX, whose value depends on a whole row)."""
    operator = registry.find(op_type)
    if operator is None or operator.fixed_output is None or operator.float_ref is None:
        return None
    scale, zp = operator.fixed_output
    out = Tensor("probe", _PROBE.shape, "float32")
    try:
        with np.errstate(all="ignore"):
            y = np.asarray(operator.float_ref(Op(op_type, ["x"], ["probe"], {}), [_PROBE], out), np.float64)
    except Exception:  # an operator whose reference needs attributes: no domain to probe
        return None
    if y.shape != _PROBE.shape:
        return None
    q = np.round(y.reshape(-1) / scale) + zp
    inside = (q > -128) & (q < 127)
    if not inside.any() or inside[0] or inside[-1]:
        return None
    x = _PROBE.reshape(-1)[inside]
    return float(x.min()), float(x.max())


def _gate_domain(op: Op) -> Range | None:
    """The inputs over which a HARD_SIGMOID (a squeeze-excitation gate) still moves,
    ``[-beta/alpha, (1-beta)/alpha]``: its input grid over all of it, and its output grid
    over all of [0, 1], cost nothing its output grid shows (an input step times the slope
    ``alpha`` is one output step), where a range calibrated on a few gate vectors clipped
    unseen ones (rapidocr's classifier: SE logits up to 4.4 on unseen crops, 2.2 calibrated)."""
    if op.type != "HARD_SIGMOID":
        return None
    alpha, beta = float(op.attrs["alpha"]), float(op.attrs["beta"])
    if alpha <= 0:
        return None
    return -beta / alpha, (1.0 - beta) / alpha


def _activation_table(g: Graph, ranges: Mapping[str, Range], roles) -> dict[str, QuantParams]:
    """Quantization parameters for every non-weight tensor, honouring the spec's constraints."""
    rng: dict[str, Range] = {}
    for name, t in g.tensors.items():
        if name in roles:
            continue
        if t.is_constant:
            d = t.data.astype(np.float32)
            if np.isnan(d).any():
                raise NonFiniteValuesError(f"constant {name!r} holds NaN: no grid holds it")
            d = d[np.isfinite(d)]   # an infinite bound (Max(x, -inf)) saturates to its grid's end
            rng[name] = (float(d.min()), float(d.max())) if d.size else (0.0, 0.0)
        elif name in ranges:
            rng[name] = ranges[name]
    # A saturating op's input keeps the whole domain where its output still moves: a
    # presence score the calibration pictures never raised (no person in them) must not be
    # clipped at the highest logit they gave (pose_landmark_full: 0.35, so every person
    # scored sigmoid(0.35) = 0.59 instead of 0.91). It costs the input grid a little
    # resolution that the output's 1/256 grid mostly hides.
    # Only a tensor with a grid of its own (not one shared by same-scale data movement).
    producers = {op.outputs[0]: op for op in g.ops}
    for op in g.ops:
        domain = _unsaturated_domain(op.type)
        x = op.inputs[0] if op.inputs else ""
        producer = producers.get(x)
        if domain is not None and x in rng and producer is not None and \
                not registry.get(producer.type, "same_scale"):
            rng[x] = (min(rng[x][0], domain[0]), max(rng[x][1], domain[1]))
        gate = _gate_domain(op)
        if gate is not None and x in rng and op.outputs[0] in rng and producer is not None and \
                not registry.get(producer.type, "same_scale"):
            rng[x] = (min(rng[x][0], gate[0]), max(rng[x][1], gate[1]))
            rng[op.outputs[0]] = (min(rng[op.outputs[0]][0], 0.0), max(rng[op.outputs[0]][1], 1.0))
    fixed = fixed_grids(g)
    params: dict[str, QuantParams] = {}
    for members in shared_grid_groups(g, rng.keys() | fixed.keys()):
        pinned = [fixed[m] for m in members if m in fixed]
        if pinned:
            if any(p != pinned[0] for p in pinned):
                raise QuantizationError(f"tensors {members} need conflicting fixed quantization")
            qp = pinned[0]
        else:
            known = [rng[m] for m in members if m in rng]
            if not known:
                raise QuantizationError(f"no calibration range for tensors {members}")
            try:
                qp = choose_activation_scale(min(r[0] for r in known), max(r[1] for r in known))
            except ValueError as exc:     # a constant holding inf or NaN (calibrated ones are checked)
                bad = [m for m in members if m in rng and not np.all(np.isfinite(rng[m]))]
                raise NonFiniteValuesError(f"tensor {(bad or members)[0]!r}: {exc}") from exc
        for m in members:
            params[m] = qp
    missing = [n for n, t in g.tensors.items() if n not in roles and n not in params]
    if missing:
        raise QuantizationError(f"no calibration range for tensors {missing[:5]}")
    return params


def quantize(graph: Graph, ranges: Mapping[str, Range], *, fc_per_channel: bool = True,
             io_dtype: str = "float32", moments: Mapping[str, np.ndarray] | None = None,
             round_biases: bool = False) -> Graph:
    """Quantize a float graph (ideally optimized) with calibration ``ranges``.

    ``io_dtype="float32"`` keeps float inputs/outputs (QUANTIZE / DEQUANTIZE ops at the
    edges); ``"int8"`` makes the graph inputs/outputs int8 tensors. ``moments`` (by weight
    tensor name, from :func:`libnpu.compiler.weight_rounding.input_moments`): round those
    weights by GPTQ instead of to the nearest step; with ``round_biases`` their biases also
    take up the error's mean (GPTQ's bias column).
    """
    if io_dtype not in ("float32", "int8"):
        raise QuantizationError(f"io_dtype must be 'float32' or 'int8', not {io_dtype!r}")
    src = graph
    # what a host op gives that is not a real number (an index, a bool, a code) stays as it is
    # (and so does such a graph input, read by host ops only: ``onnx_import``)
    indices = {o for op in src.ops if registry.get(op.type, "index_output") or op.type == "HOST"
               for o in op.outputs if op.type != "HOST" or src.tensors[o].dtype not in ("float32", "float16")}
    indices |= {n for n in src.inputs if src.tensors[n].dtype not in ("float32", "float16")}
    indices |= integer_activations(src)      # integers anywhere (ids into the chip's GATHER): as they are
    indices |= set(src.metadata.get(DYNAMIC_OUTPUTS, ()))   # a host call's, shaped per run: as it gives them
    indices |= selected_rows(src)          # a selection's rows, made on the CPU: as it gives them
    indices |= host_only_values(src)       # from a host call to others alone: in float (host_outputs)
    for t in src.tensors.values():
        if t.quant is not None or t.dtype not in ("float32", "float16", *INTEGER_INPUTS) and t.name not in indices:
            raise QuantizationError(f"tensor {t.name!r} is {t.dtype}{' (quantized)' if t.quant else ''}: "
                                    "quantize expects a float graph")
    ranges = signed_small_outputs(src, ranges)     # a raw logit's sign is not calibration's to fix
    # a QDQ model's own grids (compiler.qdq_import) rather than the calibrated ranges
    ranges = {**ranges, **{n: r for n, r in src.metadata.get(QDQ_RANGES, {}).items() if n in src.tensors}}
    # values below a floor all give the same results downstream (compiler.swish_gates)
    for n, floor in src.metadata.get(RANGE_FLOORS, {}).items():
        if n in ranges:
            ranges[n] = (max(ranges[n][0], floor), max(ranges[n][1], floor))
    ranges = widen_key_ranges(src, ranges)   # a selection's keys from the chip: room past calibration's
    ranges = widen_mask_ranges(src, ranges)       # a masked key stays masked (attention_masks)
    qdq_per_tensor = set(src.metadata.get(QDQ_PER_TENSOR, ()))
    src, ranges = requantize_joins(src, ranges)   # a fixed grid (LOGISTIC's) joined to wider tensors
    roles = _roles(src)
    params = _activation_table(src, ranges, {**roles, **{n: ("index", None) for n in indices}})

    g = Graph(src.name)
    g.metadata = dict(src.metadata, quantized="int8")
    g.metadata.pop(SHARED_GRIDS, None)   # the float graph's hint, spent
    g.metadata.pop(QDQ_RANGES, None)
    g.metadata.pop(RANGE_FLOORS, None)
    g.metadata.pop(QDQ_PER_TENSOR, None)
    for name, t in src.tensors.items():
        if name in roles:
            continue
        if name in indices:  # positions (an arg max), integer inputs and results: integers, as they are
            g.add_tensor(Tensor(name, t.shape, t.dtype))
            continue
        qp = params[name]
        data = qp.quantize(t.data.astype(np.float32)) if t.is_constant else None
        g.add_tensor(Tensor(name, t.shape, "int8", qp, data))
    for op in src.ops:
        try:
            g.ops.append(_quantized_op(g, src, op, params, moments, fc_per_channel, qdq_per_tensor, round_biases))
        except NonFiniteValuesError:
            raise
        except LAYER_FAULTS as exc:      # this layer's grid, not the model: it may stay on the CPU
            raise LayerFault(op, op.outputs, exc) from exc
    g.inputs, g.outputs = list(src.inputs), list(src.outputs)
    g.states = [State(s.name, s.input, s.output,
                      params[s.input].quantize(s.initial.astype(np.float32), g.tensors[s.input].dtype))
                for s in src.states]
    if io_dtype == "float32":
        _float_edges(g, src)
    g.validate()
    return g


def _quantized_op(g: Graph, src: Graph, op: Op, params: Mapping[str, QuantParams],
                  moments: Mapping[str, np.ndarray] | None, fc_per_channel: bool, qdq_per_tensor: set[str],
                  round_biases: bool) -> Op:
    """The int8 op for the float ``op`` of ``src``, its weights and bias (quantized) added to ``g``."""
    new = Op(op.type, list(op.inputs), list(op.outputs), dict(op.attrs), op.name)
    weight_axis = _weight_axis(op)
    if weight_axis is None:
        return new
    in_scale = float(params[op.inputs[0]].scale[0])
    w_t = src.tensors[op.inputs[1]]
    b_name = op.inputs[2] if len(op.inputs) > 2 else ""
    bias = src.tensors[b_name].data if b_name else None
    per_tensor = registry.get(op.type, "fc_weights") and not fc_per_channel or \
        op.name in qdq_per_tensor      # the scale a QDQ model gave its weights
    axis = None if per_tensor else weight_axis
    for name, values in ((w_t.name, w_t.data), (b_name, bias)):
        if values is not None and not np.all(np.isfinite(values)):     # the model's own inf / NaN
            raise NonFiniteValuesError(f"{op.describe()}: {name!r} holds values that are not finite")
    wq, wqp = quantize_weights(w_t.data, axis, bias, in_scale)
    if moments is not None and w_t.name in moments and (op.type == "DEPTHWISE_CONV_2D" or axis in (0, None)):
        wq, rounded_bias = round_layer(op.type, w_t.data, wqp.scale, moments[w_t.name], bias)
        bias = rounded_bias if round_biases else bias
    g.add_tensor(Tensor(w_t.name, w_t.shape, "int8", wqp, wq))
    if b_name:
        bs = bias_scale(in_scale, wqp.scale)
        bq = np.clip(np.round(bias.astype(np.float64) / bs), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
        g.add_tensor(Tensor(b_name, (bq.size,), "int32", symmetric(bs), bq))
        new.inputs[2] = b_name
    if len(new.inputs) < 3:
        new.inputs.append("")
    return new


def _float_edges(g: Graph, src: Graph) -> None:
    """Keep float I/O: input -> QUANTIZE -> int8 graph -> DEQUANTIZE -> output.

    A host op reads a float input as the caller gave it: no grid is imposed on what no
    chip op reads (a Cast to integer truncates a byte value the grid put a step below it);
    the QUANTIZE is there only when a chip op (or a state) reads the input."""
    prologue: list[Op] = []
    for name in list(g.inputs):
        if g.tensors[name].quant is None and g.tensors[name].dtype in INTEGER_INPUTS:
            continue      # integers enter the chip as they are
        t = g.tensors.pop(name)
        q_name = g.unique_name(f"{name}_int8")
        g.tensors[name] = Tensor(name, t.shape, "float32")
        g.tensors[q_name] = Tensor(q_name, t.shape, "int8", t.quant)
        for op in g.ops:
            if op.type != "HOST":
                op.inputs = [q_name if i == name else i for i in op.inputs]
        _keep_states_int8(g, name, q_name)
        if any(q_name in op.inputs for op in g.ops) or name in g.outputs or \
                any(q_name == s.output for s in g.states):
            prologue.append(Op("QUANTIZE", [name], [q_name], name=q_name))
        else:
            del g.tensors[q_name]
    new_outputs = []
    after: dict[str, list[Op]] = {}       # a DEQUANTIZE right after the op making its input
    for name in g.outputs:
        if g.tensors[name].quant is None:     # on no grid (quantize's ``indices``)
            new_outputs.append(name)  # positions (an arg max), values shaped per run, CPU results: as they are
            continue
        if any(op.type == "QUANTIZE" and op.inputs == [name] for op in prologue):
            raise QuantizationError(f"graph input {name!r} is also an output")
        t = g.tensors.pop(name)
        q_name = g.unique_name(f"{name}_int8")
        g.tensors[q_name] = Tensor(q_name, t.shape, "int8", t.quant, t.data)
        for op in g.ops:
            op.outputs = [q_name if o == name else o for o in op.outputs]
            op.inputs = [q_name if i == name else i for i in op.inputs]
        _keep_states_int8(g, name, q_name)
        g.tensors[name] = Tensor(name, t.shape, "float32")
        after.setdefault(q_name, []).append(Op("DEQUANTIZE", [q_name], [name], name=name))
        new_outputs.append(name)
    # Each output's DEQUANTIZE follows the op making its input, not the whole graph: one
    # after a host call would be a chip job of its own (a decoder step's outputs behind a
    # TopK on the CPU: two jobs where one does).
    ordered = []
    for op in g.ops:
        ordered.append(op)
        for out in op.outputs:
            ordered += after.pop(out, [])
    # Host calls ahead of every chip op read only the inputs as given (a mask made from a
    # bool input): they run before the inputs' QUANTIZEs, which would be a chip job of
    # their own ahead of them.
    lead = next((i for i, op in enumerate(ordered) if op.type != "HOST"), len(ordered))
    g.ops = ordered[:lead] + prologue + ordered[lead:] + [op for ops in after.values() for op in ops]
    g.outputs = new_outputs


def _keep_states_int8(g: Graph, name: str, q_name: str) -> None:
    """A state's new value that is also a graph input or output stays the int8 tensor."""
    for state in g.states:
        if state.output == name:
            state.output = q_name


def _bias_correction_helps(float_graph: Graph, q: Graph, data: Sequence) -> bool:
    """Whether bias correction fitted on half of the calibration data brings the worst
    output closer to float on the other half (``bias_correction="auto"``).

    Corrections fitted to a few pictures can carry those pictures' own errors into other
    pictures' outputs: on mediapipe's models it took selfie_segmentation from cosine 0.41
    to 0.99 but pose_landmark_full's presence score from |error| 0.05 to 0.91 (unseen
    pictures, on the device). Fewer than 4 samples: no correction."""
    if len(data) < 4:
        return False
    fit, check = list(data[0::2]), list(data[1::2])
    trial = q.copy()
    correct_biases(float_graph, trial, fit)
    before, after = output_scores(float_graph, q, check), output_scores(float_graph, trial, check)
    return min(after.values(), default=1.0) > min(before.values(), default=1.0)


def gated(graph: Graph, data: Sequence, progress: Progress | None = None) -> Graph:
    """The optimized float ``graph`` with its hard-swish blocks equalized on ``data``
    (:mod:`libnpu.compiler.swish_gates`; once: a graph already gated is returned as it is)."""
    if GATED in graph.metadata or not gate_chains(graph):
        return graph
    with stage(progress, "equalize"):
        return once("gate hard-swish", (graph, *data), None, lambda: gate_swishes(graph, data))


def equalized(graph: Graph, data: Sequence, progress: Progress | None = None) -> Graph:
    """The optimized float ``graph`` channel-equalized on ``data`` (once: a graph already
    equalized is returned as it is)."""
    if "equalized_channels" in graph.metadata:
        return graph
    with stage(progress, "equalize"):
        return once("equalize", (graph, *data), None, lambda: equalize_channels(graph, data))


def quantize_model(graph: Graph,
                   dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None, *,
                   method: str = "minmax", percentile: float = 99.99, random_count: int = 8,
                   fc_per_channel: bool = True, weight_rounding: str = "nearest",
                   bias_correction: bool | str = False, equalize: bool = False,
                   layer_report: bool = False, io_dtype: str = "float32", seed: int = 0,
                   progress: Progress | None = None) -> Graph:
    """Optimize, calibrate (with ``dataset`` or random data) and quantize a float graph.

    Returns an int8 graph whose ops mean what the TFLite int8 reference kernels compute.
    ``method``: how activation ranges are chosen (:mod:`libnpu.compiler.calibration`);
    ``weight_rounding``: ``"nearest"``, ``"gptq"`` (conv / FC weights rounded for the
    calibration data's inputs, :mod:`libnpu.compiler.weight_rounding`) or ``"gptq-bias"``
    (the biases too take up the weights' mean error: helps pose_landmark_full with int8
    weights, but took face_landmark's face logit from 0.0045 to 0.33 off under the accurate
    recipe, so that recipe uses plain ``"gptq"``);
    ``equalize``: first lift the channels that their tensor's grid starves, measured on
    the calibration data (:mod:`libnpu.compiler.equalization`; the float graph computes the
    same function);
    ``bias_correction``: cancel each layer's mean quantization error on the calibration
    data (:mod:`libnpu.compiler.bias_correction`); ``"auto"``: only when that, fitted on
    half the calibration data, improves the worst output on the other half; ``layer_report``: measure every
    layer's error against float on the calibration data and keep it in the graph's
    metadata (``"layer_errors"``, rows of :func:`libnpu.compiler.accuracy.errors_to_json`).
    ``progress`` hears the stages (see :mod:`libnpu.compiler.progress`).
    """
    if weight_rounding not in ("nearest", "gptq", "gptq-bias"):
        raise QuantizationError(f"weight_rounding must be 'nearest', 'gptq' or 'gptq-bias', not {weight_rounding!r}")
    # once(): an escalating compile's steps share what they would compute alike (step_reuse)
    with stage(progress, "optimize"):
        opt = once("optimize", (graph,), None, lambda: optimize(graph))
    data = list(dataset) if dataset is not None else random_dataset(opt, random_count, seed=seed)
    opt = gated(opt, data, progress)
    if equalize:
        opt = equalized(opt, data, progress)
    try:
        ranges = once("calibrate", (opt, *data), (method, percentile, seed),
                      lambda: calibrate(opt, data, method=method, percentile=percentile, seed=seed, progress=progress))
    except NonFiniteValuesError as exc:
        if dataset is not None:
            raise
        raise NonFiniteValuesError(f"{exc} on random inputs in [-1, 1]: give calibration data in the "
                                   "range the model expects") from exc
    moments = None
    if weight_rounding in ("gptq", "gptq-bias"):
        with stage(progress, "weight rounding"):
            moments = once("gptq moments", (opt, *data), seed, lambda: input_moments(opt, data, seed=seed))
    with stage(progress, "quantize"):
        q = once("quantize", (opt, ranges, moments), (fc_per_channel, io_dtype, weight_rounding),
                 lambda: quantize(opt, ranges, fc_per_channel=fc_per_channel, io_dtype=io_dtype, moments=moments,
                                  round_biases=weight_rounding == "gptq-bias"), copy=Graph.copy)
    if bias_correction not in (True, False, "auto"):
        raise QuantizationError(f"bias_correction must be true, false or 'auto', not {bias_correction!r}")
    if bias_correction == "auto":
        bias_correction = _bias_correction_helps(opt, q, data)
    if bias_correction:
        correct_biases(opt, q, data, progress=progress)
        q.validate()
    q.metadata["calibration"] = {"method": method, "runs": len(data), "random": dataset is None,
                                 "bias_correction": bias_correction,
                                 **({"equalized_channels": opt.metadata["equalized_channels"]}
                                    if "equalized_channels" in opt.metadata else {}),
                                 **({GATED: opt.metadata[GATED]} if opt.metadata.get(GATED) else {}),
                                 **({"weight_rounding": weight_rounding} if weight_rounding != "nearest" else {})}
    if layer_report:
        with stage(progress, "accuracy"):
            q.metadata["layer_errors"] = errors_to_json(layer_errors(opt, q, data))
    return q
