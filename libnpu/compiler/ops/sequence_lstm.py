"""UNIDIRECTIONAL_SEQUENCE_LSTM: an int8 TFLite LSTM layer ("8x8->16": int8 activations and
weights, int16 gates and cell state) as one chip task, byte-identical to LiteRT's integer
kernel (formula: ``npu_hw.ops``, docs/hardware.md).

The import reads the cell as the converter writes it: 24 inputs, the output and cell
states as variable tensors (kept between calls: each becomes an :class:`~libnpu.compiler.ir.State`,
initially the zero point and 0 as LiteRT resets them), five intermediate tensors of which
the fifth gives the hidden state's grid. The IR op reads ``[x, W, R, B, h, c]`` (the four
gates' weights stacked, gate order input, forget, cell, output) and writes ``[y, h', c']``.
The kernel parameters are LiteRT's Prepare, float32 arithmetic included: each product's
multiplier ``w_scale * in_scale / 2**-12``, the hidden multiplier ``2**-30 / hidden_scale``,
the zero points folded into effective biases.

Not on the chip (UnsupportedOpError: the host runs it): float and hybrid cells, CIFG,
peepholes, projection, layer normalization. ONNX LSTM and GRU are ``ops.recurrent``.
"""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import fixedpoint as fp
from npu_hw import ops as spec_ops

from .. import tflite_export, tflite_import
from ..descriptors import Emitted
from ..ir import Op, QuantParams, State, Tensor
from ..registry import Operator, register

_GATES = ("input", "forget", "cell", "output")
_W0, _R0, _PEEPHOLE0, _B0, _PROJECTION, _H, _C, _NORM0 = 1, 5, 9, 12, 16, 18, 19, 20
_INTERMEDIATE = 2.0 ** -12      # the gates' Q3.12 grid without layer normalization


def _refuse(where: str, what: str) -> tflite_import.UnsupportedOpError:
    return tflite_import.UnsupportedOpError(f"{where}: {what} (the chip runs the int8 8x8->16 cell without "
                                            "CIFG, peepholes, projection or layer normalization)")


def _intermediates(im, outs: list[int]) -> list[int]:
    """The operator's intermediate tensors (the importer hands an operator its inputs,
    outputs and options only)."""
    for k in range(im.sg.OperatorsLength()):
        op = im.sg.Operators(k)
        if op.OutputsLength() and int(op.OutputsAsNumpy()[0]) == outs[0]:
            return [int(i) for i in op.IntermediatesAsNumpy()] if op.IntermediatesLength() else []
    return []


def _stacked(im, indices: list[int], dtype: str, where: str) -> Tensor:
    """The four gates' constants as one tensor, one scale per gate."""
    tensors = [im.graph.tensors[im.tensor(i)] for i in indices]
    if any(t.data is None or t.dtype != dtype or t.quant is None or t.quant.per_channel for t in tensors):
        raise _refuse(where, f"gate tensors {[t.name for t in tensors]} must be {dtype} constants, one scale each")
    data = np.stack([t.data for t in tensors])
    quant = QuantParams(np.concatenate([t.quant.scale for t in tensors]), np.zeros(len(tensors), np.int64), 0)
    return im.graph.add_const(f"{tensors[0].name}__gates", data, quant)


def _state(im, index: int, reset: int, where: str) -> tuple[str, str]:
    """A variable tensor as a state: (its tensor at the start of a call, the tensor holding
    the value left for the next one)."""
    g = im.graph
    t = g.tensors[im.tensor(index)]
    initial = t.data if t.data is not None else np.full(t.shape, reset, t.dtype)
    t.data = None
    out = g.add_tensor(Tensor(g.unique_name(f"{t.name}__next"), t.shape, t.dtype, t.quant))
    g.states.append(State(t.name, t.name, out.name, np.asarray(initial, t.dtype).reshape(t.shape)))
    return t.name, out.name


def _tflite(im, ins, outs, table, where):
    ins = list(ins) + [-1] * (24 - len(ins))
    o = tflite_import.options(table, tflite.UnidirectionalSequenceLSTMOptions)
    x = im.graph.tensors[im.tensor(ins[0])]
    if x.dtype != "int8" or x.quant is None:
        raise _refuse(where, f"a {x.dtype} input")
    if ins[_W0] < 0:
        raise _refuse(where, "CIFG (no input gate)")
    if any(i >= 0 for i in ins[_PEEPHOLE0:_PEEPHOLE0 + 3]):
        raise _refuse(where, "peepholes")
    if ins[_PROJECTION] >= 0:
        raise _refuse(where, "a projection")
    if any(i >= 0 for i in ins[_NORM0:_NORM0 + 4]):
        raise _refuse(where, "layer normalization")
    inter = _intermediates(im, outs)
    if len(inter) != 5:
        raise _refuse(where, f"{len(inter)} intermediate tensors (the 8x8->16 cell has 5)")
    if o is not None and o.FusedActivationFunction() != tflite.ActivationFunctionType.TANH:
        raise _refuse(where, f"fused activation {o.FusedActivationFunction()} (LiteRT's integer cell is tanh)")
    hidden = im.graph.tensors[im.tensor(inter[4])].quant
    cell = im.graph.tensors[im.tensor(ins[_C])]
    if hidden is None or cell.dtype != "int16" or cell.quant is None:
        raise _refuse(where, "no hidden grid, or a cell state that is not int16")
    h_zp = int(im.graph.tensors[im.tensor(ins[_H])].quant.zero_point[0])
    w = _stacked(im, ins[_W0:_W0 + 4], "int8", where)
    r = _stacked(im, ins[_R0:_R0 + 4], "int8", where)
    b = _stacked(im, ins[_B0:_B0 + 4], "int32", where)
    h_in, h_out = _state(im, ins[_H], h_zp, where)
    c_in, c_out = _state(im, ins[_C], 0, where)
    attrs = dict(time_major=bool(o.TimeMajor()) if o is not None else True,
                 cell_clip=float(o.CellClip()) if o is not None else 0.0,
                 hidden_scale=float(hidden.scale[0]), hidden_zp=int(hidden.zero_point[0]))
    y = im.tensor(outs[0])
    im.graph.add_op(Op("UNIDIRECTIONAL_SEQUENCE_LSTM", [im.tensor(ins[0]), w.name, r.name, b.name, h_in, c_in],
                       [y, h_out, c_out], attrs, name=y))
    return None


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _float(op, ins, out):
    """The float LSTM the integer cell approximates (real values in, real values out)."""
    x, w, r, b, h, c = (np.asarray(v, np.float64) for v in ins)
    seq = x if op.attrs["time_major"] else x.swapaxes(0, 1)
    ys = []
    for x_t in seq:
        pre = np.einsum("bi,gci->gbc", x_t, w) + np.einsum("bk,gck->gbc", h, r) + b[:, None, :]
        i, f, o = _sigmoid(pre[0]), _sigmoid(pre[1]), _sigmoid(pre[3])
        c = f * c + i * np.tanh(pre[2])
        if op.attrs["cell_clip"] > 0:
            c = np.clip(c, -op.attrs["cell_clip"], op.attrs["cell_clip"])
        h = o * np.tanh(c)
        ys.append(h)
    y = np.stack(ys) if op.attrs["time_major"] else np.stack(ys, axis=1)
    return [y.astype(np.float32), h.astype(np.float32), c.astype(np.float32)]


def _params(g, op) -> dict:
    """LiteRT's Prepare (``PopulateQuantizedLstmParams8x8_16``) in its float32 arithmetic."""
    x, w, r, _, h, c = (g.tensors[n] for n in op.inputs)
    f32 = np.float32
    scales = [f32(f32(f32(s) * f32(x.quant.scale[0])) / f32(_INTERMEDIATE)) for s in w.quant.scale] + \
        [f32(f32(f32(s) * f32(h.quant.scale[0])) / f32(_INTERMEDIATE)) for s in r.quant.scale]
    mults, shifts = zip(*(fp.quantize_multiplier(float(s)) for s in scales))
    cell_scale = float(c.quant.scale[0])
    cell_shift = int(np.round(np.log2(cell_scale)))
    if 2.0 ** cell_shift != cell_scale or cell_shift > -9:
        raise ValueError(f"cell state scale {cell_scale}: LiteRT's kernel needs a power of two <= 2**-9")
    hidden_m, hidden_s = fp.quantize_multiplier(float(f32(2.0 ** -15 / float(f32(op.attrs["hidden_scale"]))
                                                          * 2.0 ** -15)))
    clip = f32(op.attrs["cell_clip"])
    cell_clip = int(min(max(f32(clip / f32(cell_scale)), -32768.0), 32767.0)) if clip > 0 else 0
    bias_x = g.tensors[op.inputs[3]].data.astype(np.int64) - int(x.quant.zero_point[0]) * \
        w.data.astype(np.int64).sum(-1)
    bias_r = -int(h.quant.zero_point[0]) * r.data.astype(np.int64).sum(-1)
    return dict(multipliers=np.asarray(mults, np.int32), shifts=np.asarray(shifts, np.int32),
                biases=np.concatenate([bias_x, bias_r]).astype(np.int32), cell_shift=cell_shift,
                cell_clip=cell_clip, hidden_multiplier=hidden_m, hidden_shift=hidden_s,
                hidden_zp=int(op.attrs["hidden_zp"]))


def _lower(low, op, p):
    x, w, r, _, h_in, c_in = op.inputs
    y, h_out, c_out = op.outputs
    _, n_cell, n_input = low.shape(w)
    lead = low.shape(x)[:2]
    steps, batch = lead if op.attrs["time_major"] else lead[::-1]
    fields = dict(steps=steps, batch=batch, n_input=n_input, n_cell=n_cell,
                  **{k: p[k] for k in ("multipliers", "shifts", "cell_shift", "cell_clip", "hidden_multiplier",
                                       "hidden_shift", "hidden_zp")})
    addresses = dict(input=x, output=y, input_weights=w, recurrent_weights=r, output_state_in=h_in,
                     cell_state_in=c_in, output_state_out=h_out, cell_state_out=c_out)
    flags = 0 if op.attrs["time_major"] else spec_ops.OPF_BATCH_MAJOR
    return Emitted("UNIDIRECTIONAL_SEQUENCE_LSTM", flags, fields, addresses,
                   dict(biases=low.const(op, "biases", p["biases"])))


def _export(wr, op, outs) -> None:
    raise tflite_export.TFLiteExportError(
        f"{op.describe()}: an integer LSTM's states are variable tensors and its grids intermediates, "
        "which the exporter does not write")


register(Operator(
    "UNIDIRECTIONAL_SEQUENCE_LSTM", ("time_major", "cell_clip", "hidden_scale", "hidden_zp"), tflite=_tflite,
    float_ref=_float, params=_params, lower=_lower, export=_export,
    macs=lambda g, op: g.tensors[op.outputs[0]].size * 4 * sum(g.tensors[op.inputs[k]].shape[2] for k in (1, 2)),
    int16=True))   # int16: its cell state is (not a 16x8 promotion: the op comes only from int8 models)
