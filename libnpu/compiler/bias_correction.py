"""Bias correction: take the mean quantization error out of each layer with weights.

Rounding weights to int8 shifts a layer's output by ``(W_q - W) x`` on average, and the
errors of the layers before it arrive as a shift of its input too. Each output channel's
mean shift, measured on the calibration data, is a constant the layer's bias can cancel
(Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction",
2019, empirical variant; AIMET and the Edge TPU tool chain do the same).

The correction is sequential: layers are walked in graph order with every calibration
sample in step, the quantized graph simulated on its int grids (as
:mod:`libnpu.compiler.accuracy` does) beside the float graph. At a layer with weights both
compute the pre-activation output; the per-channel mean of (quantized - float), over the
samples and every position, is subtracted from the bias (rounded to the int32 bias grid),
and the corrected output flows on, so later layers see and correct what is left. A mean
estimated from few observations (a head with one position per sample) is shrunk toward
zero by its standard error (:func:`_significant_shift`), so noise is not taken for bias.
Tensors are dropped after their last use: memory is the live tensors times the samples.

A stateful graph's samples are one stream (:meth:`Graph.make_stateful`): each sample's
state values are the ones the float graph carries to it (:func:`stream_states`), fed to
both graphs, so a layer's shift is measured for its own error and not for what an
earlier step left in the state.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from . import registry
from .accuracy import float_names
from .float_ref import FloatInterpreter, activation, evaluate, snap_to_grid
from .ir import Graph, IRError, Op, QuantParams, Tensor
from .progress import Progress
from .scales import bias_scale, symmetric

__all__ = ["correct_biases"]

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def _real(t: Tensor) -> np.ndarray:
    if t.quant is not None and t.dtype in ("int8", "uint8", "int16", "int32"):
        return t.quant.dequantize(np.asarray(t.data))
    return np.asarray(t.data, np.float32)


def _values(y: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """An op's float reference result as float32 arrays, one per output (an op with several
    outputs, such as a host call, gives a list: stacking it made one wrong array)."""
    return [np.asarray(v, np.float32) for v in (y if isinstance(y, (list, tuple)) else [y])]


def _quant(t: Tensor) -> QuantParams:
    if t.quant is None:
        raise IRError(f"bias correction: tensor {t.name!r} is not quantized")
    return t.quant


def _free(envs: Sequence[dict[str, np.ndarray]], names: Iterable[str], last: Mapping[str, int], index: int) -> None:
    """Drop the tensors whose last use is op ``index``."""
    for name in names:
        if name and last.get(name) == index:
            for env in envs:
                env.pop(name, None)


def _last_uses(ops: Sequence[Op]) -> dict[str, int]:
    last: dict[str, int] = {}
    for index, op in enumerate(ops):
        for name in op.inputs:
            if name:
                last[name] = index
    return last


def _bias_tensor(q: Graph, op: Op, channels: int, in_scale: float) -> Tensor:
    """The op's int32 bias, created (zeros) if the op has none."""
    if len(op.inputs) > 2 and op.inputs[2]:
        return q.tensors[op.inputs[2]]
    w = q.tensors[op.inputs[1]]
    scale = bias_scale(in_scale, _quant(w).scale).astype(np.float32)
    if scale.size == 1:
        scale = np.full(channels, scale[0], np.float32)
    name = q.unique_name(f"{op.outputs[0]}_bias")
    t = Tensor(name, (channels,), "int32", symmetric(scale), np.zeros(channels, np.int32))
    q.tensors[name] = t
    while len(op.inputs) < 3:
        op.inputs.append("")
    op.inputs[2] = name
    return t


def _significant_shift(errors: np.ndarray) -> np.ndarray:
    """Each channel's mean error (``errors``: [observations, channels]), shrunk by how
    well the observations pin it down: ``mean * max(0, 1 - (2 stderr / mean)^2)``, nothing
    for a mean within two standard errors of zero, nearly all of a well measured one.

    A feature map gives thousands of observations per channel and the mean is taken
    whole; a head with one position per sample (a presence logit: ten observations on ten
    pictures) gives a mean that is mostly the pictures' noise, and correcting by it moves
    the unseen pictures' output away from float (mediapipe face_landmark's face logit:
    |error| 0.37 -> 0.93 with the plain mean)."""
    e = errors.astype(np.float64)
    mean = e.mean(axis=0)
    if e.shape[0] < 2:
        return np.zeros_like(mean)
    stderr2 = e.var(axis=0, ddof=1) / e.shape[0]
    m2 = mean * mean
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(m2 > 0, np.clip(1.0 - 4.0 * stderr2 / m2, 0.0, 1.0), 0.0)
    return mean * weight


def stream_states(float_graph: Graph, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Each feed's state inputs (real values) as ``float_graph`` carries them from one
    feed to the next, starting from the states' initial values; empty dicts for a graph
    without states."""
    if not float_graph.states:
        return [{} for _ in feeds]
    run = FloatInterpreter(float_graph)
    names = [n for s in float_graph.states for n in (s.input, s.output)]
    carried: dict[str, np.ndarray] = {}
    result = []
    for feed in feeds:
        values = run.run({**feed, **carried}, keep=names)
        result.append({s.input: np.asarray(values[s.input], np.float32) for s in float_graph.states})
        carried = {s.input: np.asarray(values[s.output], np.float32) for s in float_graph.states}
    return result


def correct_biases(float_graph: Graph, quantized: Graph, dataset: Iterable[Feed], *,
                   progress: Progress | None = None) -> dict[str, float]:
    """Correct, in place, the int32 biases of ``quantized`` (the int8 graph of ``float_graph``).

    Returns the largest correction applied per layer (by output tensor), in output units.
    """
    feeds = [f if isinstance(f, Mapping) else dict(zip(float_graph.inputs, f, strict=True)) for f in dataset]
    if not feeds:
        raise IRError("bias correction: no calibration data")
    names = float_names(quantized, float_graph)
    producer = {op.outputs[0]: op for op in float_graph.ops}
    states = stream_states(float_graph, feeds)
    fenv = [{**{n: np.asarray(f[n], np.float32) for n in float_graph.inputs}, **s} for f, s in zip(feeds, states)]
    qenv: list[dict[str, np.ndarray]] = [{} for _ in feeds]
    for env, feed, state in zip(qenv, feeds, states):
        for n in [*quantized.inputs, *state]:
            t = quantized.tensors[n]
            value = np.asarray(state[n] if n in state else feed[n], np.float32)
            env[n] = snap_to_grid(t, value)
    last = _last_uses(quantized.ops)
    float_last: dict[str, int] = {}
    for index, op in enumerate(quantized.ops):
        fop = producer.get(names.get(op.outputs[0], ""))
        for name in fop.inputs if fop is not None else ():
            if name:
                float_last[name] = index
    corrections: dict[str, float] = {}
    total = len(quantized.ops)
    if progress is not None:
        progress("bias correction", 0, total)
    for index, op in enumerate(quantized.ops):
        out = op.outputs[0]
        out_t = quantized.tensors[out]
        fop = producer.get(names.get(out, ""))
        weighted = registry.get(op.type, "weight_axis") is not None and fop is not None
        if op.type in ("QUANTIZE", "DEQUANTIZE") or fop is None:
            for env in qenv:  # edges: QUANTIZE of an input, DEQUANTIZE of an output
                env[out] = snap_to_grid(out_t, env[op.inputs[0]])
        else:
            act = op.attrs.get("activation", "NONE") if weighted else "NONE"
            bare_q = Op(op.type, op.inputs, op.outputs, dict(op.attrs, activation="NONE")) if weighted else op
            bare_f = Op(fop.type, fop.inputs, fop.outputs, dict(fop.attrs, activation="NONE")) if weighted else fop
            consts_q = {i: _real(quantized.tensors[i]) for i in op.inputs if i and quantized.tensors[i].is_constant}
            consts_f = {i: np.asarray(float_graph.tensors[i].data, np.float32)
                        for i in fop.inputs if i and float_graph.tensors[i].is_constant}
            f_out = float_graph.tensors[fop.outputs[0]]
            outs_q, outs_f = [], []     # per sample, one value per output (a host call may have several)
            for fe, qe in zip(fenv, qenv):
                outs_f.append(_values(evaluate(bare_f, [None if not i else consts_f.get(i, fe.get(i))
                                                        for i in fop.inputs], f_out)))
                outs_q.append(_values(evaluate(bare_q, [None if not i else consts_q.get(i, qe.get(i))
                                                        for i in op.inputs], out_t)))
            ys_f, ys_q = [v[0] for v in outs_f], [v[0] for v in outs_q]
            channels = out_t.shape[-1] if out_t.shape else 0
            if weighted and channels and all(y.shape == ys_f[0].shape for y in ys_q):
                shift = _significant_shift(np.concatenate([(yq - yf).reshape(-1, channels)
                                                           for yq, yf in zip(ys_q, ys_f)]))
                in_scale = float(_quant(quantized.tensors[op.inputs[0]]).scale[0])
                bias = _bias_tensor(quantized, op, channels, in_scale)
                if bias.shape == (channels,) and bias.data is not None:
                    bs = _quant(bias).scale.astype(np.float64)
                    old = bias.data.astype(np.float64)
                    new = np.clip(np.round(old - shift / bs), -2 ** 31, 2 ** 31 - 1)
                    delta = ((new - old) * bs).astype(np.float32)
                    bias.data = new.astype(np.int32)
                    ys_q = [y + delta for y in ys_q]
                    corrections[out] = float(np.abs(delta).max(initial=0.0))
            for fe, qe, yf, yq, vf, vq in zip(fenv, qenv, ys_f, ys_q, outs_f, outs_q):
                if weighted:
                    fe[fop.outputs[0]] = activation(yf, act)
                    qe[out] = snap_to_grid(out_t, activation(yq, act))
                    continue
                for f_name, q_name, f_value, q_value in zip(fop.outputs, op.outputs, vf, vq):
                    fe[f_name] = f_value
                    qe[q_name] = snap_to_grid(quantized.tensors[q_name], q_value)
        _free(qenv, op.inputs, last, index)
        _free(fenv, fop.inputs if fop is not None else (), float_last, index)
        if progress is not None:
            progress("bias correction", index + 1, total)
    return corrections
