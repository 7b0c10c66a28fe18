"""A numpy float reference interpreter for the IR (used for calibration and checks).

Values flow as float32 "real" numbers. Quantized tensors are simulated: a quantized
constant or input is dequantized when read, and every quantized op output is rounded
to its int grid (quantize then dequantize) when written. On a float graph this is a
plain float interpreter; on an int8 graph it approximates the int8 kernels to within
the rounding of the fixed-point requantization (a few LSBs), which is what a quick
sanity check of an imported int8 model needs. Bit-exact int8 results come from the
chip's kernels, not from here. What the chip's arithmetic does to every output of a
channel alike (the int16 convolutions' Q15 multipliers, :mod:`.requant_gains`) is applied,
since such an error adds up over layers instead of averaging out.

Each operator's float reference is declared with the operator (``compiler.ops``); the
helpers here (fused activations, padded windows) are what those references share.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import registry
from .dynamic_shapes import DYNAMIC_OUTPUTS
from .folding import folded_input_scales, weight_fold
from .integer_inputs import INTEGER_INPUTS
from .ir import Graph, IRError, Op, Tensor
from .requant_gains import requant_gain
from .scratch import reusing_scratch
from .work_count import count_op

__all__ = ["FloatInterpreter", "run_float", "evaluate", "has_reference", "activation", "pad_nhwc",
           "windows", "to_real", "snap_to_grid"]


def activation(x: np.ndarray, act: str) -> np.ndarray:
    """Apply a fused activation (``ir.ACTIVATIONS``) in float."""
    if act == "NONE":
        return x
    if act == "RELU":
        return np.maximum(x, 0)
    if act == "RELU6":
        return np.clip(x, 0, 6)
    if act == "RELU_N1_TO_1":
        return np.clip(x, -1, 1)
    raise IRError(f"unknown fused activation {act!r}")


def pad_nhwc(x: np.ndarray, pads: tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    """Pad the H and W axes of an NHWC tensor by ``(top, bottom, left, right)``."""
    top, bottom, left, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def windows(x: np.ndarray, kh: int, kw: int, stride, dilation, pads, value=0.0) -> np.ndarray:
    """(N, OH, OW, C, KH, KW) strided view of the padded input."""
    xp = pad_nhwc(x, pads, value)
    dh, dw = dilation
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    return win[:, ::stride[0], ::stride[1], :, ::dh, ::dw]


def evaluate(op: Op, ins: list, out: Tensor) -> np.ndarray:
    """The float value of one op's output, by its operator's float reference."""
    fn = registry.get(op.type, "float_ref")
    if fn is None:
        raise IRError(f"float reference: unsupported op {op.describe()}")
    count_op()      # the unit of the escalation's cap (work_count)
    return fn(op, ins, out)


def has_reference(op_type: str) -> bool:
    """Whether the operator has a float reference."""
    return registry.get(op_type, "float_ref") is not None


def to_real(t: Tensor, value: np.ndarray) -> np.ndarray:
    """The real value of ``value`` stored as tensor ``t`` (dequantized if ``t`` is quantized)."""
    if t.quant is not None and t.dtype in ("int8", "uint8", "int16", "int32", "int64"):
        return t.quant.dequantize(np.asarray(value))
    if t.dtype in INTEGER_INPUTS and not t.is_constant:
        return np.asarray(value, t.dtype)     # integers computed at run time (ids, a rate, PCM) as they are
    return np.asarray(value, np.float32)


def snap_to_grid(t: Tensor, value: np.ndarray) -> np.ndarray:
    """Round a real value to what the quantized tensor ``t`` can represent (quantize, then
    dequantize); a float tensor's value as it is. How the float simulation of a quantized
    graph rounds every op's output."""
    if t.quant is not None and t.dtype in ("int8", "uint8", "int16"):
        return t.quant.snap(np.asarray(value), t.dtype)
    return value


class FloatInterpreter:
    """Runs a graph on numpy in float32, keeping every intermediate tensor if asked."""

    def __init__(self, graph: Graph) -> None:
        graph.validate()
        for op in graph.ops:
            if not has_reference(op.type):
                raise IRError(f"float reference: unsupported op {op.describe()}")
        self.graph = graph
        self._dynamic = set(graph.metadata.get(DYNAMIC_OUTPUTS, ()))    # shapes decided per run
        self._consts = {t.name: to_real(t, t.data) for t in graph.constants()}
        # Weights that carry their per-channel input's scales (libnpu.compiler.folding):
        # the real weights are the stored ones divided by those scales.
        self._unfolded: dict[int, np.ndarray] = {}
        for k, op in enumerate(graph.ops):
            scales = folded_input_scales(graph, op)
            if scales is not None:
                w = self._consts[op.inputs[1]]
                self._unfolded[k] = (w / weight_fold(w.shape, scales)).astype(np.float32)
        # The chip's requantization factor of an op, where it is not 1 (requant_gains).
        self._gains = {k: gain for k, op in enumerate(graph.ops) if (gain := requant_gain(graph, op)) is not None}

    def run(self, feeds: Mapping[str, np.ndarray] | Iterable[np.ndarray], *,
            keep: bool | Iterable[str] = False) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` maps input names (or lists inputs in order) to arrays
        in the input tensors' dtypes. Returns the graph outputs, converted back to
        their dtypes, plus (as float32 real values) every intermediate if ``keep`` is
        True or the named ones if ``keep`` is a collection of names.
        """
        with reusing_scratch():     # one patch-matrix buffer for the run's convolutions (scratch)
            return self._run(feeds, keep)

    def _run(self, feeds: Mapping[str, np.ndarray] | Iterable[np.ndarray],
             keep: bool | Iterable[str]) -> dict[str, np.ndarray]:
        g = self.graph
        if not isinstance(feeds, Mapping):
            feeds = dict(zip(g.inputs, feeds, strict=True))
        env: dict[str, np.ndarray] = dict(self._consts)
        for name in g.inputs:
            if name not in feeds:
                raise IRError(f"missing input {name!r}")
            t = g.tensors[name]
            arr = np.asarray(feeds[name])
            if arr.shape != t.shape:
                raise IRError(f"input {name!r}: shape {arr.shape} != {t.shape}")
            env[name] = to_real(t, arr)
        for state in g.states:        # its value from the previous call if given, else its initial one
            t = g.tensors[state.input]
            env[state.input] = to_real(t, np.asarray(feeds.get(state.input, state.initial)).reshape(t.shape))
        for k, op in enumerate(g.ops):
            ins = [env[i] if i else None for i in op.inputs]
            if k in self._unfolded:
                ins[1] = self._unfolded[k]
            out_t = g.tensors[op.outputs[0]]
            try:
                y = evaluate(op, ins, out_t)
            except (ValueError, IndexError, TypeError) as exc:
                raise IRError(f"float reference: {op.describe()} failed: {exc}") from exc
            if k in self._gains:
                y = np.asarray(y, np.float32) * self._gains[k]
            values = list(y) if isinstance(y, (list, tuple)) else [y]   # ops with several outputs give a list
            for name, value in zip(op.outputs, values):
                t = g.tensors[name]
                if value.shape != t.shape and name not in self._dynamic:
                    raise IRError(f"float reference: {op.describe()} produced shape {value.shape} for {name!r}, "
                                  f"expected {t.shape}")
                env[name] = snap_to_grid(t, np.asarray(value, np.float32))
        result = {}
        for name in g.outputs:
            t = g.tensors[name]
            v = env[name]
            if t.quant is not None and t.dtype in ("int8", "uint8", "int16"):
                v = t.quant.quantize(v, t.dtype)
            result[name] = v.astype(t.dtype) if t.dtype != "float16" else v
        if keep:
            names = [n for n in env if n not in self._consts] if keep is True else keep
            for n in names:
                result.setdefault(n, env[n])
        return result


def run_float(graph: Graph, feeds: Mapping[str, np.ndarray] | Iterable[np.ndarray]) -> dict[str, np.ndarray]:
    """One-shot helper: run ``graph`` on ``feeds`` and return its outputs."""
    return FloatInterpreter(graph).run(feeds)
