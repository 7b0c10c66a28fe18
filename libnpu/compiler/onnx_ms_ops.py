"""onnxruntime's own operators (``com.microsoft``, QLinear*) rewritten as the ONNX operators they compute.

Users often ship ONNX files saved after onnxruntime's graph optimizations
(``SessionOptions.optimized_model_filepath``) or quantized by ``quantize_static`` in the
QOperator format. Such files hold onnxruntime's contrib operators, each with documented
semantics in terms of ONNX ones (onnxruntime's ContribOperators.md). :func:`lower_ms_ops`
rewrites each as those ONNX operators, which the importer then takes as it takes any model
(``GELU`` recognized by :mod:`~libnpu.compiler.gelu_fusion`, a QDQ pattern by
:mod:`~libnpu.compiler.qdq_import`):

* ``FusedConv`` (X, W, B, Z): ``act(Conv(X, W, B) + Z)``; ``FusedGemm``: ``act(Gemm)``, the
  activation one of Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid with its
  ``activation_params`` / ``activation_alpha`` / ``activation_beta``;
* ``NhwcConv`` / ``NhwcFusedConv`` (X, Y NHWC, W ``[M, kH, kW, C / group]``): ``Conv``
  (and its activation) between two transposes; ``FusedMatMul``: ``alpha * A' @ B'``
  (``transA`` / ``transB`` swap the last two axes; ``transBatch*`` stays with onnxruntime;
  ``alpha`` goes into a constant ``B``);
* ``QuickGelu``: ``x * sigmoid(alpha x)``; ``Gelu`` / ``BiasGelu`` (``Gelu(A + B)``): the erf
  form ``x * 0.5 * (1 + erf(x / sqrt 2))``; ``FastGelu`` (X, bias): the tanh form;
* ``SkipLayerNormalization`` (input, skip, gamma, beta, bias): ``LayerNorm(input + skip +
  bias)`` with its optional outputs (mean, inverse standard deviation, the sum);
  ``SkipSimplifiedLayerNormalization`` and ``SimplifiedLayerNormalization``: the RMS form
  ``x / sqrt(mean(x^2) + epsilon) * gamma``; ``LayerNormalization`` as onnxruntime writes it
  below opset 17 or with its optional outputs read: ReduceMean, Sub, Mul, Sqrt, Reciprocal;
  ``BiasAdd``: ``X + bias + skip``;
* the QOperator ops (``QLinearConv``, ``QLinearMatMul`` of ONNX; ``QLinearAdd``,
  ``QLinearMul``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearConcat``,
  ``QLinearAveragePool``, ``QLinearGlobalAveragePool``, ``QLinearSoftmax``, ``QGemm`` of
  ``com.microsoft``):
  ``DequantizeLinear`` of each quantized input, the float operator, ``QuantizeLinear`` on the
  output's grid (an int32 bias dequantized with ``x_scale * w_scale``); the 8-bit data
  movement onnxruntime leaves between them (Flatten, Reshape, Transpose, MaxPool...) the same
  way on the grid it keeps (and the int8 moves tf2onnx leaves between a QuantizeLinear and its
  DequantizeLinear in a QDQ file). The QDQ import then keeps every grid the file chose;
* what onnxruntime makes of a ``quantize_dynamic`` model: ``DynamicQuantizeMatMul`` (A, int8
  B, its scale and zero point, bias) and ``MatMulIntegerToFloat`` of a
  ``DynamicQuantizeLinear``'s codes by int8 B become the float ``MatMul`` (+ bias) on the
  dequantized weights, the float model the file stands for, as
  :mod:`~libnpu.compiler.dynamic_quant` makes of the unfused pattern.

A node this module cannot rewrite exactly (another operator, an activation or attribute it
does not know) is left as it is: it runs with onnxruntime on the host, its reason saying so
(the host model keeps the file's opset imports, ``com.microsoft``'s among them).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["MS_DOMAIN", "LOWERED", "Lowered", "lower_ms_ops", "not_lowered_reason"]

MS_DOMAIN = "com.microsoft"
_ONNX = ("", "ai.onnx")
_MOVES = frozenset({"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool", "Slice", "Split",
                    "Identity"})
_ACTIVATIONS = frozenset({"Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid"})
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@dataclass
class Lowered:
    """The rewritten model, and each of its nodes' index in the model given."""
    model: onnx.ModelProto
    origins: list[int]


class _Rewrite:
    """The new nodes of one pass: fresh names, constants, the ranks and grids known."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 13)
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.ranks: dict[str, int] = {n: a.ndim for n, a in self.consts.items()}
        self.widths: dict[str, int] = {}       # a value's last dimension, where known
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            if vi.type.tensor_type.HasField("shape"):
                dims = vi.type.tensor_type.shape.dim
                self.ranks[vi.name] = len(dims)
                if dims and dims[-1].HasField("dim_value"):
                    self.widths[vi.name] = dims[-1].dim_value
        self.names = {v for n in model.graph.node for v in [*n.input, *n.output]} | set(self.consts) \
            | {i.name for i in model.graph.input}
        self.new_consts: list[onnx.TensorProto] = []
        # a quantized value -> the names of its scale and zero point (QOperator files)
        self.grids: dict[str, tuple[str, str]] = {}
        # a DynamicQuantizeLinear's codes -> the float value, its run's scale and zero point
        self.codes: dict[str, tuple[str, str, str]] = {}
        self.nodes: list[onnx.NodeProto] = []

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def const(self, base: str, value) -> str:
        name = self.fresh(base)
        data = np.asarray(value, np.float32) if not isinstance(value, np.ndarray) else value
        self.new_consts.append(numpy_helper.from_array(data, name))
        self.consts[name] = data
        self.ranks[name] = data.ndim
        return name

    def add(self, op: str, inputs: list[str], out: str | None = None, base: str = "", **attrs) -> str:
        """One ONNX node; its (first) output's name."""
        out = out or self.fresh(base or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def rank(self, name: str) -> int | None:
        return self.ranks.get(name)

    def width(self, name: str) -> int | None:
        return self.consts[name].shape[-1] if name in self.consts else self.widths.get(name)

    def reduce_mean(self, x: str, axes: list[int], base: str) -> str:
        if self.opset >= 18:
            return self.add("ReduceMean", [x, self.const(f"{base}_axes", np.array(axes, np.int64))], base=base,
                            keepdims=1)
        return self.add("ReduceMean", [x], base=base, axes=axes, keepdims=1)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _text(value, default: str = "") -> str:
    return value.decode() if isinstance(value, bytes) else (value if value is not None else default)


def _input(node: onnx.NodeProto, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def _activation(rw: _Rewrite, x: str, kind: str, params: list[float], out: str) -> str | None:
    """``kind`` applied to ``x`` into ``out``; None for an activation not known here."""
    if kind in ("Relu", "Tanh", "Sigmoid"):
        return rw.add(kind, [x], out)
    if kind == "LeakyRelu":
        return rw.add(kind, [x], out, alpha=float(params[0]) if params else 0.01)
    if kind == "HardSigmoid":
        alpha, beta = (list(params) + [0.2, 0.5][len(params):])[:2]
        return rw.add(kind, [x], out, alpha=float(alpha), beta=float(beta))
    if kind == "Clip" and len(params) == 2:
        if rw.opset < 11:
            return rw.add(kind, [x], out, min=float(params[0]), max=float(params[1]))
        return rw.add(kind, [x, rw.const(f"{out}_min", np.float32(params[0])),
                             rw.const(f"{out}_max", np.float32(params[1]))], out)
    return None


def _fused_conv(rw: _Rewrite, node, attrs) -> bool:
    kind = _text(attrs.get("activation"), "")
    if kind and kind not in _ACTIVATIONS:
        return False
    conv = {k: v for k, v in attrs.items() if k in _CONV_ATTRS}
    out = node.output[0]
    z = _input(node, 3)
    y = rw.add("Conv", [i for i in node.input[:3]], out if not (kind or z) else None, base=f"{out}_conv", **conv)
    if z:
        y = rw.add("Add", [y, z], out if not kind else None, base=f"{out}_sum")
    return not kind or _activation(rw, y, kind, list(attrs.get("activation_params", [])), out) is not None


def _fused_gemm(rw: _Rewrite, node, attrs) -> bool:
    kind = _text(attrs.get("activation"), "")
    if kind and kind not in _ACTIVATIONS:
        return False
    gemm = {k: attrs[k] for k in ("alpha", "beta", "transA", "transB") if k in attrs}
    out = node.output[0]
    y = rw.add("Gemm", list(node.input), out if not kind else None, base=f"{out}_gemm", **gemm)
    if kind:
        params = [attrs[k] for k in ("activation_alpha", "activation_beta") if k in attrs]
        if kind == "Clip":
            params = [attrs.get("activation_alpha", -np.inf), attrs.get("activation_beta", np.inf)]
        return _activation(rw, y, kind, [float(p) for p in params], out) is not None
    return True


def _nhwc_conv(rw: _Rewrite, node, attrs) -> bool:
    """NhwcConv / NhwcFusedConv: X and Y NHWC, W [M, kH, kW, C / group]."""
    kind = _text(attrs.get("activation"), "")
    w = node.input[1]
    if rw.rank(node.input[0]) != 4 or rw.rank(w) != 4 or (kind and kind not in _ACTIVATIONS):
        return False
    out = node.output[0]
    x = rw.add("Transpose", [node.input[0]], base=f"{out}_nchw", perm=[0, 3, 1, 2])
    w = rw.const(f"{w}_oihw", np.ascontiguousarray(rw.consts[w].transpose(0, 3, 1, 2))) if w in rw.consts \
        else rw.add("Transpose", [w], base=f"{w}_oihw", perm=[0, 3, 1, 2])
    y = rw.add("Conv", [x, w, *node.input[2:3]], base=f"{out}_conv",
               **{k: v for k, v in attrs.items() if k in _CONV_ATTRS})
    if kind and (y := _activation(rw, y, kind, list(attrs.get("activation_params", [])),
                                  rw.fresh(f"{out}_act"))) is None:
        return False
    rw.add("Transpose", [y], out, perm=[0, 2, 3, 1])
    return True


def _swap_last(rw: _Rewrite, name: str, base: str) -> str | None:
    rank = rw.rank(name)
    if rank is None or rank < 2:
        return None
    if name in rw.consts:
        return rw.const(base, np.ascontiguousarray(np.swapaxes(rw.consts[name], -1, -2)))
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return rw.add("Transpose", [name], base=base, perm=perm)


def _fused_matmul(rw: _Rewrite, node, attrs) -> bool:
    if attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0):
        return False
    a, b = node.input[0], node.input[1]
    out = node.output[0]
    if attrs.get("transA", 0) and (a := _swap_last(rw, a, f"{out}_at")) is None:
        return False
    if attrs.get("transB", 0) and (b := _swap_last(rw, b, f"{out}_bt")) is None:
        return False
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0 and b in rw.consts:     # into the weights: no product of its own to quantize
        b, alpha = rw.const(f"{out}_b_alpha", (rw.consts[b] * np.float32(alpha)).astype(rw.consts[b].dtype)), 1.0
    y = rw.add("MatMul", [a, b], out if alpha == 1.0 else None, base=f"{out}_matmul")
    if alpha != 1.0:
        rw.add("Mul", [y, rw.const(f"{out}_alpha", np.float32(alpha))], out)
    return True


def _quick_gelu(rw: _Rewrite, node, attrs) -> bool:
    x, out = node.input[0], node.output[0]
    alpha = float(attrs.get("alpha", 1.702))
    scaled = x if alpha == 1.0 else rw.add("Mul", [x, rw.const(f"{out}_alpha", np.float32(alpha))], base=f"{out}_ax")
    gate = rw.add("Sigmoid", [scaled], base=f"{out}_gate")
    rw.add("Mul", [x, gate], out)
    return True


def _gelu_erf(rw: _Rewrite, x: str, out: str) -> None:
    """PyTorch's spelling of GELU, which :mod:`~libnpu.compiler.gelu_fusion` recognizes."""
    d = rw.add("Div", [x, rw.const(f"{out}_sqrt2", np.float32(math.sqrt(2.0)))], base=f"{out}_div")
    e = rw.add("Add", [rw.add("Erf", [d], base=f"{out}_erf"), rw.const(f"{out}_one", np.float32(1.0))],
               base=f"{out}_erf1")
    rw.add("Mul", [rw.add("Mul", [x, e], base=f"{out}_xe"), rw.const(f"{out}_half", np.float32(0.5))], out)


def _biased(rw: _Rewrite, node, out: str) -> str:
    bias = _input(node, 1)
    return rw.add("Add", [node.input[0], bias], base=f"{out}_biased") if bias else node.input[0]


def _gelu(rw: _Rewrite, node, attrs) -> bool:
    _gelu_erf(rw, _biased(rw, node, node.output[0]) if node.op_type == "BiasGelu" else node.input[0], node.output[0])
    return True


def _fast_gelu(rw: _Rewrite, node, attrs) -> bool:
    out = node.output[0]
    x = _biased(rw, node, out)
    cube = rw.add("Mul", [rw.add("Mul", [x, x], base=f"{out}_x2"), x], base=f"{out}_x3")
    inner = rw.add("Add", [x, rw.add("Mul", [cube, rw.const(f"{out}_c", np.float32(0.044715))], base=f"{out}_cx3")],
                   base=f"{out}_inner")
    t = rw.add("Tanh", [rw.add("Mul", [inner, rw.const(f"{out}_k", np.float32(math.sqrt(2 / math.pi)))],
                               base=f"{out}_scaled")], base=f"{out}_tanh")
    t1 = rw.add("Add", [t, rw.const(f"{out}_one", np.float32(1.0))], base=f"{out}_tanh1")
    rw.add("Mul", [rw.add("Mul", [x, rw.const(f"{out}_half", np.float32(0.5))], base=f"{out}_xh"), t1], out)
    return True


def _norm(rw: _Rewrite, x: str, gamma: str, beta: str, axis: int, eps: float, outs: list[str],
          simplified: bool) -> bool:
    """LayerNorm (or its RMS form) of ``x`` over the axes from ``axis``: ``outs`` are the
    output, the mean and the inverse standard deviation ("" where nobody reads it)."""
    rank = rw.rank(x)
    if rank is None:
        return False
    axes = list(range(axis % rank, rank))
    out, mean_out, inv_out = (list(outs) + ["", "", ""])[:3]
    base = out
    centred = x
    if not simplified:
        mean = rw.reduce_mean(x, axes, f"{base}_mean")
        if mean_out:
            rw.add("Identity", [mean], mean_out)
        centred = rw.add("Sub", [x, mean], base=f"{base}_centred")
    variance = rw.reduce_mean(rw.add("Mul", [centred, centred], base=f"{base}_squared"), axes, f"{base}_variance")
    std = rw.add("Sqrt", [rw.add("Add", [variance, rw.const(f"{base}_epsilon", np.float32(eps))],
                                 base=f"{base}_shifted")], base=f"{base}_std")
    inverse = rw.add("Reciprocal", [std], inv_out or None, base=f"{base}_inverse")
    normalized = rw.add("Mul", [centred, inverse], base=f"{base}_normalized")
    rw.add("Mul", [normalized, gamma], out if not beta else None, base=f"{base}_scaled")
    if beta:
        rw.add("Add", [rw.nodes[-1].output[0], beta], out)
    return True


def _layer_norm(rw: _Rewrite, node, attrs) -> bool:
    """LayerNormalization / SimplifiedLayerNormalization (onnxruntime's, in ONNX's domain)."""
    simplified = node.op_type == "SimplifiedLayerNormalization"
    if simplified and any(node.output[1:]):
        return False
    if not simplified and rw.opset >= 17 and not any(node.output[1:]):
        return False        # ONNX's own operator: the importer takes it
    return _norm(rw, node.input[0], node.input[1], "" if simplified else _input(node, 2),
                 int(attrs.get("axis", -1)), float(attrs.get("epsilon", 1e-5)), list(node.output), simplified)


def _skip_layer_norm(rw: _Rewrite, node, attrs) -> bool:
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    outs = list(node.output[:3])
    if simplified and len(outs) > 1 and outs[1]:
        return False        # the RMS form has no mean
    out = node.output[0]
    total = node.output[3] if len(node.output) > 3 else ""
    bias = _input(node, 3 if simplified else 4)
    s = rw.add("Add", list(node.input[:2]), base=f"{out}_sum")
    if bias:
        s = rw.add("Add", [s, bias], base=f"{out}_sum_bias")
    if total:
        rw.add("Identity", [s], total)
    if (rank := rw.rank(node.input[0])) is not None:
        rw.ranks[s] = rank
    eps = float(attrs.get("epsilon", 1e-12))
    beta = "" if simplified else _input(node, 3)
    if not simplified and rw.opset >= 17 and not any(outs[1:]):
        rw.add("LayerNormalization", [s, node.input[2], *([beta] if beta else [])], out, axis=-1, epsilon=eps)
        return True
    return _norm(rw, s, node.input[2], beta, -1, eps, outs, simplified)


def _bias_add(rw: _Rewrite, node, attrs) -> bool:
    out = node.output[0]
    rw.add("Add", [rw.add("Add", node.input[:2], base=f"{out}_biased"), node.input[2]], out)
    return True


# QOperator -----------------------------------------------------------------------------

def _dq(rw: _Rewrite, x: str, scale: str, zero: str, base: str, axis: int | None = None) -> str:
    attrs = {"axis": axis} if axis is not None else {}
    return rw.add("DequantizeLinear", [x, scale, zero] if zero else [x, scale], base=f"{base}_dq", **attrs)


def _q(rw: _Rewrite, y: str, scale: str, zero: str, out: str) -> None:
    rw.add("QuantizeLinear", [y, scale, zero] if zero else [y, scale], out)
    rw.grids[out] = (scale, zero)


def _weight_axis(rw: _Rewrite, scale: str, axis: int) -> int | None:
    """The axis of a per-channel weight scale, None for one per tensor."""
    return axis if scale in rw.consts and rw.consts[scale].size > 1 else None


def _float_bias(rw: _Rewrite, bias: str, scales: list[str], base: str) -> str:
    """An int32 bias quantized with the product of ``scales`` (zero point 0), as float."""
    if bias not in rw.consts or any(s not in rw.consts for s in scales):
        return ""
    value = rw.consts[bias].astype(np.float64)
    for s in scales:
        value = value * rw.consts[s].astype(np.float64).reshape(-1)
    return rw.const(f"{base}_float", value.astype(np.float32))


def _qlinear_conv(rw: _Rewrite, node, attrs) -> bool:
    x, xs, xz, w, ws, wz, ys, yz = (_input(node, k) for k in range(8))
    out, bias = node.output[0], _input(node, 8)
    fbias = _float_bias(rw, bias, [xs, ws], out) if bias else ""
    if bias and not fbias:
        return False
    inputs = [_dq(rw, x, xs, xz, f"{out}_x"), _dq(rw, w, ws, wz, f"{out}_w", _weight_axis(rw, ws, 0))]
    y = rw.add("Conv", inputs + ([fbias] if fbias else []), base=f"{out}_conv",
               **{k: v for k, v in attrs.items() if k in _CONV_ATTRS})
    _q(rw, y, ys, yz, out)
    return True


def _qlinear_matmul(rw: _Rewrite, node, attrs) -> bool:
    a, a_s, az, b, bs, bz, ys, yz = (_input(node, k) for k in range(8))
    out = node.output[0]
    rank = rw.rank(b)
    if rank is None:
        return False
    y = rw.add("MatMul", [_dq(rw, a, a_s, az, f"{out}_a"), _dq(rw, b, bs, bz, f"{out}_b",
                                                                _weight_axis(rw, bs, rank - 1))], base=f"{out}_mm")
    _q(rw, y, ys, yz, out)
    return True


def _qgemm(rw: _Rewrite, node, attrs) -> bool:
    a, a_s, az, b, bs, bz, c, ys, yz = (_input(node, k) for k in range(9))
    out = node.output[0]
    trans_b = int(attrs.get("transB", 0))
    alpha = float(attrs.get("alpha", 1.0))
    fc = _float_bias(rw, c, [a_s, bs], out) if c else ""
    if c and not fc:
        return False
    gemm = dict(alpha=alpha, transA=int(attrs.get("transA", 0)), transB=trans_b)
    inputs = [_dq(rw, a, a_s, az, f"{out}_a"),
              _dq(rw, b, bs, bz, f"{out}_b", _weight_axis(rw, bs, 0 if trans_b else 1))]
    y = rw.add("Gemm", inputs + ([fc] if fc else []), None if ys else out, base=f"{out}_gemm", **gemm)
    if ys:
        _q(rw, y, ys, yz, out)
    return True


def _qlinear_binary(rw: _Rewrite, node, attrs) -> bool:
    a, a_s, az, b, bs, bz, ys, yz = (_input(node, k) for k in range(8))
    out = node.output[0]
    op = node.op_type.removeprefix("QLinear")
    y = rw.add(op, [_dq(rw, a, a_s, az, f"{out}_a"), _dq(rw, b, bs, bz, f"{out}_b")], base=f"{out}_{op.lower()}")
    _q(rw, y, ys, yz, out)
    return True


def _qlinear_unary(rw: _Rewrite, node, attrs) -> bool:
    x, xs, xz, ys, yz = (_input(node, k) for k in range(5))
    out = node.output[0]
    op = node.op_type.removeprefix("QLinear")
    kept = {k: v for k, v in attrs.items() if k != "channels_last"}
    if attrs.get("channels_last", 0):
        return False
    y = rw.add(op, [_dq(rw, x, xs, xz, f"{out}_x")], base=f"{out}_{op.lower()}", **kept)
    _q(rw, y, ys, yz, out)
    return True


def _qlinear_concat(rw: _Rewrite, node, attrs) -> bool:
    ys, yz, rest = node.input[0], node.input[1], list(node.input[2:])
    if len(rest) % 3:
        return False
    out = node.output[0]
    parts = [_dq(rw, rest[k], rest[k + 1], rest[k + 2], f"{out}_{k // 3}") for k in range(0, len(rest), 3)]
    _q(rw, rw.add("Concat", parts, base=f"{out}_concat", axis=int(attrs.get("axis", 0))), ys, yz, out)
    return True


def _heads(rw: _Rewrite, x: str, heads: int, perm: list[int], base: str) -> str:
    """[B, S, heads * h] as [B, heads, S, h] (``perm`` [0, 2, 1, 3]) or [B, heads, h, S]."""
    split = rw.add("Reshape", [x, rw.const(f"{base}_shape", np.array([0, 0, heads, -1], np.int64))],
                   base=f"{base}_split")
    return rw.add("Transpose", [split], base=f"{base}_heads", perm=perm)


def _scaled_attention(rw: _Rewrite, q: str, k: str, v: str, heads: int, scale: float, out: str) -> None:
    """``softmax(q k^T * scale) v`` per head, the heads joined again: [B, S, heads * h_v]."""
    scores = rw.add("MatMul", [_heads(rw, q, heads, [0, 2, 1, 3], f"{out}_q"),
                               _heads(rw, k, heads, [0, 2, 3, 1], f"{out}_k")], base=f"{out}_scores")
    if scale != 1.0:
        scores = rw.add("Mul", [scores, rw.const(f"{out}_scale", np.float32(scale))], base=f"{out}_scaled")
    weights = rw.add("Softmax", [scores], base=f"{out}_weights", axis=-1)
    context = rw.add("MatMul", [weights, _heads(rw, v, heads, [0, 2, 1, 3], f"{out}_v")], base=f"{out}_context")
    joined = rw.add("Transpose", [context], base=f"{out}_joined", perm=[0, 2, 1, 3])
    rw.add("Reshape", [joined, rw.const(f"{out}_shape", np.array([0, 0, -1], np.int64))], out)


def _attention(rw: _Rewrite, node, attrs) -> bool:
    """Attention (input, weights [D, 3 H] packed Q K V, bias): no mask, past, relative bias,
    causal flag or unequal ``qkv_hidden_sizes`` (those stay with onnxruntime)."""
    x, w, bias = (_input(node, k) for k in range(3))
    heads = int(attrs.get("num_heads", 0))
    if any(node.input[3:]) or any(node.output[1:]) or attrs.get("unidirectional", 0) or heads <= 0 \
            or attrs.get("qkv_hidden_sizes") or rw.rank(x) != 3 or w not in rw.consts \
            or (bias and bias not in rw.consts) or rw.consts[w].shape[1] % (3 * heads):
        return False
    out = node.output[0]
    hidden = rw.consts[w].shape[1] // 3
    scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(hidden // heads)
    parts = []
    for k, name in enumerate("qkv"):
        factor = np.float32(scale if name == "q" else 1.0)    # the scale into Q's weights
        weight = rw.const(f"{out}_w{name}", rw.consts[w][:, k * hidden:(k + 1) * hidden] * factor)
        y = rw.add("MatMul", [x, weight], base=f"{out}_{name}")
        if bias:
            y = rw.add("Add", [y, rw.const(f"{out}_b{name}", rw.consts[bias][k * hidden:(k + 1) * hidden] * factor)],
                       base=f"{out}_{name}_biased")
        parts.append(y)
    _scaled_attention(rw, *parts, heads, 1.0, out)
    return True


def _multi_head_attention(rw: _Rewrite, node, attrs) -> bool:
    """MultiHeadAttention of 3-D query, key and value (bias allowed): no mask, past,
    relative bias or causal flag (those stay with onnxruntime)."""
    q, k, v = (_input(node, i) for i in range(3))
    heads = int(attrs.get("num_heads", 0))
    if any(node.input[4:]) or any(node.output[1:]) or attrs.get("unidirectional", 0) or heads <= 0 \
            or not (k and v) or any(rw.rank(n) != 3 for n in (q, k, v)):
        return False
    out = node.output[0]
    bias = _input(node, 3)
    if bias:
        if bias not in rw.consts:
            return False
        third = rw.consts[bias].shape[0] // 3
        q, k, v = (rw.add("Add", [n, rw.const(f"{out}_b{i}", rw.consts[bias][i * third:(i + 1) * third])],
                          base=f"{out}_in{i}") for i, n in enumerate((q, k, v)))
    scale = float(attrs.get("scale", 0.0))
    if not scale:
        width = rw.width(node.input[0])
        if width is None:
            return False
        scale = 1.0 / math.sqrt(width // heads)
    _scaled_attention(rw, q, k, v, heads, scale, out)
    return True


def _qlinear_softmax(rw: _Rewrite, node, attrs) -> bool:
    x, xs, xz, ys, yz = (_input(node, k) for k in range(5))
    axis, rank = int(attrs.get("axis", -1)), rw.rank(x)
    if int(attrs.get("opset", 13)) < 13 and (rank is None or axis % rank != rank - 1):
        return False        # before opset 13 Softmax flattens the axes from ``axis`` on
    out = node.output[0]
    _q(rw, rw.add("Softmax", [_dq(rw, x, xs, xz, f"{out}_x")], base=f"{out}_softmax", axis=axis), ys, yz, out)
    return True


def _float_weights(rw: _Rewrite, b: str, scale: str, zero: str, base: str) -> str:
    """A constant int8 / uint8 matrix ``b`` dequantized with its scale and zero point (one
    per tensor or per column), as a float constant; "" when any is not a constant."""
    if b not in rw.consts or scale not in rw.consts or (zero and zero not in rw.consts):
        return ""
    codes = rw.consts[b].astype(np.float32)
    zeros = rw.consts[zero].astype(np.float32) if zero else np.float32(0)
    return rw.const(f"{base}_float", ((codes - zeros) * rw.consts[scale].astype(np.float32)).astype(np.float32))


def _biased_matmul(rw: _Rewrite, a: str, w: str, bias: str, out: str) -> None:
    y = rw.add("MatMul", [a, w], None if bias else out, base=f"{out}_matmul")
    if bias:
        rw.add("Add", [y, bias], out)


def _dynamic_quantize_matmul(rw: _Rewrite, node, attrs) -> bool:
    """DynamicQuantizeMatMul (A float, B int8, b_scale, b_zero_point, bias): the float
    MatMul it stands for (the chip's grids are fixed at calibration, as
    :mod:`~libnpu.compiler.dynamic_quant` says)."""
    a, b, bs, bz, bias = (_input(node, k) for k in range(5))
    w = _float_weights(rw, b, bs, bz, node.output[0])
    if not w:
        return False
    _biased_matmul(rw, a, w, bias, node.output[0])
    return True


def _matmul_integer_to_float(rw: _Rewrite, node, attrs) -> bool:
    """MatMulIntegerToFloat of a DynamicQuantizeLinear's codes (A, its scale and zero point)
    by constant int8 B: the float MatMul of the value quantized, as above."""
    a, b, a_s, bs, az, bz, bias = (_input(node, k) for k in range(7))
    source = rw.codes.get(a)
    if source is None or a_s != source[1] or (az and az != source[2]):
        return False
    w = _float_weights(rw, b, bs, bz, node.output[0])
    if not w:
        return False
    _biased_matmul(rw, source[0], w, bias, node.output[0])
    return True


def _q8_move(rw: _Rewrite, node, attrs) -> bool:
    """onnxruntime's 8-bit data movement between QOperator ops: the same op on the
    dequantized value, each output on the input's grid."""
    scale, zero = rw.grids[node.input[0]]
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    moved.input[0] = _dq(rw, node.input[0], scale, zero, node.output[0])
    for k, o in enumerate(node.output):
        moved.output[k] = rw.fresh(f"{o}_float") if o else ""
    rw.nodes.append(moved)
    for o, f in zip(node.output, moved.output):
        if o:
            _q(rw, f, scale, zero, o)
    return True


_Handler = Callable[[_Rewrite, onnx.NodeProto, dict], bool]

#: (domain, op type) -> its rewrite; the domain "" for onnxruntime's operators registered in ONNX's.
LOWERED: dict[tuple[str, str], _Handler] = {
    (MS_DOMAIN, "FusedConv"): _fused_conv, (MS_DOMAIN, "FusedGemm"): _fused_gemm,
    (MS_DOMAIN, "NhwcConv"): _nhwc_conv, (MS_DOMAIN, "NhwcFusedConv"): _nhwc_conv,
    (MS_DOMAIN, "FusedMatMul"): _fused_matmul,
    (MS_DOMAIN, "QuickGelu"): _quick_gelu, (MS_DOMAIN, "Gelu"): _gelu, (MS_DOMAIN, "BiasGelu"): _gelu,
    (MS_DOMAIN, "FastGelu"): _fast_gelu, (MS_DOMAIN, "SkipLayerNormalization"): _skip_layer_norm,
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): _skip_layer_norm, (MS_DOMAIN, "BiasAdd"): _bias_add,
    ("", "LayerNormalization"): _layer_norm, ("", "SimplifiedLayerNormalization"): _layer_norm,
    (MS_DOMAIN, "SimplifiedLayerNormalization"): _layer_norm,
    ("", "QLinearConv"): _qlinear_conv, ("", "QLinearMatMul"): _qlinear_matmul, (MS_DOMAIN, "QGemm"): _qgemm,
    (MS_DOMAIN, "QLinearAdd"): _qlinear_binary, (MS_DOMAIN, "QLinearMul"): _qlinear_binary,
    (MS_DOMAIN, "QLinearSigmoid"): _qlinear_unary, (MS_DOMAIN, "QLinearLeakyRelu"): _qlinear_unary,
    (MS_DOMAIN, "QLinearAveragePool"): _qlinear_unary, (MS_DOMAIN, "QLinearGlobalAveragePool"): _qlinear_unary,
    (MS_DOMAIN, "QLinearConcat"): _qlinear_concat, (MS_DOMAIN, "QLinearSoftmax"): _qlinear_softmax,
    (MS_DOMAIN, "Attention"): _attention, (MS_DOMAIN, "MultiHeadAttention"): _multi_head_attention,
    (MS_DOMAIN, "DynamicQuantizeMatMul"): _dynamic_quantize_matmul,
    (MS_DOMAIN, "MatMulIntegerToFloat"): _matmul_integer_to_float,
}


def _key(node: onnx.NodeProto) -> tuple[str, str]:
    return ("" if node.domain in _ONNX else node.domain, node.op_type)


def _wanted(model: onnx.ModelProto) -> bool:
    opset = next((o.version for o in model.opset_import if o.domain in _ONNX), 13)
    quantized = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and n.domain in _ONNX}
    return any(_key(n) in LOWERED and not (n.op_type == "LayerNormalization" and opset >= 17 and not any(n.output[1:]))
               or n.op_type in _MOVES and n.input and n.input[0] in quantized   # tf2onnx's int8 moves
               for n in model.graph.node)      # ONNX's own LayerNormalization: nothing to do


def _per_tensor(rw: _Rewrite, name: str) -> bool:
    """Whether quantized ``name``'s grid is one scale (a move keeps it; a per-axis grid
    would follow its axis)."""
    scale = rw.consts.get(rw.grids[name][0])
    return scale is not None and scale.size == 1


def lower_ms_ops(model: onnx.ModelProto) -> Lowered | None:
    """``model`` with onnxruntime's operators rewritten as ONNX ones (module docstring), each
    new node's index in ``model`` given; None when it has none. A pass rewrites what the
    ranks known so far allow; the next one sees the ranks ONNX infers through its result."""
    if not _wanted(model):
        return None
    origins = list(range(len(model.graph.node)))
    current = model
    for _ in range(len(model.graph.node) + 1):
        rw = _Rewrite(current)
        made: list[int] = []
        changed = False
        for k, node in enumerate(current.graph.node):
            before = len(rw.nodes)
            handler = LOWERED.get(_key(node))
            if handler is None and node.op_type in _MOVES and node.domain in _ONNX and node.input \
                    and node.input[0] in rw.grids and _per_tensor(rw, node.input[0]):
                handler = _q8_move
            if handler is not None and handler(rw, node, _attrs(node)):
                changed = True
            else:
                del rw.nodes[before:]
                rw.nodes.append(node)
                if node.op_type == "QuantizeLinear" and len(node.input) > 1:
                    rw.grids[node.output[0]] = (node.input[1], _input(node, 2))
                if node.op_type == "DynamicQuantizeLinear" and len(node.output) == 3:
                    rw.codes[node.output[0]] = (node.input[0], node.output[1], node.output[2])
            made += [origins[k]] * (len(rw.nodes) - before)
        if not changed:
            break
        current = _with_nodes(current, rw.nodes, rw.new_consts)
        origins = made
    return Lowered(current, origins) if current is not model else None


def _with_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto], consts: list[onnx.TensorProto]
                ) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(consts)
    return out


def not_lowered_reason(node: onnx.NodeProto) -> str:
    """Why a node of another domain than ONNX's is not imported for the chip (it runs on the
    host with onnxruntime when the fallback is on)."""
    if _key(node) in LOWERED:
        return (f"onnxruntime's {node.op_type} ({node.domain or 'ai.onnx'}) with these attributes or input "
                "ranks has no exact rewrite to ONNX operators: onnxruntime runs it")
    if node.domain.startswith(MS_DOMAIN):
        return f"onnxruntime's {node.op_type} ({node.domain}) is not lowered to the chip's operators"
    return f"custom op {node.op_type!r} (domain {node.domain}): the chip has no custom operators"
