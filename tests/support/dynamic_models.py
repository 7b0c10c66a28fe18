"""Models whose outputs' shapes depend on the data (a decoder Loop that stops on its own,
NonZero, NonMaxSuppression after a detector head), built with onnx.helper for the
dynamic-output tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

__all__ = ["conv_loop_decoder", "table_decoder", "blob_images", "conv_nonzero", "conv_nms"]


def _const(name: str, value, dtype) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype), name)


def _encoder(rng: np.random.Generator, channels: int = 4) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """x [1, 3, 8, 8] -> Conv 3x3 -> Relu -> ``r`` [1, channels, 8, 8]: the chip's part."""
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"])]
    inits = [_const("w", rng.standard_normal((channels, 3, 3, 3)) * .3, np.float32),
             _const("b", rng.standard_normal(channels) * .1, np.float32)]
    return nodes, inits


def _model(nodes, inits, name: str, outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = h.make_graph(nodes, name, [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])], outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_loop_decoder(seed: int = 0, max_steps: int = 16) -> onnx.ModelProto:
    """A table-structure decoder in small: a Conv encoder, its pooled features ``feat``
    [1, 4] (an output), then a Loop of at most ``max_steps`` halving the state until its
    largest value is below 0.02 (the body's own data stops it), each step's Tanh a scan
    output: ``seq`` ["steps", 1, 4], the trip count known only at run time."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng)
    nodes += [h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["feat"])]
    f = TensorProto.FLOAT
    body = h.make_graph(
        [h.make_node("Mul", ["s_in", "half"], ["s_out"]), h.make_node("Abs", ["s_out"], ["a"]),
         h.make_node("ReduceMax", ["a"], ["m"], keepdims=0), h.make_node("Greater", ["m", "stop"], ["cond_out"]),
         h.make_node("Tanh", ["s_out"], ["tok"])],
        "decode_step",
        [h.make_tensor_value_info("i", TensorProto.INT64, []),
         h.make_tensor_value_info("cond_in", TensorProto.BOOL, []), h.make_tensor_value_info("s_in", f, [1, 4])],
        [h.make_tensor_value_info("cond_out", TensorProto.BOOL, []), h.make_tensor_value_info("s_out", f, [1, 4]),
         h.make_tensor_value_info("tok", f, [1, 4])],
        [_const("half", .5, np.float32), _const("stop", .02, np.float32)])
    nodes.append(h.make_node("Loop", ["max_steps", "go", "feat"], ["s_last", "seq"], body=body))
    inits += [_const("max_steps", max_steps, np.int64), _const("go", True, np.bool_)]
    return _model(nodes, inits, "conv_loop_decoder",
                  [h.make_tensor_value_info("feat", f, [1, 4]), h.make_tensor_value_info("seq", f, ["steps", 1, 4])])


def table_decoder(seed: int = 0, size: int = 32, width: int = 32, vocab: int = 12, max_steps: int = 40,
                  end: int = 1) -> onnx.ModelProto:
    """A table-structure recognizer in small: a CNN encoder (three 3x3 Convs, two of stride 2)
    whose ``(size / 4)^2`` positions are the keys, then a decoder Loop of at most
    ``max_steps`` steps, each: the previous token's embedding (Gather), additive attention
    (Tanh of keys + query, a Softmax over the keys, peaked: scores ~4x), a GRU-like cell on
    [context, embedding], the step's token probabilities (Softmax) and a box (Sigmoid); the
    ArgMax is fed back as the next token, and the loop stops when it is ``end``. Outputs
    ``probs`` ["steps", 1, vocab] and ``boxes`` ["steps", 1, 4], their length each run's.
    With seed 0 about a third of unseen pictures (:func:`blob_images`) take another token
    somewhere when the encoder is int8."""
    r = np.random.default_rng(seed)

    def w(*shape: int, scale: float | None = None) -> np.ndarray:
        return r.standard_normal(shape) * (scale if scale is not None else 1 / np.sqrt(np.prod(shape[1:])))

    inits = [_const("w1", w(16, 3, 3, 3), np.float32), _const("b1", r.normal(0, .1, 16), np.float32),
             _const("w2", w(width, 16, 3, 3), np.float32), _const("b2", r.normal(0, .1, width), np.float32),
             _const("w3", w(width, width, 3, 3), np.float32), _const("b3", r.normal(0, .1, width), np.float32),
             _const("flat", [1, width, -1], np.int64)]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("Relu", ["c2"], ["r2"]),
             h.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c3"], ["r3"]),
             h.make_node("Reshape", ["r3", "flat"], ["rf"]),
             h.make_node("Transpose", ["rf"], ["feats"], perm=[0, 2, 1])]          # [1, keys, width]
    step = [h.make_node("Gather", ["table", "tok_in"], ["e"], axis=0),            # [1, 16]
            h.make_node("MatMul", ["feats", "wk"], ["kp"]), h.make_node("MatMul", ["h_in", "wq"], ["qp"]),
            h.make_node("Unsqueeze", ["qp", "axis1"], ["qp3"]), h.make_node("Add", ["kp", "qp3"], ["s"]),
            h.make_node("Tanh", ["s"], ["ts"]), h.make_node("MatMul", ["ts", "v"], ["scores"]),
            h.make_node("Softmax", ["scores"], ["alpha"], axis=1),                 # over the keys
            h.make_node("Transpose", ["alpha"], ["alpha_t"], perm=[0, 2, 1]),
            h.make_node("MatMul", ["alpha_t", "feats"], ["ctx3"]), h.make_node("Squeeze", ["ctx3", "axis1"], ["ctx"]),
            h.make_node("Concat", ["ctx", "e"], ["xin"], axis=1),
            h.make_node("MatMul", ["xin", "wx"], ["gx"]), h.make_node("MatMul", ["h_in", "wh"], ["gh"]),
            h.make_node("Add", ["gx", "gh"], ["g0"]), h.make_node("Add", ["g0", "bg"], ["g"]),
            h.make_node("Sigmoid", ["g"], ["z"]),
            h.make_node("MatMul", ["xin", "wc"], ["cx"]), h.make_node("Tanh", ["cx"], ["cand"]),
            h.make_node("Sub", ["h_in", "cand"], ["d"]), h.make_node("Mul", ["z", "d"], ["zd"]),
            h.make_node("Add", ["cand", "zd"], ["h_out"]),                          # z * h + (1 - z) * cand
            h.make_node("MatMul", ["h_out", "wo"], ["logits"]), h.make_node("Softmax", ["logits"], ["p"], axis=1),
            h.make_node("MatMul", ["h_out", "wb"], ["bl"]), h.make_node("Sigmoid", ["bl"], ["box"]),
            h.make_node("ArgMax", ["p"], ["tok_out"], axis=1, keepdims=0),
            h.make_node("Equal", ["tok_out", "end"], ["is_end1"]), h.make_node("Squeeze", ["is_end1"], ["is_end"]),
            h.make_node("Not", ["is_end"], ["cond_out"])]
    cell = width + 16
    step_inits = [_const("table", w(vocab, 16, scale=1.0), np.float32),
                  _const("wk", w(width, 32, scale=.7), np.float32),
                  _const("wq", w(32, 32), np.float32), _const("v", w(32, 1, scale=4.0), np.float32),
                  _const("axis1", [1], np.int64), _const("wx", w(cell, 32), np.float32),
                  _const("wh", w(32, 32), np.float32),
                  _const("bg", r.normal(0, .5, 32), np.float32),
                  _const("wc", w(cell, 32, scale=2 / np.sqrt(cell)), np.float32),
                  _const("wo", w(32, vocab, scale=3 / np.sqrt(32)), np.float32), _const("wb", w(32, 4), np.float32),
                  _const("end", [end], np.int64)]
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = h.make_graph(step, "decode_step",
                        [h.make_tensor_value_info("i", i64, []),
                         h.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                         h.make_tensor_value_info("tok_in", i64, [1]), h.make_tensor_value_info("h_in", f, [1, 32])],
                        [h.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                         h.make_tensor_value_info("tok_out", i64, [1]), h.make_tensor_value_info("h_out", f, [1, 32]),
                         h.make_tensor_value_info("p", f, [1, vocab]), h.make_tensor_value_info("box", f, [1, 4])],
                        step_inits)
    nodes.append(h.make_node("Loop", ["max_steps", "go", "tok0", "h0"], ["tok_last", "h_last", "probs", "boxes"],
                             body=body))
    inits += [_const("max_steps", max_steps, np.int64), _const("go", True, np.bool_), _const("tok0", [0], np.int64),
              _const("h0", np.zeros((1, 32)), np.float32)]
    graph = h.make_graph(nodes, "table_decoder", [h.make_tensor_value_info("x", f, [1, 3, size, size])],
                         [h.make_tensor_value_info("probs", f, ["steps", 1, vocab]),
                          h.make_tensor_value_info("boxes", f, ["steps", 1, 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def blob_images(count: int, seed: int, size: int = 32) -> list[np.ndarray]:
    """``count`` smooth pictures [1, 3, size, size]: four coloured Gaussian blobs and a little noise."""
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = []
    for _ in range(count):
        image = np.zeros((3, size, size))
        for _ in range(4):
            cy, cx, spread = r.uniform(0, 1, 3)
            image += r.normal(0, 1, (3, 1, 1)) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (.02 + .1 * spread))
        images.append((image + r.normal(0, .05, image.shape))[None].astype(np.float32))
    return images


def conv_nonzero(seed: int = 1) -> onnx.ModelProto:
    """A Conv encoder whose features above 0.5 are listed: NonZero's indices ``idx`` [4, "n"]
    (int64), the features ``r`` [1, 4, 8, 8] a second output."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng)
    nodes += [h.make_node("Greater", ["r", "threshold"], ["mask"]), h.make_node("NonZero", ["mask"], ["idx"])]
    inits.append(_const("threshold", .5, np.float32))
    return _model(nodes, inits, "conv_nonzero",
                  [h.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 8, 8]),
                   h.make_tensor_value_info("idx", TensorProto.INT64, [4, "n"])])


def conv_nms(seed: int = 2, boxes: int = 16) -> onnx.ModelProto:
    """A detector head in small: a Conv whose 4 channels at each of ``boxes`` places are a
    box and a fifth its score (Sigmoid), then NonMaxSuppression (post-processing exported
    into the model): ``selected`` ["k", 3] int64, and the scores an output too."""
    rng = np.random.default_rng(seed)
    nodes, inits = _encoder(rng, channels=5)
    nodes += [h.make_node("Reshape", ["r", "flat"], ["rf"]),              # [1, 5, 64]
              h.make_node("Slice", ["rf", "b0", "b1", "axis1"], ["bx"]),   # [1, 4, 64]
              h.make_node("Transpose", ["bx"], ["corners"], perm=[0, 2, 1]),   # [1, 64, 4]
              h.make_node("Slice", ["rf", "b1", "b2", "axis1"], ["logit"]),    # [1, 1, 64]
              h.make_node("Sigmoid", ["logit"], ["scores"]),
              h.make_node("NonMaxSuppression", ["corners", "scores", "keep", "iou", "min_score"], ["selected"])]
    inits += [_const("flat", [1, 5, -1], np.int64), _const("b0", [0], np.int64), _const("b1", [4], np.int64),
              _const("b2", [5], np.int64), _const("axis1", [1], np.int64), _const("keep", [boxes], np.int64),
              _const("iou", [.5], np.float32), _const("min_score", [.6], np.float32)]
    return _model(nodes, inits, "conv_nms",
                  [h.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 64]),
                   h.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3])])
