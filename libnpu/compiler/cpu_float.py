"""Escalation's last resort: the layers no integer grid can hold, kept in float on the CPU.

A real NPU stack runs what the chip runs accurately and leaves the rest to the CPU.
When every integer step of :mod:`libnpu.compiler.escalation` still misses the fidelity
target, :func:`choose_cpu_layers` moves the layers the measurement blames to the host,
where they run in float:

* **Blame**: the layers of the best integer graph ranked by the error each adds alone
  (``accuracy.layer_errors``' local SQNR: the op fed the float graph's own inputs), worst
  first.
* **Float in, float out**: a layer kept in float gains nothing if it reads an integer
  grid, since the grid's rounding is what it could not bear (``log(1 + 2^20 |x|)`` of a
  small ``x`` on int16 loses the small values before the log sees them). So a blamed
  layer goes to the CPU with everything upstream of it, back to the model's float inputs
  (:func:`upstream`), which the host call then reads as the caller gave them (a host
  call among them that no .tflite holds, an ONNX DFT or Cast, stays the call it is, its
  values passed on no grid: :func:`stays_on_host`); and its output stays in float too:
  the layers reading it come along (the grid of the output is the error: ``1 + 2^20 |x|``
  before its log). A layer with more than ``MAX_CPU_LAYERS``
  such layers, or with every layer that has weights among them, is not moved (the model
  would become a CPU model: :func:`leaves_chip_work`).
* **Front ends**: a layer whose own rounding is fine but which magnifies its input grid's
  error (the log of a power spectrum: :func:`amplified_layers`) is blamed first and moves
  with everything upstream of it, whatever the count and even every layer with weights,
  when the CPU's cost is small (:func:`front_end_fits`: multiply-adds per inference, in
  absolute terms or as a share of the model's), or whatever it costs when int16 on the
  front end alone does not hold what the layer makes of it
  (:mod:`libnpu.compiler.front_end_check`: a log-mel spectrogram that is most of an audio
  classifier, or all of the model); the reason says what int16 scored and what the CPU
  then does (:func:`front_end_reason`). Its readers stay: its output (the log domain) is
  what a grid holds; unless it is a host call already (a Pow by -0.7 making a gain from
  ``|X|``), whose output then met the grid. The escalation moves such a
  front end right after its int8 step (:func:`front_end_blamed`, :func:`front_end_in_float`)
  and quantizes the rest through its ladder; the int16 steps cannot fix a front end
  (unless the chip runs the magnifying layer in int16 too, as a LayerNorm's
  1 / sqrt(variance): then the int16 steps go first).
* **As few as reach the target**: the blamed layers are tried one at a time, worst first,
  each adding its layers to those moved before, at most ``MAX_CPU_TRIALS`` quantizations
  (the compile-time budget); the first set meeting the target is kept, else none.

The layers moved become host calls, per group (:mod:`libnpu.compiler.host_groups`) and
output leaving it: a float sub-model written by :mod:`libnpu.compiler.tflite_export` and
run by LiteRT, whose inner tensors never leave float; what leaves the call for the chip is
quantized there as any host call's output (int16 where the escalation's search puts it).
"""
from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from ..loadable import HostCall
from . import registry
from .accuracy import LayerError, float_names, layer_errors
from .front_end_check import Int16FrontEnd, measure_int16_front_end, needs_float
from .host_groups import group_host_ops
from .ir import Graph, IRError, Op
from .source_index import op_sources
from .step_reuse import once
from .tflite_export import export_tflite
from .tflite_merge import Part, joinable, merge_tflite
from .work_count import WorkCapReached

__all__ = ["MAX_CPU_LAYERS", "MAX_CPU_TRIALS", "AMPLIFIED_DB", "MAX_FRONT_END_MACS", "MAX_FRONT_END_SHARE",
           "WHOLE_MODEL_SHARE", "KEPT_IN_FLOAT", "Blame", "movable", "upstream", "leaves_chip_work",
           "stays_on_host", "amplified_layers", "front_end_fits", "is_whole_model", "front_end_cost",
           "front_end_reason",
           "errors_by_float_name", "blamed_layers", "front_end_blamed", "front_end_in_float", "kept_in_float",
           "float_on_cpu", "cpu_reason"]

#: At most this many layers move to the CPU for one blamed layer (it and its upstream).
MAX_CPU_LAYERS = 16
#: At most this many quantizations try CPU layer sets (each costs one integer step).
MAX_CPU_TRIALS = 3
#: A layer whose cumulative SQNR falls this many dB under its inputs' (and under its own
#: rounding's) magnifies its input grid's error (:func:`amplified_layers`).
AMPLIFIED_DB = 10.0
#: A front end doing at most this many multiply-adds per inference moves unmeasured: its
#: float costs the CPU little (:func:`front_end_fits`); a larger one moves when only float
#: holds it (:mod:`libnpu.compiler.front_end_check`).
MAX_FRONT_END_MACS = 8_000_000
#: ... or at most this share of the model's multiply-adds.
MAX_FRONT_END_SHARE = 0.25
#: A front end doing at least this share of the model's multiply-adds is the model (a
#: log-mel spectrogram, maybe a tiny head after it: :func:`is_whole_model`).
WHOLE_MODEL_SHARE = 0.99


class Blame(NamedTuple):
    """A blamed layer (:func:`blamed_layers`)."""
    tensor: str
    local_sqnr_db: float
    chain: list[str]                   # the tensors moved with it (their ops), it included
    front_end: bool                    # a magnifying layer, moved with everything upstream of it
    int16_score: float | None = None   # a front end's output with int16 on it alone (front_end_check)


def upstream(graph: Graph, tensor: str) -> list[str]:
    """The output tensors of the op making ``tensor`` and of every op it depends on,
    back to the graph's inputs (constants aside), in graph order."""
    producer = {o: op for op in graph.ops for o in op.outputs}
    found: set[str] = set()
    pending = [tensor]
    while pending:
        name = pending.pop()
        op = producer.get(name)
        if op is None or op.outputs[0] in found:
            continue
        found.add(op.outputs[0])
        pending += [i for i in op.inputs if i and not graph.tensors[i].is_constant]
    return [op.outputs[0] for op in graph.ops if op.outputs[0] in found]


def movable(graph: Graph, op: Op) -> bool:
    """Whether ``op`` can run as a float host call: a chip op of one output, no state,
    that a .tflite sub-model can express, or a LiteRT host call of one output and no control
    flow (an RFFT2D -> COMPLEX_ABS a front end holds: :mod:`.tflite_merge` joins it to the
    ops around it)."""
    if op.type in ("QUANTIZE", "DEQUANTIZE") or len(op.outputs) != 1 or \
            op.type == "HOST" and not (op.attrs["host"].kind == "tflite" and joinable(op.attrs["host"].model)):
        return False
    states = {n for s in graph.states for n in (s.input, s.output)}
    return not (set(op.inputs) | set(op.outputs)) & states


def stays_on_host(graph: Graph, op: Op) -> bool:
    """Whether ``op`` is a host call no float .tflite holds (an ONNX call: a DFT, a Pow by
    -0.7, a Cast) that a chain moved to the CPU may hold as the call it is: float values
    out, no state. Its inputs and outputs then pass between it and the float calls around
    it on no grid (:func:`libnpu.compiler.host_outputs.host_only_values`), when nothing on
    the chip reads them (:func:`_chain_movable`). FastEnhancer's compressed spectrum
    ``X * clip(|X|)^-0.7`` has a DFT before its ABS and a Pow after its CLIP: the front end
    stayed on the chip, its gain on a grid set by silent frames (wav_out 0.9243)."""
    if op.type != "HOST" or movable(graph, op) or len(op.outputs) == 0:
        return False
    states = {n for s in graph.states for n in (s.input, s.output)}
    return not (set(op.inputs) | set(op.outputs)) & states \
        and all(graph.tensors[o].dtype in ("float32", "float16") for o in op.outputs)


def _chain_movable(graph: Graph, chain: Collection[str], readers_of: Mapping[str, list[str]],
                   ops: Mapping[str, Op]) -> bool:
    """Whether the ops making ``chain`` can run in float on the CPU: each movable, or a host
    call that stays the call it is (:func:`stays_on_host`) whose
    every output only ``chain`` reads, and whose every input made in ``chain`` only ``chain``
    reads (a chip op reading one would put it on a grid, the float call's input with it);
    one op at least movable."""
    made = {o: t for t in chain for o in ops[t].outputs}
    kept = [t for t in chain if not movable(graph, ops[t])]
    return len(kept) < len(chain) and all(
        stays_on_host(graph, ops[t])
        and all(o not in graph.outputs and set(readers_of.get(o, [])) <= set(chain) for o in ops[t].outputs)
        and all(set(readers_of.get(i, [])) <= set(chain) for i in ops[t].inputs if i in made)
        for t in kept)


def _on_cpu_already(graph: Graph, tensors: Collection[str]) -> set[str]:
    """The tensors of ``tensors`` made by host calls no float .tflite holds (:func:`stays_on_host`):
    they stay the host calls they are, between the float calls around them."""
    return {op.outputs[0] for op in graph.ops if op.outputs[0] in tensors and stays_on_host(graph, op)}


def leaves_chip_work(graph: Graph, moved: Collection[str]) -> bool:
    """Whether some op with weights stays on the chip when the ops making ``moved`` go to
    the CPU: the CPU keeps what the chip cannot hold, not the model (openwakeword's
    wake-word heads, whose tiny score no grid fixes, would otherwise move whole)."""
    return any(op.outputs[0] not in moved and registry.get(op.type, "weight_axis") is not None
               for op in graph.ops)


def amplified_layers(errors: Mapping[str, LayerError], graph: Graph) -> dict[str, float]:
    """The elementwise unary layers of ``graph`` whose output drifts far more than their
    input and their own rounding do: by how many dB (at least ``AMPLIFIED_DB``) the op's cumulative SQNR falls
    under its inputs' worst, its local SQNR above both. Such an op magnifies the error its
    input's grid made: the log of a power spectrum (openwakeword's mel front end: the log's
    own rounding 51 dB, its input 36 dB, its output -3 dB: every quiet bin below one step
    of the power's grid, 2.3e7 at int16, reads as 1e-10, -100 dB). No grid of that input
    holds it; the op and what feeds it can only run in float."""
    found = {}
    for op in graph.ops:
        e = errors.get(op.outputs[0])
        ins = [errors[i].sqnr_db for i in op.inputs if i in errors]
        if e is None or not ins or not _elementwise_unary(graph, op):
            continue
        drop = min(ins) - e.sqnr_db
        if drop >= AMPLIFIED_DB and e.local_sqnr_db - e.sqnr_db >= AMPLIFIED_DB:
            found[op.outputs[0]] = drop
    return found


def front_end_fits(graph: Graph, chain: Collection[str]) -> bool:
    """Whether the ops making ``chain`` (a magnifying layer and its front end) are cheap
    enough to run in float on the CPU unmeasured: at most ``MAX_FRONT_END_MACS``
    multiply-adds per inference (a few milliseconds of float on one core: openwakeword's
    whole mel model, 2.2M), or at most ``MAX_FRONT_END_SHARE`` of the model's (the chip
    keeps the rest: basic-pitch's CQT front end, 40M of 524M). A larger one moves only when
    the measurement says no integer grid holds it (:func:`blamed_layers`): the cap once
    kept an audio classifier's own 13M log-mel (78% of it) on the chip at 0.61."""
    macs = sum(graph.op_macs(op) for op in graph.ops if op.outputs[0] in chain)
    return macs <= MAX_FRONT_END_MACS or macs <= MAX_FRONT_END_SHARE * graph.macs()


def is_whole_model(graph: Graph, chain: Collection[str]) -> bool:
    """Whether the ops making ``chain`` do at least ``WHOLE_MODEL_SHARE`` of ``graph``'s
    multiply-adds: a model that is all front end (a log-mel spectrogram of 18M multiply-adds,
    maybe a dense head of 41K after its log), which then runs as float host calls: the
    reason says so, lest the chip be taken for doing the work."""
    return graph.macs() > 0 and _share(graph, chain) >= WHOLE_MODEL_SHARE


def front_end_cost(graph: Graph, chain: Collection[str]) -> str:
    """What keeping the ops making ``chain`` in float on the CPU costs, as the reason says it:
    their multiply-adds per inference and their share of the model's."""
    macs = sum(graph.op_macs(op) for op in graph.ops if op.outputs[0] in chain)
    whole = "; the front end is the model" if is_whole_model(graph, chain) else ""
    share = _share(graph, chain)
    # a LiteRT call it holds (an RFFT2D) counts no multiply-adds: named, lest 0 read as free
    held = "".join(f" and LiteRT's {op.attrs['host'].op}" for op in graph.ops
                   if op.type == "HOST" and op.outputs[0] in set(chain) - _on_cpu_already(graph, chain))
    return f"{_millions(macs)} multiply-adds per inference on the CPU ({share:.1%} of the model's){held}{whole}"


def _millions(macs: int) -> str:
    return f"{macs / 1e6:.1f}M" if macs >= 100_000 else f"{macs:,}"


def _share(graph: Graph, chain: Collection[str]) -> float:
    """The share of ``graph``'s multiply-adds the ops making ``chain`` do."""
    return sum(graph.op_macs(op) for op in graph.ops if op.outputs[0] in chain) / max(graph.macs(), 1)


def _elementwise_unary(graph: Graph, op: Op) -> bool:
    """One value in, its own value out (LOG, SQRT, ...): what such an op's output loses it
    can only have from its input's grid. A layer mixing values (a convolution reading a
    channel 40x wider than the others) falls under its input's SQNR too, but int16 holds
    its narrow channels: it is no front end for the CPU. A squashing op (a fixed output
    grid: LOGISTIC, TANH) passes its input's error on at a slope of at most one: its drop
    is its signal squashed, not an error magnified (basic-pitch's sigmoid heads, 10.9 dB;
    openwakeword's wake-word heads would move whole for a tiny score no grid fixes)."""
    data = [i for i in op.inputs if i and not graph.tensors[i].is_constant]
    return len(data) == 1 and len(op.outputs) == 1 and registry.get(op.type, "weight_axis") is None \
        and registry.get(op.type, "fixed_output") is None \
        and graph.tensors[data[0]].shape == graph.tensors[op.outputs[0]].shape


def blamed_layers(float_graph: Graph, quantized: Graph, samples: Sequence, *, calibration: Sequence | None,
                  need: float) -> list[Blame]:
    """The layers of ``quantized`` the error is blamed on (:class:`Blame`), worst first: the
    layers that magnify their input grid's error (:func:`amplified_layers`), most first,
    then every layer by the error it adds alone (on ``samples``); with the layers to move
    for each: the layer, the layers reading its output (the grid of that output is what it
    could not bear: ``1 + 2^20 |x|`` before its log; not for a magnifying layer, whose
    output a grid holds), and everything upstream of them (:func:`upstream` in
    ``float_graph``), all movable. A layer blamed by its own error moves with at most
    ``MAX_CPU_LAYERS`` layers, leaving an op with weights on the chip; a magnifying layer
    moves with its whole front end, whatever that costs, when only float holds it: int16
    on the front end alone (calibrated on ``calibration``, None: random data) holds the
    values the layer reads but not what it makes of them on ``samples`` (under ``need``:
    :mod:`libnpu.compiler.front_end_check`)."""
    errors = errors_by_float_name(float_graph, quantized, samples)
    ops = {op.outputs[0]: op for op in float_graph.ops}
    amplified = amplified_layers(errors, float_graph)
    ranked = sorted(amplified, key=lambda t: -amplified[t]) + \
        [t for t in sorted(errors, key=lambda t: errors[t].local_sqnr_db) if t not in amplified]
    result = []
    readers_of: dict[str, list[str]] = {}
    producer = {o: op for op in float_graph.ops for o in op.outputs}
    order = {op.outputs[0]: k for k, op in enumerate(float_graph.ops)}      # chains in graph order
    for op in float_graph.ops:
        for i in dict.fromkeys(op.inputs):
            readers_of.setdefault(i, []).append(op.outputs[0])
    for tensor in ranked:
        if tensor not in ops or not (movable(float_graph, ops[tensor]) or stays_on_host(float_graph, ops[tensor])):
            continue
        front_end = tensor in amplified
        # a magnifying layer's output is what a grid holds well (the log domain): its readers stay;
        # but one that is a host call already moves nothing of its own, and its output met the
        # grid (FastEnhancer's gain clip(|X|)^-0.7, an ONNX Pow): its readers come along then
        readers = [] if tensor in float_graph.outputs or front_end and movable(float_graph, ops[tensor]) \
            else readers_of.get(tensor, [])
        # one walk, stopped past what a layer blamed by its own error may move: a chain for every
        # layer of a 5,000-op unrolled LSTM took the compile past 15 minutes (vfl-embedder)
        wanted = _upstream_within(float_graph, producer, [tensor, *readers], None if front_end else MAX_CPU_LAYERS)
        if wanted is None:
            continue
        chain = sorted(wanted, key=order.__getitem__)
        if not _chain_movable(float_graph, chain, readers_of, ops):
            continue
        if front_end and front_end_fits(float_graph, chain):
            result.append(Blame(tensor, errors[tensor].local_sqnr_db, chain, True))
        elif front_end:
            measured = _measured(float_graph, chain, tensor, calibration, samples)
            if measured is not False and needs_float(measured, need, AMPLIFIED_DB):
                score = None if measured is None else measured.score
                result.append(Blame(tensor, errors[tensor].local_sqnr_db, chain, True, score))
        elif len(chain) <= MAX_CPU_LAYERS and leaves_chip_work(float_graph, chain):
            result.append(Blame(tensor, errors[tensor].local_sqnr_db, chain, False))
    return result


def _upstream_within(graph: Graph, producer: Mapping[str, Op], tensors: list[str], limit: int | None
                     ) -> set[str] | None:
    """:func:`upstream` of every tensor of ``tensors`` (``producer``: the op making each
    tensor of ``graph``) as a set, or None once it holds more than ``limit``."""
    found: set[str] = set()
    pending = list(tensors)
    while pending:
        op = producer.get(pending.pop())
        if op is None or op.outputs[0] in found:
            continue
        found.add(op.outputs[0])
        if limit is not None and len(found) > limit:
            return None
        pending += [i for i in op.inputs if i and not graph.tensors[i].is_constant]
    return found


def _measured(graph: Graph, chain: list[str], tensor: str, calibration: Sequence | None,
              samples: Sequence) -> Int16FrontEnd | None | bool:
    """:func:`measure_int16_front_end`, once per compile (the blame runs after the int8 step
    and again after the integer steps); False when the front end cannot be quantized alone
    (it then stays on the chip, as a later ladder step that fails leaves the model)."""
    def compute() -> Int16FrontEnd | None | bool:
        try:
            return measure_int16_front_end(graph, chain, tensor, calibration, samples)
        except WorkCapReached:      # the escalation's cap stops the work: not an answer to keep
            raise
        except Exception:  # noqa: BLE001 - optional, as a later ladder step: the model stays as it is
            return False
    return once("front end int16", (graph, *(calibration or ()), *samples), (tensor, tuple(chain)), compute)


def errors_by_float_name(float_graph: Graph, quantized: Graph, samples: Sequence) -> dict[str, LayerError]:
    """:func:`libnpu.compiler.accuracy.layer_errors` keyed by the float graph's tensors,
    which the blame and the move name: the quantized graph renames a model output's maker
    (``y_int8`` before the DEQUANTIZE making ``y``), so a log that is the model's last op
    went unseen and its front end stayed on the chip."""
    names = float_names(quantized, float_graph)
    errors: dict[str, LayerError] = {}
    for tensor, error in layer_errors(float_graph, quantized, samples).items():
        errors.setdefault(names.get(tensor, tensor), error)
    return errors


def front_end_blamed(float_graph: Graph, quantized: Graph, samples: Sequence, *, calibration: Sequence | None,
                     need: float) -> list[Blame]:
    """:func:`blamed_layers` when the worst is a front end no grid holds (a magnifying
    layer), else []: the escalation then keeps it in float right after its int8 step,
    not after the int16 steps, which cannot fix it (basic-pitch's log spectrum: int16
    activations on 179 layers moved its worst output from 0.855 to 0.857 at 3.4 + 2.1 +
    9.8 times the int8 step's work, and reached the budget's cap before the CPU step)."""
    blamed = blamed_layers(float_graph, quantized, samples, calibration=calibration, need=need)
    if not blamed or not blamed[0].front_end:
        return []
    # A magnifying layer the chip also runs in int16 is the int16 steps' to try first: its
    # input grid 256 times finer may hold it (a LayerNorm's 1 / sqrt after an attention whose
    # tokens differ 40x in scale: int16 reached 0.9999 where the whole decoder went to the CPU).
    ops = {op.outputs[0]: op for op in float_graph.ops}
    return [] if registry.get(ops[blamed[0][0]].type, "int16") else blamed


def front_end_reason(graph: Graph, blame: Blame) -> str:
    """What the reason of a front end kept in float adds: what int16 on it alone scored, and
    what it costs (:func:`front_end_cost`)."""
    score = "" if blame.int16_score is None else f"int16 on the front end alone scored {blame.int16_score:.4f}, "
    return f"; {score}{front_end_cost(graph, blame.chain)}"


def front_end_in_float(graph: Graph, blame: Blame, reason: str) -> tuple[Graph, dict[str, Any]]:
    """The float ``graph`` with the front end ``blame`` names (:func:`front_end_blamed`) on
    the CPU in float (:func:`float_on_cpu`), and the ``cpu_float`` metadata saying so, its
    reason with what int16 scored on it and what it costs (:func:`front_end_reason`); the
    escalation's ladder then quantizes the rest, int16 steps and all (basic-pitch: the CQT
    front end in float and int16 on the rest reached 0.990, one step short of what the
    int16 weights step then adds)."""
    reason += front_end_reason(graph, blame)
    return float_on_cpu(graph, blame.chain, reason), kept_in_float(graph, blame.chain, reason)


def kept_in_float(graph: Graph, tensors: Collection[str], reason: str) -> dict[str, Any]:
    """The ``cpu_float`` metadata of the ops making ``tensors`` kept in float on the CPU:
    their ``layers`` ("LOG ln"), the ``reason``, and the source model's operators they
    came from (``sources``: :mod:`libnpu.compiler.source_index`), which ``npu compile
    --report`` places on the CPU (its placement is the model's before any was moved)."""
    tensors = set(tensors) - _on_cpu_already(graph, tensors)
    made = [op for op in graph.ops if op.outputs[0] in tensors]
    index = op_sources(graph.metadata)
    return {"layers": [f"{op.type} {op.outputs[0]}" for op in made], "reason": reason,
            "sources": sorted({index[op.name] for op in made if op.name in index})}


#: How the reason of a host call kept in float begins (:func:`cpu_reason`).
KEPT_IN_FLOAT = "kept in float on the CPU"


def cpu_reason(score: float, target: float, grid: str = "int16") -> str:
    """The reason a host call kept in float gives (``npu compile``, ``--report``): the
    worst output score the integer steps reached on ``grid`` (its error: 1 - score; "int8"
    for a front end moved right after the int8 step), and the target."""
    return f"{KEPT_IN_FLOAT}: {grid} error {1 - score:.4f} (worst output score {score:.4f}), target {target}"


def float_on_cpu(graph: Graph, tensors: Collection[str], reason: str) -> Graph:
    """A copy of the float ``graph`` where the ops making ``tensors`` run on the host in
    float: one HOST op per group :func:`group_host_ops` forms, each a float .tflite of
    those ops (run by LiteRT), with ``reason``; a host call no .tflite holds among them
    stays the call it is (:func:`stays_on_host`)."""
    g = graph.copy()
    wanted = set(tensors) - _on_cpu_already(g, tensors)
    host = {k for k, op in enumerate(g.ops) if op.outputs[0] in wanted}
    missing = wanted - {g.ops[k].outputs[0] for k in host}
    if missing:
        raise IRError(f"CPU float: no op makes {', '.join(sorted(missing))}")
    groups = group_host_ops([(op.inputs, op.outputs) for op in g.ops], host)
    members: dict[int, list[Op]] = {}
    for k in groups.order:
        if k in groups.group:
            members.setdefault(groups.group[k], []).append(g.ops[k])
    # what leaves a group: read by a chip op, or by another group (one after a host call kept
    # between them: FastEnhancer's X, read by its Mul after the Pow, from the group before it)
    maker = {o: k for k in host for o in g.ops[k].outputs}
    readers = {i for k, op in enumerate(g.ops) for i in op.inputs
               if k not in host or i in maker and groups.group[maker[i]] != groups.group[k]}
    kept = readers | set(g.outputs) | {n for s in g.states for n in (s.input, s.output)}
    ops: list[Op] = []
    done: set[int] = set()
    for k in groups.order:
        if k not in groups.group:
            ops.append(g.ops[k])
        elif groups.group[k] not in done:
            done.add(groups.group[k])
            group = members[groups.group[k]]
            for out in [o for op in group for o in op.outputs if o in kept]:
                ops.append(_host_op(g, _needed(group, out), {out}, reason))
    g.ops = ops
    g.validate()
    return g


def _needed(group: list[Op], tensor: str) -> list[Op]:
    """The ops of ``group`` that ``tensor`` depends on (it included), in order.

    One host call per output leaving the group: a call of one output may take int16
    (:func:`libnpu.compiler.mixed_precision.promotable`), and an output leaving the CPU
    in float needs its grid's every bit (Silero VAD's log spectrum beside its input frame:
    one call of two outputs stayed int8, 0.064 off its speech probability on unseen audio).
    Ops two outputs share run in both calls: a few float ops on the host."""
    producer = {o: op for op in group for o in op.outputs}
    wanted: set[int] = set()
    pending = [tensor]
    while pending:
        op = producer.get(pending.pop())
        if op is not None and id(op) not in wanted:
            wanted.add(id(op))
            pending += [i for i in op.inputs if i]
    return [op for op in group if id(op) in wanted]


def _host_op(g: Graph, group: list[Op], kept: set[str], reason: str) -> Op:
    ins, outs = _io(g, group, kept)
    if any(op.type == "HOST" for op in group):     # a LiteRT call among them: the parts joined
        starts = [k for k, op in enumerate(group) if k == 0 or "HOST" in (op.type, group[k - 1].type)]
        parts = []
        for start, end in zip(starts, [*starts[1:], len(group)]):
            run = group[start:end]
            if run[0].type == "HOST":
                parts.append(Part(run[0].attrs["host"].model, run[0].inputs, run[0].outputs))
                continue
            run_ins, run_outs = _io(g, run, {i for op in group[end:] for i in op.inputs} | kept)
            parts.append(Part(_exported(g, run, run_ins, run_outs), run_ins, run_outs))
        model = merge_tflite(parts, ins, outs)
    else:
        model = _exported(g, group, ins, outs)
    label = "+".join(op.attrs["host"].op if op.type == "HOST" else op.type for op in group)
    return Op("HOST", ins, outs, {"host": HostCall("tflite", model, label, -1, reason)}, name=outs[0])


def _io(g: Graph, group: list[Op], kept: set[str]) -> tuple[list[str], list[str]]:
    """The tensors ``group`` reads from outside it (constants aside), and those of ``kept`` it makes."""
    made = [o for op in group for o in op.outputs]
    ins = [i for i in dict.fromkeys(i for op in group for i in op.inputs)
           if i and i not in made and not g.tensors[i].is_constant]
    return ins, [o for o in made if o in kept]


def _exported(g: Graph, group: list[Op], ins: list[str], outs: list[str]) -> bytes:
    """The chip ops ``group`` as a float .tflite of inputs ``ins`` and outputs ``outs``."""
    made = [o for op in group for o in op.outputs]
    sub = Graph(f"{g.name}:cpu:{outs[0]}")
    for n in dict.fromkeys([*ins, *(i for op in group for i in op.inputs if i), *made]):
        sub.add_tensor(copy.copy(g.tensors[n]))
    sub.inputs, sub.outputs = ins, outs
    sub.ops = [Op(op.type, list(op.inputs), list(op.outputs), copy.deepcopy(op.attrs), op.name) for op in group]
    try:
        return export_tflite(sub)
    except (IRError, KeyError, ValueError, NotImplementedError) as exc:
        raise IRError(f"CPU float: {group[0].describe()} cannot be written as a .tflite: {exc}") from exc
