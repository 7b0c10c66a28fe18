"""Recurrent layers: ONNX LSTM, GRU and RNN, unrolled over their static sequence into the chip's
FULLY_CONNECTED, ADD, SUB, MUL, LOGISTIC and TANH (with STRIDED_SLICE, CONCATENATION and
RESHAPE moving the steps' rows): no recurrent descriptor, so calibration gives each role's
tensors (a gate's sum, the cell state...) one grid over all the steps, mixed precision may
promote any of them, and the chip's kernels (native ones included) run it.

Per direction, the input projection of every gate is one FULLY_CONNECTED over the whole
sequence (``X W_g^T + Wb_g + Rb_g``, one row per step and batch item); each step slices its
rows and adds the recurrent product ``H_{t-1} R_g^T``. A zero initial state (absent, or a
constant of zeros) drops the first step's recurrent terms. ONNX's formulas, with the gate
orders of its weights (LSTM ``i o f c``, GRU ``z r h``):

- LSTM: ``i = σ(.. + P_i C_{t-1})``, ``f = σ(.. + P_f C_{t-1})``, ``c = tanh(..)``,
  ``C_t = f C_{t-1} + i c``, ``o = σ(.. + P_o C_t)``, ``H_t = o tanh(C_t)``.
- GRU: ``z = σ(..)``, ``r = σ(..)``, ``h = tanh(X W_h^T + Wb_h + (r H_{t-1}) R_h^T + Rb_h)``
  (``linear_before_reset = 0``) or ``tanh(X W_h^T + Wb_h + r (H_{t-1} R_h^T + Rb_h))`` (1, as
  PyTorch exports), ``H_t = h + z (H_{t-1} - h)`` (ONNX's ``(1 - z) h + z H_{t-1}``).
- RNN: ``H_t = tanh(X W^T + H_{t-1} R^T + Wb + Rb)`` (or the activation named).

Limits (anything else raises :class:`~libnpu.compiler.onnx_import.ONNXImportError`, which
sends the node to the host under ``fallback``): a static sequence length; no
``sequence_lens`` unless every entry is the whole sequence; activations Sigmoid, Tanh or
Relu; no ``clip``; no ``input_forget``.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .. import onnx_import
from ..ir import Op, Tensor
from ..registry import onnx
from ..scales import SHARED_GRIDS
from .slicing import add_slice

_ACTIVATIONS = {"sigmoid": "LOGISTIC", "tanh": "TANH", "relu": "RELU"}
_LSTM_GATES = "iofc"
_GRU_GATES = "zrh"
_RNN_GATES = "t"


class _Cell:
    """Adds one direction's ops to the importer's graph, each output a fresh tensor."""

    def __init__(self, im, prefix: str, batch: int, hidden: int) -> None:
        self.im, self.prefix, self.batch, self.hidden = im, prefix, batch, hidden
        self.roles: dict[str, list[str]] = {}

    def tensor(self, base: str, shape: Sequence[int]) -> str:
        name = self.im.g.unique_name(f"{self.prefix}/{base}")
        self.im.g.add_tensor(Tensor(name, tuple(shape), "float32"))
        self.roles.setdefault(re.sub(r"t\d+/", "", base), []).append(name)
        return name

    def share_grids(self) -> None:
        """One grid for each role's tensors over all steps (``scales.SHARED_GRIDS``): a step's
        tensor alone is calibrated on 1/steps of the data and misses the tails the others
        see (a GRU's ``H_{t-1} - h`` went 45% beyond one step's calibrated range on an
        unseen sequence)."""
        groups = self.im.g.metadata.setdefault(SHARED_GRIDS, [])
        groups += [names for names in self.roles.values() if len(names) > 1]

    def op(self, type_: str, inputs: list[str], base: str, shape: Sequence[int] | None = None,
           **attrs) -> str:
        out = self.tensor(base, shape or (self.batch, self.hidden))
        self.im.g.add_op(Op(type_, inputs, [out], attrs))
        return out

    def const(self, base: str, data: np.ndarray) -> str:
        return self.im.g.add_const(f"{self.prefix}/{base}", np.ascontiguousarray(data, np.float32)).name

    def fc(self, x: str, weight: np.ndarray, bias: np.ndarray | None, base: str, rows: int) -> str:
        b = "" if bias is None else self.const(f"{base}_bias", bias)
        return self.op("FULLY_CONNECTED", [x, self.const(f"{base}_weight", weight), b], base,
                       (rows, weight.shape[0]), activation="NONE", keep_num_dims=False)

    def binary(self, type_: str, a: str, b: str, base: str) -> str:
        return self.op(type_, [a, b], base, activation="NONE")

    def act(self, type_: str, x: str, base: str) -> str:
        return self.op(type_, [x], base)


class _Recurrence:
    """What one LSTM, GRU or RNN node says, read and checked: weights per direction and
    gate, the sequence layout, the initial states."""

    def __init__(self, im, node, attrs, where: str, gates: str, defaults: list[str]) -> None:
        self.im, self.node, self.where = im, node, where
        err = onnx_import.ONNXImportError
        ins = list(node.input) + [""] * (8 - len(node.input))
        direction = attrs.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in ("forward", "reverse", "bidirectional"):
            raise err(f"{where}: unknown direction {direction!r}")
        self.reverse = [direction == "reverse"] if direction != "bidirectional" else [False, True]
        if attrs.get("clip") is not None:
            raise err(f"{where}: clip is not supported on the chip")
        if attrs.get("input_forget", 0):
            raise err(f"{where}: input_forget is not supported on the chip")
        self.layout = int(attrs.get("layout", 0))
        names = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
        names = names or defaults * len(self.reverse)
        if len(names) != len(defaults) * len(self.reverse):
            raise err(f"{where}: {len(names)} activations for {len(self.reverse)} direction(s)")
        unknown = sorted({a for a in names if a.lower() not in _ACTIVATIONS})
        if unknown:
            raise err(f"{where}: activation(s) {unknown} are not supported on the chip "
                      f"(only {', '.join(sorted(a.capitalize() for a in _ACTIVATIONS))})")
        k = len(defaults)
        self.acts = [[_ACTIVATIONS[a.lower()] for a in names[d * k:(d + 1) * k]] for d in range(len(self.reverse))]
        shape = im.onnx_shape(ins[0], where)
        if len(shape) != 3:
            raise err(f"{where}: X must be 3-D, got {shape}")
        self.steps, self.batch = (shape[0], shape[1]) if self.layout == 0 else (shape[1], shape[0])
        w, r = im.const(ins[1], where).astype(np.float32), im.const(ins[2], where).astype(np.float32)
        n = len(gates)
        hidden = int(attrs.get("hidden_size", r.shape[-1]))
        if w.shape[:2] != (len(self.reverse), n * hidden) or r.shape != (len(self.reverse), n * hidden, hidden):
            raise err(f"{where}: weights {w.shape} / {r.shape} do not match {len(self.reverse)} direction(s) "
                      f"of {n} gates of hidden size {hidden}")
        self.hidden = hidden
        bias = im.const(ins[3], where).astype(np.float32) if ins[3] else \
            np.zeros((len(self.reverse), 2 * n * hidden), np.float32)
        self.w = [dict(zip(gates, np.split(w[d], n))) for d in range(len(self.reverse))]
        self.r = [dict(zip(gates, np.split(r[d], n))) for d in range(len(self.reverse))]
        self.wb = [dict(zip(gates, np.split(bias[d, :n * hidden], n))) for d in range(len(self.reverse))]
        self.rb = [dict(zip(gates, np.split(bias[d, n * hidden:], n))) for d in range(len(self.reverse))]
        if ins[4]:
            lens = im.consts.get(ins[4])
            if lens is None or np.any(lens != self.steps):
                raise err(f"{where}: sequence_lens shorter than the sequence are not supported on the chip")
        self.x = im.value(ins[0], False, where)
        self.states = {5: ins[5], 6: ins[6] if gates == _LSTM_GATES else ""}
        self.peephole = im.const(ins[7], where).astype(np.float32) if gates == _LSTM_GATES and ins[7] else None

    def initial(self, cell: _Cell, index: int, d: int) -> str | None:
        """Direction ``d``'s initial state from input ``index`` as a [batch, hidden] tensor
        (None: zero)."""
        name = self.states.get(index, "")
        if not name:
            return None
        if name in self.im.consts:   # [D, B, H], or [B, D, H] for layout 1
            data = np.take(self.im.consts[name].astype(np.float32), d, axis=self.layout)
            return None if not data.any() else cell.const(f"initial{index}", data)
        full = self.im.value(name, False, self.where)
        out = cell.tensor(f"initial{index}", (self.batch, self.hidden))
        index_ = [slice(None)] * 3
        index_[self.layout] = slice(d, d + 1)
        add_slice(self.im.g, full, out, index_, (self.batch, self.hidden))
        return out

    def projections(self, cell: _Cell, d: int, biases: dict[str, np.ndarray]) -> dict[str, str]:
        """Each gate's input projection over the whole sequence, [steps * batch, hidden]."""
        rows = self.steps * self.batch
        return {g: cell.fc(self.x, self.w[d][g], biases[g], f"x{g}", rows) for g in biases}

    def rows(self, cell: _Cell, projection: str, t: int, base: str) -> str:
        """Step ``t``'s rows of a projection (rows in the order of X: step-major for layout 0)."""
        out = cell.tensor(base, (self.batch, self.hidden))
        index = slice(t * self.batch, (t + 1) * self.batch) if self.layout == 0 else \
            slice(t, self.steps * self.batch, self.steps)
        add_slice(self.im.g, projection, out, [index, slice(None)])
        return out

    def order(self, d: int) -> list[int]:
        return list(range(self.steps))[::-1] if self.reverse[d] else list(range(self.steps))

    def write_outputs(self, hs: list[list[str]], last: dict[int, list[str]]) -> None:
        """Y from every step's H ([T, D, B, H], or [B, T, D, H] for layout 1), Y_h and Y_c
        from the last states ([D, B, H]): whichever the node names."""
        im, node, where = self.im, self.node, self.where
        outs = list(node.output) + [""] * (3 - len(node.output))
        dirs, b, h = len(self.reverse), self.batch, self.hidden
        g = im.g
        if outs[0]:
            parts = [hs[d][t] for t in range(self.steps) for d in range(dirs)]
            flat = parts[0]
            if len(parts) > 1:
                flat = g.unique_name(f"{outs[0]}__steps")
                g.add_tensor(Tensor(flat, (len(parts) * b, h), "float32"))
                g.add_op(Op("CONCATENATION", parts, [flat], dict(axis=0, activation="NONE")))
            shape = (self.steps, dirs, b, h)
            if self.layout == 0 or b == 1:
                final = shape if self.layout == 0 else (b, self.steps, dirs, h)
                im.emit("RESHAPE", [flat], outs[0], False, where, dict(new_shape=final), shape=final)
            else:
                mid = g.unique_name(f"{outs[0]}__tdbh")
                g.add_tensor(Tensor(mid, shape, "float32"))
                g.add_op(Op("RESHAPE", [flat], [mid], dict(new_shape=shape)))
                im.emit("TRANSPOSE", [mid], outs[0], False, where, dict(perm=(2, 0, 1, 3)),
                        shape=(b, self.steps, dirs, h))
        for k in (1, 2):
            if not outs[k]:
                continue
            parts = last[k]
            flat = parts[0]
            if len(parts) > 1:
                flat = g.unique_name(f"{outs[k]}__dirs")
                g.add_tensor(Tensor(flat, (dirs * b, h), "float32"))
                g.add_op(Op("CONCATENATION", parts, [flat], dict(axis=0, activation="NONE")))
            final = (dirs, b, h) if self.layout == 0 else (b, dirs, h)
            if self.layout == 1 and dirs > 1 and b > 1:
                mid = g.unique_name(f"{outs[k]}__dbh")
                g.add_tensor(Tensor(mid, (dirs, b, h), "float32"))
                g.add_op(Op("RESHAPE", [flat], [mid], dict(new_shape=(dirs, b, h))))
                im.emit("TRANSPOSE", [mid], outs[k], False, where, dict(perm=(1, 0, 2)), shape=final)
            else:
                im.emit("RESHAPE", [flat], outs[k], False, where, dict(new_shape=final), shape=final)


def _gate(cell: _Cell, rec: _Recurrence, x_rows: str, h: str | None, r: np.ndarray, base: str,
          extra: str | None = None) -> str:
    """A gate's pre-activation: its input rows plus ``h R^T`` (when the state is not zero)
    plus ``extra``."""
    total = x_rows
    if h is not None:
        total = cell.binary("ADD", total, cell.fc(h, r, None, f"h{base}", rec.batch), f"{base}_sum")
    if extra is not None:
        total = cell.binary("ADD", total, extra, f"{base}_peep")
    return total


class _LstmStep:
    """One LSTM step's gates (what they share: the step's input rows and H_{t-1})."""

    def __init__(self, cell: _Cell, rec: _Recurrence, d: int, t: int, rows: dict[str, str], h: str | None,
                 peep: dict[str, np.ndarray] | None) -> None:
        self.cell, self.rec, self.d, self.t, self.rows, self.h, self.peep = cell, rec, d, t, rows, h, peep

    def gate(self, g: str, act: str, state: str | None = None) -> str:
        """Gate ``g``: ``act`` of its input rows + H R_g^T (+ the peephole P_g (.) ``state``)."""
        cell, t, extra = self.cell, self.t, None
        if self.peep is not None and state is not None and g in self.peep:
            extra = cell.binary("MUL", state, cell.const(f"p{g}", self.peep[g]), f"t{t}/p{g}")
        pre = _gate(cell, self.rec, self.rows[g], self.h, self.rec.r[self.d][g], f"t{t}/{g}", extra)
        return cell.act(act, pre, f"t{t}/{g}")


@onnx("LSTM")
def _onnx_lstm(im, node, attrs, where):
    rec = _Recurrence(im, node, attrs, where, _LSTM_GATES, ["Sigmoid", "Tanh", "Tanh"])
    hs: list[list[str]] = []
    last: dict[int, list[str]] = {1: [], 2: []}
    for d in range(len(rec.reverse)):
        cell = _Cell(im, f"{node.output[0] or node.name or 'lstm'}/d{d}", rec.batch, rec.hidden)
        f_act, g_act, h_act = rec.acts[d]
        proj = rec.projections(cell, d, {g: rec.wb[d][g] + rec.rb[d][g] for g in _LSTM_GATES})
        peep = None if rec.peephole is None or not rec.peephole[d].any() else \
            dict(zip("iof", np.split(rec.peephole[d], 3)))
        h, c = rec.initial(cell, 5, d), rec.initial(cell, 6, d)
        steps: list[str] = [""] * rec.steps
        for t in rec.order(d):
            rows = {g: rec.rows(cell, proj[g], t, f"t{t}/x{g}") for g in _LSTM_GATES}

            step = _LstmStep(cell, rec, d, t, rows, h, peep)
            i, f, g_ = step.gate("i", f_act, c), step.gate("f", f_act, c), step.gate("c", g_act)
            ig = cell.binary("MUL", i, g_, f"t{t}/ig")
            c = ig if c is None else cell.binary("ADD", cell.binary("MUL", f, c, f"t{t}/fc"), ig, f"t{t}/C")
            o = step.gate("o", f_act, c)
            h = cell.binary("MUL", o, cell.act(h_act, c, f"t{t}/hC"), f"t{t}/H")
            steps[t] = h
        cell.share_grids()
        hs.append(steps)
        assert h is not None and c is not None   # steps >= 1: checked by onnx_shape
        last[1].append(h)
        last[2].append(c)
    rec.write_outputs(hs, last)


@onnx("GRU")
def _onnx_gru(im, node, attrs, where):
    rec = _Recurrence(im, node, attrs, where, _GRU_GATES, ["Sigmoid", "Tanh"])
    before_reset = bool(attrs.get("linear_before_reset", 0))
    hs: list[list[str]] = []
    last: dict[int, list[str]] = {1: []}
    for d in range(len(rec.reverse)):
        cell = _Cell(im, f"{node.output[0] or node.name or 'gru'}/d{d}", rec.batch, rec.hidden)
        f_act, g_act = rec.acts[d]
        wb, rb = rec.wb[d], rec.rb[d]
        biases = dict(z=wb["z"] + rb["z"], r=wb["r"] + rb["r"], h=wb["h"] if before_reset else wb["h"] + rb["h"])
        proj = rec.projections(cell, d, biases)
        h = rec.initial(cell, 5, d)
        steps: list[str] = [""] * rec.steps
        for t in rec.order(d):
            rows = {g: rec.rows(cell, proj[g], t, f"t{t}/x{g}") for g in _GRU_GATES}
            z = cell.act(f_act, _gate(cell, rec, rows["z"], h, rec.r[d]["z"], f"t{t}/z"), f"t{t}/z")
            r = cell.act(f_act, _gate(cell, rec, rows["r"], h, rec.r[d]["r"], f"t{t}/r"), f"t{t}/r")
            if before_reset:
                hr = cell.fc(h, rec.r[d]["h"], rb["h"], f"t{t}/hh", rec.batch) if h is not None else \
                    cell.const(f"t{t}/rbh", np.broadcast_to(rb["h"], (rec.batch, rec.hidden)))
                pre = cell.binary("ADD", rows["h"], cell.binary("MUL", r, hr, f"t{t}/rh"), f"t{t}/h_sum")
            elif h is not None:
                rh = cell.binary("MUL", r, h, f"t{t}/rh")
                pre = cell.binary("ADD", rows["h"], cell.fc(rh, rec.r[d]["h"], None, f"t{t}/hh", rec.batch),
                                  f"t{t}/h_sum")
            else:
                pre = rows["h"]
            cand = cell.act(g_act, pre, f"t{t}/hcand")
            if h is None:   # H = cand - z cand
                h = cell.binary("SUB", cand, cell.binary("MUL", z, cand, f"t{t}/zc"), f"t{t}/H")
            else:           # H = cand + z (H_prev - cand)
                diff = cell.binary("SUB", h, cand, f"t{t}/diff")
                h = cell.binary("ADD", cand, cell.binary("MUL", z, diff, f"t{t}/zd"), f"t{t}/H")
            steps[t] = h
        cell.share_grids()
        hs.append(steps)
        assert h is not None
        last[1].append(h)
    rec.write_outputs(hs, last)


@onnx("RNN")
def _onnx_rnn(im, node, attrs, where):
    rec = _Recurrence(im, node, attrs, where, _RNN_GATES, ["Tanh"])
    hs: list[list[str]] = []
    last: dict[int, list[str]] = {1: []}
    for d in range(len(rec.reverse)):
        cell = _Cell(im, f"{node.output[0] or node.name or 'rnn'}/d{d}", rec.batch, rec.hidden)
        (act,) = rec.acts[d]
        proj = rec.projections(cell, d, {"t": rec.wb[d]["t"] + rec.rb[d]["t"]})
        h = rec.initial(cell, 5, d)
        steps: list[str] = [""] * rec.steps
        for t in rec.order(d):
            rows = rec.rows(cell, proj["t"], t, f"t{t}/xt")
            h = cell.act(act, _gate(cell, rec, rows, h, rec.r[d]["t"], f"t{t}/t"), f"t{t}/H")
            steps[t] = h
        cell.share_grids()
        hs.append(steps)
        assert h is not None
        last[1].append(h)
    rec.write_outputs(hs, last)
