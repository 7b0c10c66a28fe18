"""Periodic functions (sine, cosine) of inputs no integer grid holds: their inputs computed in float on the CPU.

A sinusoidal encoding of coordinates (transformers over boxes, points or times: DETR's
position encoding, NeRF's Fourier features) multiplies a coordinate by frequencies up to
thousands of radians per unit before its ``Sin`` / ``Cos``. The sine only sees its input
modulo 2 pi, so what matters is the input grid's step in radians: trueocr's reading-order
model multiplies box coordinates in [0, 1] by up to 51,472 rad per unit, and one int16 step
of that product is 1.6 rad (of the coordinate before it, times 51,472: 1.6 rad too). Every
value the chip hands the CPU's sine is then a random phase; no int8 or int16 grid holds it.

:func:`periodic_inputs_on_cpu` keeps such an input in float: walking back from a periodic
operator's input (``PERIODIC``), each tensor's int16 step in radians is its step (its
calibrated reach over 32767) times the largest factor between it and the sine's input (a
MUL or DIV by constants multiplies it, data movement and the ADD of a constant keep it, a
layer with weights multiplies it by its largest row of absolute weights). The operators
from the last tensor whose step is at most ``MAX_PHASE_STEP`` (or from the model's float
inputs) through the sine go to the CPU, in the host call of the sine (they are its
producers: :mod:`libnpu.compiler.host_groups` joins them), and what the sine makes comes
back to the chip on a grid as any host call's output. An operator the walk cannot weigh
(two run-time inputs, a nonlinear one) ends it: its output is what the host call reads.
A sine of a small-range input (an activation in [-pi, pi]: a step of 1e-4 rad) keeps its
input on the chip, as a sine of constants folds at compile time (never reaching here).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from . import registry
from .ir import Graph, Op
from .scales import INT16_MAX

__all__ = ["PERIODIC", "MAX_PHASE_STEP", "periodic_inputs_on_cpu", "phase_reason"]

#: Source operator types (ONNX, TFLite) whose output wraps their input modulo a period.
PERIODIC = frozenset({"Sin", "Cos", "SIN", "COS"})

#: The largest int16 grid step, in radians, a periodic operator's input may have on the
#: chip: its rounding then moves a sine by at most 0.005 (uniform rounding: an RMS error of
#: 0.003, 50 dB under a unit sine). A coordinate times 2^k pi for k up to 14 is 16 to 50,000
#: times over it; an angle in [-pi, pi] 100 times under it.
MAX_PHASE_STEP = 0.01

#: Elementwise binary operators whose factor from a run-time input to the output is that of
#: a constant other operand (|c| for MUL, 1 / |c| for DIV, 1 for ADD and SUB).
_BY_CONSTANT = {"MUL": lambda c: np.abs(c), "DIV": lambda c: 1.0 / np.maximum(np.abs(c), 1e-30),
                "ADD": lambda c: np.ones(1), "SUB": lambda c: np.ones(1)}


def _int16_step(values: Sequence[Mapping[str, np.ndarray]], tensor: str) -> float | None:
    """The int16 step of ``tensor`` on the values the float model gave it (None: not seen)."""
    seen = [np.asarray(run[tensor], np.float64) for run in values if tensor in run]
    if not seen or any(v.dtype.kind not in "f" for v in seen):
        return None
    reach = max(float(np.max(np.abs(v))) if v.size else 0.0 for v in seen)
    return reach / INT16_MAX if np.isfinite(reach) else None


def _factor(graph: Graph, op: Op) -> tuple[float, list[str]] | None:
    """How much ``op`` multiplies a step of its run-time inputs, and those inputs; None when
    it cannot be weighed (the walk ends before it)."""
    data = [i for i in dict.fromkeys(op.inputs) if i and not graph.tensors[i].is_constant]
    constants = [graph.tensors[i].data for i in op.inputs if i and graph.tensors[i].is_constant]
    if not data or any(graph.tensors[i].dtype != "float32" for i in data):
        return None
    if registry.get(op.type, "same_scale"):
        return 1.0, data
    if op.type in _BY_CONSTANT and len(data) == 1 and len(constants) == 1:
        if op.type == "DIV" and op.inputs[0] != data[0]:
            return None         # c / x: not linear
        return float(np.max(_BY_CONSTANT[op.type](np.asarray(constants[0], np.float64)))), data
    axis = registry.get(op.type, "weight_axis")
    if axis is not None and len(data) == 1 and op.inputs[0] == data[0] and op.inputs[1] in graph.tensors:
        w = graph.tensors[op.inputs[1]].data
        if w is None:
            return None
        w = np.moveaxis(np.abs(np.asarray(w, np.float64)), axis, 0)
        return float(np.max(w.reshape(w.shape[0], -1).sum(axis=1))), data
    return None


def periodic_inputs_on_cpu(graph: Graph, periodic: Collection[Op],
                           values: Sequence[Mapping[str, np.ndarray]]) -> dict[int, float]:
    """The ops of ``graph`` (by ``id``) that make a periodic op's input on a grid too coarse
    for its phase (:data:`MAX_PHASE_STEP`), each with the int16 step in radians of the
    periodic input it feeds. ``periodic``: the ops of ``graph`` standing for periodic source
    operators (HOST ops; their run-time inputs are walked back); ``values``: every tensor's
    float values on the calibration data (placement's float runs)."""
    producer = {o: op for op in graph.ops for o in op.outputs}
    found: dict[int, float] = {}
    for sine in periodic:
        for start in dict.fromkeys(i for i in sine.inputs if i and not graph.tensors[i].is_constant):
            step = _int16_step(values, start)
            if step is None or step <= MAX_PHASE_STEP:
                continue
            pending = [(start, 1.0)]
            while pending:
                tensor, gain = pending.pop()
                own = _int16_step(values, tensor)
                op = producer.get(tensor)
                if own is None or own * gain <= MAX_PHASE_STEP or op is None or op.type == "HOST":
                    continue    # this grid keeps the phase, or the model's input (read in float), or the CPU's
                weighed = _factor(graph, op)
                if weighed is None:
                    continue
                found[id(op)] = max(found.get(id(op), 0.0), step)
                pending += [(i, gain * weighed[0]) for i in weighed[1]]
    return found


def phase_reason(step: float) -> str:
    """The placement reason of an op moved by :func:`periodic_inputs_on_cpu`."""
    return (f"periodic input: a grid step of {step:.3g} rad at int16 (over {MAX_PHASE_STEP} loses a sine's "
            f"phase), computed in float with the sine")
