"""Models with an operator the chip lacks, for the CPU-fallback tests: built with
``model_builders``' ONNX helper and ``tflite_builder``."""
from __future__ import annotations

import numpy as np
import onnx

from .model_builders import _Builder


def with_cumsum(seed: int = 5) -> onnx.ModelProto:
    """Conv -> CumSum over the channels (an op the chip lacks) -> Relu -> Conv.
    Input [1, 3, 6, 6]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("CumSum", ["c1", b.const("axis", np.int64(1))], "cs")
    n("Relu", ["cs"], "r")
    n("Conv", ["r", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("with_cumsum", {"x": [1, 3, 6, 6]}, {"y": [1, 2, 6, 6]})


def int8_fc_sandwich(middle: int | str, seed: int = 0, *, axis_operand: bool = True) -> bytes:
    """int8 TFLite: FULLY_CONNECTED -> ``middle`` -> FULLY_CONNECTED, input [1, 16] int8.

    ``middle``: a builtin code taking (x, int32 axis [1]) like REVERSE_V2 (or only x
    without ``axis_operand``), or a custom op's code (a string: one input, no options)."""
    import tflite

    from .tflite_builder import OpSpec, TensorSpec, build_model
    rng = np.random.default_rng(seed)

    def fc_options(builder):
        tflite.FullyConnectedOptionsStart(builder)
        return tflite.FullyConnectedOptionsEnd(builder)
    fc = tflite.BuiltinOptions.FullyConnectedOptions
    tensors = [
        TensorSpec((1, 16), np.int8, [0.05], [3], name="x"),
        TensorSpec((8, 16), np.int8, [0.02], [0], data=rng.integers(-127, 128, (8, 16)), name="w1"),
        TensorSpec((8,), np.int32, [0.001], [0], data=rng.integers(-500, 500, 8), name="b1"),
        TensorSpec((1, 8), np.int8, [0.08], [-5], name="h"),
        TensorSpec((1,), np.int32, data=np.array([1]), name="axis"),
        TensorSpec((1, 8), np.int8, [0.08], [-5], name="mid"),
        TensorSpec((4, 8), np.int8, [0.03], [0], data=rng.integers(-127, 128, (4, 8)), name="w2"),
        TensorSpec((4,), np.int32, [0.0024], [0], data=rng.integers(-500, 500, 4), name="b2"),
        TensorSpec((1, 4), np.int8, [0.1], [2], name="y"),
    ]
    if isinstance(middle, str):
        mid = OpSpec(tflite.BuiltinOperator.CUSTOM, [3], [5], custom_code=middle)
    else:
        mid = OpSpec(middle, [3, 4] if axis_operand else [3], [5])
    ops = [OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [0, 1, 2], [3], fc, fc_options), mid,
           OpSpec(tflite.BuiltinOperator.FULLY_CONNECTED, [5, 6, 7], [8], fc, fc_options)]
    return build_model(tensors, ops, [0], [8])


# Models whose CPU nodes only onnxruntime (or LiteRT) runs: the fallback tests compare the
# compiled model on the device with onnxruntime / LiteRT on the model itself.

def _onnx(nodes, inits, name: str, ins: dict[str, list[int]], outs: dict[str, list[int]],
          opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> onnx.ModelProto:
    from onnx import helper as h
    f = onnx.TensorProto.FLOAT
    graph = h.make_graph(nodes, name, [h.make_tensor_value_info(k, f, v) for k, v in ins.items()],
                         [h.make_tensor_value_info(k, f, v) for k, v in outs.items()], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _weights(rng, name: str, *shape: int, dtype=np.float32, scale: float = .3):
    from onnx import numpy_helper
    if np.dtype(dtype).kind == "f":
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)
    return numpy_helper.from_array(rng.integers(-100, 100, shape).astype(dtype), name)


def _scalar(name: str, value, dtype) -> onnx.TensorProto:
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def lstm_unused_states(seed: int = 1, steps: int = 5, hidden: int = 6, *,
                       last_state: bool = False, cell: str = "LSTM") -> onnx.ModelProto:
    """MatMul -> LSTM (or ``cell="GRU"``) whose Y_c nobody reads (nor Y_h, unless
    ``last_state``: then it is the model's second output) -> Relu. Input [steps, 1, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    gates = 4 if cell == "LSTM" else 3
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]),
             h.make_node(cell, ["a", "w", "r"], ["seq", "y_h", "y_c"][:2 if cell == "GRU" else 3], hidden_size=hidden),
             h.make_node("Relu", ["seq"], ["y"])]
    inits = [_weights(rng, "w0", 8, 8), _weights(rng, "w", 1, gates * hidden, 8),
             _weights(rng, "r", 1, gates * hidden, hidden)]
    outputs = {"y": [steps, 1, 1, hidden], **({"y_h": [1, 1, hidden]} if last_state else {})}
    return _onnx(nodes, inits, "lstm_unused_states", {"x": [steps, 1, 8]}, outputs)


def topk_values(seed: int = 2) -> onnx.ModelProto:
    """MatMul -> TopK (its int64 indices unused) -> Relu. Input [4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("TopK", ["a", "k"], ["v", "i"], axis=-1),
             h.make_node("Relu", ["v"], ["y"])]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8), _scalar("k", [3], np.int64)], "topk_values",
                 {"x": [4, 8]}, {"y": [4, 3]})


def com_microsoft_attention(seed: int = 4) -> onnx.ModelProto:
    """MatMul -> onnxruntime's FusedMatMul (alpha 0.5, B transposed: lowered to the chip) ->
    its causal Attention (``unidirectional``, two heads; domain com.microsoft, ONNX cannot
    infer its shapes; not lowered) -> Relu. Input [1, 4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]),
             h.make_node("FusedMatMul", ["a", "w1"], ["b"], domain="com.microsoft", alpha=.5, transB=1),
             h.make_node("Attention", ["b", "wqkv", "bqkv"], ["c"], domain="com.microsoft", num_heads=2,
                         unidirectional=1),
             h.make_node("Relu", ["c"], ["y"])]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8), _weights(rng, "w1", 8, 8), _weights(rng, "wqkv", 8, 24),
                         _weights(rng, "bqkv", 24)], "com_microsoft_attention",
                 {"x": [1, 4, 8]}, {"y": [1, 4, 8]}, opsets=(("", 17), ("com.microsoft", 1)))


def if_on_data(seed: int = 5) -> onnx.ModelProto:
    """MatMul -> If (sum > 0: a * 2, else -a; the branches read ``a`` from the outer
    scope) -> Relu. Input [4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    f = onnx.TensorProto.FLOAT
    then = h.make_graph([h.make_node("Mul", ["a", "two"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", f, [4, 8])], [_scalar("two", 2, np.float32)])
    other = h.make_graph([h.make_node("Neg", ["a"], ["e"])], "else", [], [h.make_tensor_value_info("e", f, [4, 8])])
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["b"], then_branch=then, else_branch=other),
             h.make_node("Relu", ["b"], ["y"])]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8), _scalar("zero", 0, np.float32)], "if_on_data",
                 {"x": [4, 8]}, {"y": [4, 8]})


def loop_three_times(seed: int = 6) -> onnx.ModelProto:
    """MatMul -> Loop (3 times: acc = acc / 2 + a, ``a`` read from the outer scope) -> Relu.
    Input [4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    f = onnx.TensorProto.FLOAT
    body = h.make_graph([h.make_node("Mul", ["acc_in", "half"], ["m"]), h.make_node("Add", ["m", "a"], ["acc_out"]),
                         h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                        [h.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
                         h.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
                         h.make_tensor_value_info("acc_in", f, [4, 8])],
                        [h.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
                         h.make_tensor_value_info("acc_out", f, [4, 8])], [_scalar("half", .5, np.float32)])
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("Loop", ["n", "", "a"], ["l"], body=body),
             h.make_node("Relu", ["l"], ["y"])]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8), _scalar("n", 3, np.int64)], "loop_three_times",
                 {"x": [4, 8]}, {"y": [4, 8]})


def nonzero_count(seed: int = 7) -> onnx.ModelProto:
    """MatMul -> NonZero (its output's shape depends on the data) -> Cast -> ReduceSum.
    Input [4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("NonZero", ["r"], ["nz"]), h.make_node("Cast", ["nz"], ["nzf"], to=onnx.TensorProto.FLOAT),
             h.make_node("ReduceSum", ["nzf"], ["y"], keepdims=1)]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8)], "nonzero_count", {"x": [4, 8]}, {"y": [1, 1]})


def cpu_runs(seed: int = 8) -> onnx.ModelProto:
    """Two branches, each Conv -> CumSum -> Sin -> Cos (three CPU nodes in a row) -> Conv,
    added. In file order the branches' CPU nodes are separated by the other branch's
    Conv, which does not depend on them. Input [1, 3, 6, 6]."""
    b = _Builder(seed)
    n = b.node
    axis = b.const("axis", np.int64(1))
    for k in (1, 2):
        n("Conv", ["x", b.weight(f"w{k}", 4, 3, 3, 3), b.weight(f"b{k}", 4, scale=.1)], f"c{k}", pads=[1, 1, 1, 1])
        n("CumSum", [f"c{k}", axis], f"cs{k}")
        n("Sin", [f"cs{k}"], f"s{k}")
        n("Cos", [f"s{k}"], f"k{k}")
        n("Conv", [f"k{k}", b.weight(f"v{k}", 2, 4, 1, 1), b.weight(f"d{k}", 2, scale=.1)], f"o{k}")
    n("Add", ["o1", "o2"], "y")
    return b.model("cpu_runs", {"x": [1, 3, 6, 6]}, {"y": [1, 2, 6, 6]})


def topk_indices_across_the_chip(seed: int = 9) -> onnx.ModelProto:
    """MatMul -> TopK; its values through a MatMul on the chip, then Concat, its int64
    indices straight to a GatherElements on the host (a second host call: a selection's
    readers go to the CPU, :mod:`libnpu.compiler.selection_keys`, up to a layer with
    weights) -> Add. Input [4, 8]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("TopK", ["a", "k"], ["v", "i"], axis=-1),
             h.make_node("MatMul", ["v", "w1"], ["r"]), h.make_node("Concat", ["r", "r", "r"], ["c"], axis=1),
             h.make_node("GatherElements", ["c", "i"], ["g"], axis=1), h.make_node("Add", ["g", "r"], ["y"])]
    return _onnx(nodes, [_weights(rng, "w0", 8, 8, scale=1.0), _weights(rng, "w1", 3, 3, scale=1.0),
                         _scalar("k", [3], np.int64)],
                 "topk_indices_across_the_chip", {"x": [4, 8]}, {"y": [4, 3]})


def topk_indices_arithmetic() -> onnx.ModelProto:
    """TopK of the input; indices + 1 (an int64 Add) -> Cast -> Add to the values (on the
    host with them: :mod:`libnpu.compiler.selection_keys`). Input [4, 8]."""
    from onnx import helper as h
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
             h.make_node("Add", ["i", "one"], ["i1"]), h.make_node("Cast", ["i1"], ["f"], to=onnx.TensorProto.FLOAT),
             h.make_node("Add", ["f", "v"], ["y"])]
    return _onnx(nodes, [_scalar("k", [3], np.int64), _scalar("one", 1, np.int64)],
                 "topk_indices_arithmetic", {"x": [4, 8]}, {"y": [4, 3]})


def if_on_an_integer_input(seed: int = 11) -> onnx.ModelProto:
    """MatMul of ``x``; If the int64 input ``sr`` equals 16000: a * 2, else -a -> Relu
    (silero VAD's shape: the sample rate picks the branch). Inputs x [4, 8], sr []."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    f = onnx.TensorProto.FLOAT
    then = h.make_graph([h.make_node("Mul", ["a", "two"], ["t"])], "then", [],
                        [h.make_tensor_value_info("t", f, [4, 8])], [_scalar("two", 2, np.float32)])
    other = h.make_graph([h.make_node("Neg", ["a"], ["e"])], "else", [], [h.make_tensor_value_info("e", f, [4, 8])])
    nodes = [h.make_node("MatMul", ["x", "w0"], ["a"]), h.make_node("Equal", ["sr", "rate"], ["c"]),
             h.make_node("If", ["c"], ["b"], then_branch=then, else_branch=other), h.make_node("Relu", ["b"], ["y"])]
    model = _onnx(nodes, [_weights(rng, "w0", 8, 8), _scalar("rate", 16000, np.int64)], "if_on_an_integer_input",
                  {"x": [4, 8]}, {"y": [4, 8]})
    model.graph.input.append(h.make_tensor_value_info("sr", onnx.TensorProto.INT64, []))
    return model


def float_ids_embeddings(seed: int = 0) -> onnx.ModelProto:
    """Ids given as floats (as a Keras export takes them), each Cast to int32 and looked up
    in its own float table (Gather), the two embeddings added: DeepCut's front end.
    Inputs ``a``, ``b`` [1, 6] in [0, 12)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    tables = [numpy_helper.from_array(rng.standard_normal((n, 4)).astype(np.float32), f"t{k}")
              for k, n in enumerate((12, 20))]
    nodes = [helper.make_node("Cast", ["a"], ["ai"], to=TensorProto.INT32),
             helper.make_node("Cast", ["b"], ["bi"], to=TensorProto.INT32),
             helper.make_node("Gather", ["t0", "ai"], ["ea"]),
             helper.make_node("Gather", ["t1", "bi"], ["eb"]),
             helper.make_node("Add", ["ea", "eb"], ["y"])]
    graph = helper.make_graph(nodes, "float_ids", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6])
                                                   for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], tables)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def map_fn_frames(seed: int = 9) -> onnx.ModelProto:
    """TensorFlow's ``tf.map_fn`` as tf2onnx exports it, framing each row of the input:
    a Loop (trip count INT64_MAX) whose body counts rows and stops when the count reaches
    the batch (``Shape(x)[0]``), each iteration giving a row's 4 frames of 4 samples,
    windowed -> Conv over the rows as channels -> Relu. Input [2, 16]."""
    from onnx import helper as h
    rng = np.random.default_rng(seed)
    i64 = onnx.TensorProto.INT64
    body = h.make_graph(
        [h.make_node("Add", ["cnt_in", "one"], ["cnt_out"]), h.make_node("Less", ["cnt_out", "rows"], ["cond_out"]),
         h.make_node("Gather", ["x", "cnt_in"], ["row"], axis=0),
         h.make_node("Reshape", ["row", "frame_shape"], ["fr"]),
         h.make_node("Mul", ["fr", "window"], ["frames"])], "body",
        [h.make_tensor_value_info("i", i64, []), h.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
         h.make_tensor_value_info("cnt_in", i64, [])],
        [h.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []), h.make_tensor_value_info("cnt_out", i64, []),
         h.make_tensor_value_info("frames", onnx.TensorProto.FLOAT, [4, 4])],
        [_scalar("one", 1, np.int64), _scalar("frame_shape", [4, 4], np.int64),
         _scalar("window", np.hanning(6)[1:5].astype(np.float32), np.float32)])
    nodes = [h.make_node("Shape", ["x"], ["shape"]), h.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             h.make_node("Less", ["zero", "rows"], ["go"]),
             h.make_node("Loop", ["trips", "go", "zero"], ["cnt_last", "framed"], body=body),
             h.make_node("Unsqueeze", ["framed", "axes0"], ["f4"]),
             h.make_node("Conv", ["f4", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    inits = [_scalar("zero", 0, np.int64), _scalar("trips", np.iinfo(np.int64).max, np.int64),
             _scalar("axes0", [0], np.int64), _weights(rng, "w", 3, 2, 3, 3), _weights(rng, "b", 3, scale=.1)]
    return _onnx(nodes, inits, "map_fn_frames", {"x": [2, 16]}, {"y": [1, 3, 4, 4]})
