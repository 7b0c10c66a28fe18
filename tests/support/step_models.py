"""Per-token decoder steps as PyTorch exports them (one call = one token), for the step-cost tests and benchmark.

:func:`gru_attention_step` is the seq2seq decoder of PyTorch's translation tutorial
(``AttnDecoderRNN``, Bahdanau attention): an int64 token looked up in an embedding
(Gather), additive attention of the previous hidden state over the encoder's outputs
(Linear + Linear, Tanh, Linear to one score per position, Softmax over the positions,
MatMul with the outputs), the embedding and the context concatenated into a GRU cell
(a GRU node with the state as its initial-state input, or the cell written out in
MatMul / Sigmoid / Tanh), the output Linear and LogSoftmax. Its latency is fixed costs
(host calls, chip jobs, input and output conversions), not multiply-adds.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh


def gru_attention_step(*, hidden: int = 128, positions: int = 32, vocab: int = 64, seed: int = 0,
                       spelled: bool = False, log_softmax: bool = True, masked: bool = False,
                       beam: int = 0) -> onnx.ModelProto:
    """Inputs ``token`` int64 [1, 1], ``hidden`` [1, 1, H], ``encoder`` [1, T, H] (and with
    ``masked`` ``mask`` bool [1, T], True at the encoder's padding); outputs ``logp`` [1, vocab]
    (log-probabilities, or probabilities when not ``log_softmax``) and ``hidden_out``
    [1, 1, H], the state the next step takes. ``spelled``: the GRU cell written out as
    ``torch.nn.GRUCell``'s formulas (r, z, n gates) instead of a GRU node. ``masked``: the
    scores of padded positions set to -1e10 before the softmax (``masked_fill``: Unsqueeze,
    Where). ``beam``: a beam search's first step, ``TopK`` of ``logp`` (outputs ``top_v``
    [1, beam] and ``top_i`` int64 [1, beam])."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    k = 1 / np.sqrt(hidden)

    def const(name: str, value: np.ndarray) -> str:
        inits.append(nh.from_array(np.asarray(value), name))
        return name

    def u(name: str, *shape: int) -> str:
        return const(name, rng.uniform(-k, k, shape).astype(np.float32))

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(h.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, name: str, n_in: int, n_out: int) -> str:
        product = node("MatMul", [x, u(f"{name}_w", n_in, n_out)], f"{name}_mm")
        return node("Add", [product, u(f"{name}_b", n_out)], name)

    emb = node("Gather", [const("embedding", rng.standard_normal((vocab, hidden)).astype(np.float32)), "token"],
               "embedded", axis=0)                                               # [1, 1, H]
    query = linear("hidden", "wa", hidden, hidden)                              # [1, 1, H]
    keys = linear("encoder", "ua", hidden, hidden)                              # [1, T, H]
    energy = node("Tanh", [node("Add", [query, keys], "qk")], "energy")
    scores = node("Transpose", [linear(energy, "va", hidden, 1)], "scores", perm=[0, 2, 1])   # [1, 1, T]
    if masked:
        padded = node("Unsqueeze", ["mask", const("mask_axes", np.array([1], np.int64))], "padded")
        scores = node("Where", [padded, const("masked_score", np.array(-1e10, np.float32)), scores], "scores_masked")
    weights = node("Softmax", [scores], "attention", axis=-1)
    context = node("MatMul", [weights, "encoder"], "context")                    # [1, 1, H]
    x = node("Concat", [emb, context], "gru_in", axis=-1)                       # [1, 1, 2H]
    if spelled:
        state = node("Reshape", ["hidden", const("flat", np.array([1, hidden], np.int64))], "h_flat")
        xf = node("Reshape", [x, const("flat2", np.array([1, 2 * hidden], np.int64))], "x_flat")
        gi = [linear(xf, f"i{g}", 2 * hidden, hidden) for g in "rzn"]
        gh = [linear(state, f"h{g}", hidden, hidden) for g in "rzn"]
        r = node("Sigmoid", [node("Add", [gi[0], gh[0]], "r_pre")], "r")
        z = node("Sigmoid", [node("Add", [gi[1], gh[1]], "z_pre")], "z")
        n = node("Tanh", [node("Add", [gi[2], node("Mul", [r, gh[2]], "rn")], "n_pre")], "n")
        # h' = (1 - z) * n + z * h = n + z * (h - n)
        new = node("Add", [n, node("Mul", [z, node("Sub", [state, n], "h_minus_n")], "zd")], "h_new")
        out = new
        node("Reshape", [new, const("state_shape", np.array([1, 1, hidden], np.int64))], "hidden_out")
    else:
        w, r_, b = (u("gru_W", 1, 3 * hidden, 2 * hidden), u("gru_R", 1, 3 * hidden, hidden),
                    u("gru_B", 1, 6 * hidden))
        seq = node("Transpose", [x], "gru_seq", perm=[1, 0, 2])                  # [T=1, B=1, 2H]
        nodes.append(h.make_node("GRU", [seq, w, r_, b, "", "hidden"], ["gru_y", "hidden_out"],
                                 name="gru", hidden_size=hidden, linear_before_reset=1))
        out = node("Reshape", ["gru_y", const("flat", np.array([1, hidden], np.int64))], "gru_flat")
    logits = linear(out, "out", hidden, vocab)
    node("LogSoftmax" if log_softmax else "Softmax", [logits], "logp", axis=-1)
    top = []
    if beam:
        nodes.append(h.make_node("TopK", ["logp", const("beam", np.array([beam], np.int64))], ["top_v", "top_i"],
                                 name="top", axis=-1))
        top = [h.make_tensor_value_info("top_v", TensorProto.FLOAT, [1, beam]),
               h.make_tensor_value_info("top_i", TensorProto.INT64, [1, beam])]
    graph = h.make_graph(
        nodes, "gru_attention_step",
        [h.make_tensor_value_info("token", TensorProto.INT64, [1, 1]),
         h.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 1, hidden]),
         h.make_tensor_value_info("encoder", TensorProto.FLOAT, [1, positions, hidden])]
        + ([h.make_tensor_value_info("mask", TensorProto.BOOL, [1, positions])] if masked else []),
        [h.make_tensor_value_info("logp", TensorProto.FLOAT, [1, vocab]),
         h.make_tensor_value_info("hidden_out", TensorProto.FLOAT, [1, 1, hidden]), *top], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def step_feeds(model: onnx.ModelProto, count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """``count`` feeds as a decoding loop gives them: tokens from the vocabulary, states of
    a GRU (in -1..1, smooth), encoder outputs of a bidirectional GRU encoder (tanh-bounded),
    the padding mask of a source of random length."""
    rng = np.random.default_rng(seed)
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim) for vi in model.graph.input}
    vocab = next(i for i in model.graph.initializer if i.name == "embedding").dims[0]
    feeds = []
    for _ in range(count):
        t = np.linspace(0, 1, shapes["encoder"][1])[:, None]
        freq = rng.uniform(1, 6, (1, shapes["encoder"][2]))
        enc = np.tanh(1.5 * np.sin(2 * np.pi * freq * t + rng.uniform(0, 6.3, freq.shape))
                      + rng.normal(0, .3, (len(t), freq.shape[1])))
        feed = {"token": rng.integers(0, vocab, shapes["token"], dtype=np.int64),
                "hidden": np.tanh(rng.normal(0, .7, shapes["hidden"])).astype(np.float32),
                "encoder": enc[None].astype(np.float32)}
        if "mask" in shapes:                   # a name of some length, padded to T
            feed["mask"] = (np.arange(shapes["mask"][1]) >= rng.integers(4, shapes["mask"][1] + 1))[None]
        feeds.append(feed)
    return feeds
