"""Small float ONNX models built with the ``onnx.helper`` API for the compiler tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(nh.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        a = self.rng.standard_normal(shape) * (scale if scale is not None else np.sqrt(2.0 / fan))
        return self.const(name, a.astype(np.float32))

    def bn(self, name: str, c: int) -> list[str]:
        r = self.rng
        return [self.const(f"{name}_s", r.uniform(0.5, 1.5, c).astype(np.float32)),
                self.const(f"{name}_b", r.normal(0, .1, c).astype(np.float32)),
                self.const(f"{name}_m", r.normal(0, .1, c).astype(np.float32)),
                self.const(f"{name}_v", r.uniform(0.5, 1.5, c).astype(np.float32))]

    def node(self, op: str, ins: list[str], out: str, **attrs) -> str:
        self.nodes.append(h.make_node(op, ins, [out], name=f"{op}_{out}", **attrs))
        return out

    def model(self, name: str, inputs: dict[str, list[int]], outputs: dict[str, list[int]],
              opset: int = 13) -> onnx.ModelProto:
        g = h.make_graph(self.nodes, name,
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
                         [h.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
                         self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def small_cnn(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    """Conv+BN+ReLU, depthwise + ReLU6 (Clip), 1x1 conv, residual add, max pool,
    strided conv, global average pool, flatten, Gemm, softmax. Input [1, 3, 16, 16]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 16, 3, 3, 3)], "c1", pads=[1, 1, 1, 1])
    n("BatchNormalization", ["c1", *b.bn("bn1", 16)], "b1")
    n("Relu", ["b1"], "r1")
    n("Conv", ["r1", b.weight("w2", 16, 1, 3, 3), b.weight("bb2", 16, scale=.1)], "c2", pads=[1, 1, 1, 1], group=16)
    n("Clip", ["c2", b.const("lo", np.float32(0)), b.const("hi", np.float32(6))], "r2")
    n("Conv", ["r2", b.weight("w3", 16, 16, 1, 1), b.weight("bb3", 16, scale=.1)], "c3")
    n("Add", ["c3", "r1"], "a3")
    n("Relu", ["a3"], "r3")
    n("MaxPool", ["r3"], "p3", kernel_shape=[2, 2], strides=[2, 2])
    n("Conv", ["p3", b.weight("w4", 32, 16, 3, 3), b.weight("bb4", 32, scale=.1)], "c4", strides=[2, 2],
      pads=[1, 1, 1, 1])
    n("Relu", ["c4"], "r4")
    n("GlobalAveragePool", ["r4"], "g4")
    n("Flatten", ["g4"], "f4")
    n("Gemm", ["f4", b.weight("wf", classes, 32), b.weight("bf", classes, scale=.1)], "logits", transB=1)
    n("Softmax", ["logits"], "prob", axis=-1)
    return b.model("small_cnn", {"x": [1, 3, 16, 16]}, {"prob": [1, classes]})


def audio_encoder(seed: int = 10, mels: int = 16, frames: int = 48, classes: int = 6) -> onnx.ModelProto:
    """An audio encoder over mel frames, as 1-D convolutions: Conv1d + Relu, strided
    Conv1d + Relu, global average pool over time, Flatten, Gemm. Input [1, mels, frames]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 24, mels, 5), b.weight("b1", 24, scale=.1)], "c1", pads=[2, 2])
    n("Relu", ["c1"], "r1")
    n("Conv", ["r1", b.weight("w2", 32, 24, 3), b.weight("b2", 32, scale=.1)], "c2", strides=[2], pads=[1, 1])
    n("Relu", ["c2"], "r2")
    n("GlobalAveragePool", ["r2"], "g2")
    n("Flatten", ["g2"], "f2")
    n("Gemm", ["f2", b.weight("wf", classes, 32), b.weight("bf", classes, scale=.1)], "logits", transB=1)
    return b.model("audio_encoder", {"x": [1, mels, frames]}, {"logits": [1, classes]})


def layout_mix(seed: int = 1) -> onnx.ModelProto:
    """Ops whose meaning depends on the layout: channel concat, pad, transpose, flatten of an
    8x8 map, mean over H/W, per-channel Mul/Sub constants, MatMul, sigmoid. Input [1, 4, 8, 8]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 6, 4, 3, 3), b.weight("b1", 6, scale=.1)], "c1", auto_pad="SAME_UPPER")
    n("Mul", ["c1", b.const("scale", b.rng.uniform(0.5, 2, (1, 6, 1, 1)).astype(np.float32))], "m1")
    n("Sub", ["m1", b.const("shift", b.rng.normal(0, .2, (6, 1, 1)).astype(np.float32))], "s1")
    n("Concat", ["s1", "x"], "cat", axis=1)
    n("Pad", ["cat", b.const("pads", np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64))], "pad")
    n("AveragePool", ["pad"], "ap", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    n("Sigmoid", ["ap"], "sg")
    n("ReduceMean", ["sg"], "mean", axes=[2, 3], keepdims=1)
    n("Flatten", ["sg"], "flat")
    n("MatMul", ["flat", b.weight("wm", 10 * 9 * 9, 5)], "mm")
    n("Tanh", ["mm"], "y")
    n("Transpose", ["sg"], "t", perm=[0, 2, 3, 1])
    return b.model("layout_mix", {"x": [1, 4, 8, 8]}, {"y": [1, 5], "mean": [1, 10, 1, 1], "t": [1, 9, 9, 10]})


def unsupported(op: str = "Sin") -> onnx.ModelProto:
    b = _Builder(0)
    b.node("Relu", ["x"], "r")
    b.node(op, ["r"], "y")
    return b.model("unsupported", {"x": [1, 4]}, {"y": [1, 4]})


def exporter_style(seed: int = 2) -> onnx.ModelProto:
    """What framework exporters emit: input scaling by Div, and flatten as shape arithmetic
    (Shape -> Gather -> Unsqueeze -> Concat -> Reshape). Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    n = b.node
    n("Div", ["x", b.const("two", np.float32(2.0))], "xs")
    n("Conv", ["xs", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("Relu", ["c1"], "r1")
    n("Shape", ["r1"], "shape")
    n("Gather", ["shape", b.const("zero", np.int64(0))], "batch", axis=0)
    n("Unsqueeze", ["batch", b.const("ax0", np.array([0], np.int64))], "batch1")
    n("Concat", ["batch1", b.const("minus1", np.array([-1], np.int64))], "newshape", axis=0)
    n("Reshape", ["r1", "newshape"], "flat")
    n("Gemm", ["flat", b.weight("wf", 5, 4 * 8 * 8), b.weight("bf", 5, scale=.1)], "logits", transB=1)
    n("Softmax", ["logits"], "y", axis=-1)
    return b.model("exporter_style", {"x": [1, 3, 8, 8]}, {"y": [1, 5]})


def single_op_tflite(opcode: int, tensors: list[tuple[str, tuple[int, ...], np.ndarray | None]],
                     inputs: list[int], outputs: list[int], *, deprecated_code: int | None = None,
                     options: tuple[str, dict] | None = None) -> bytes:
    """A one-operator float .tflite file written with the flatbuffer builder.

    ``tensors``: (name, shape, constant data or None); float32 unless the data says
    otherwise. ``options``: (options table name, {field: value}) e.g.
    ``("StridedSliceOptions", {"BeginMask": 1})``.
    """
    import importlib

    import flatbuffers
    import tflite

    def mod(name):  # the package re-exports classes under module names; builders live in modules
        return importlib.import_module(f"tflite.{name}")

    def table(name, **fields):
        m = mod(name)
        getattr(m, f"{name}Start")(b)
        for k, v in fields.items():
            getattr(m, f"{name}Add{k}")(b, v)
        return getattr(m, f"{name}End")(b)

    def vector(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    types = {np.dtype(np.float32): 0, np.dtype(np.int32): 2}
    b = flatbuffers.Builder(1024)
    buffers, toffs = [table("Buffer")], []
    for name, shape, data in tensors:
        buf = 0
        if data is not None:
            buffers.append(table("Buffer", Data=b.CreateNumpyVector(np.asarray(data).reshape(-1).view(np.uint8))))
            buf = len(buffers) - 1
        dtype = np.dtype(np.float32) if data is None else np.asarray(data).dtype
        toffs.append(table("Tensor", Shape=b.CreateNumpyVector(np.asarray(shape, np.int32)), Type=types[dtype],
                           Buffer=buf, Name=b.CreateString(name)))
    opt = {}
    if options is not None:
        opt = dict(BuiltinOptionsType=getattr(tflite.BuiltinOptions, options[0]),
                   BuiltinOptions=table(options[0], **options[1]))
    op = table("Operator", OpcodeIndex=0, Inputs=b.CreateNumpyVector(np.asarray(inputs, np.int32)),
               Outputs=b.CreateNumpyVector(np.asarray(outputs, np.int32)), **opt)
    graph_in = [i for i in inputs if tensors[i][2] is None]
    sg = table("SubGraph", Tensors=vector(toffs), Operators=vector([op]),
               Inputs=b.CreateNumpyVector(np.asarray(graph_in, np.int32)),
               Outputs=b.CreateNumpyVector(np.asarray(outputs, np.int32)))
    code = table("OperatorCode", BuiltinCode=opcode,
                 DeprecatedBuiltinCode=min(opcode, 127) if deprecated_code is None else deprecated_code)
    model = table("Model", Version=3, OperatorCodes=vector([code]), Subgraphs=vector([sg]),
                  Buffers=vector(buffers))
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


def resize(mode: str, coord: str, nearest_mode: str = "round_prefer_floor",
           out_hw: tuple[int, int] = (11, 6)) -> onnx.ModelProto:
    """Conv then Resize to ``out_hw`` (opset 13, sizes input). Input [1, 2, 5, 4]."""
    b = _Builder(3)
    b.node("Conv", ["x", b.weight("w", 3, 2, 1, 1)], "c")
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    b.node("Resize", ["c", "", "", b.const("sizes", np.array([1, 3, *out_hw], np.int64))], "y", **attrs)
    return b.model("resize", {"x": [1, 2, 5, 4]}, {"y": [1, 3, *out_hw]})


def standalone_activations(seed: int = 4) -> onnx.ModelProto:
    """ReLU, ReLU6 and ReLU_N1_TO_1 after concatenations (so none can be fused). Input [1, 2, 4, 4]."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w", 2, 2, 1, 1), b.weight("bb", 2, scale=.5)], "c")
    n("Concat", ["c", "x"], "k1", axis=1)
    n("Relu", ["k1"], "r")
    n("Concat", ["r", "x"], "k2", axis=1)
    n("Clip", ["k2", b.const("z", np.float32(0)), b.const("six", np.float32(6))], "r6")
    n("Concat", ["r6", "x"], "k3", axis=1)
    n("Clip", ["k3", b.const("m1", np.float32(-1)), b.const("p1", np.float32(1))], "y")
    return b.model("standalone_activations", {"x": [1, 2, 4, 4]}, {"y": [1, 8, 4, 4]})


def prelu_between_convs(seed: int = 6) -> onnx.ModelProto:
    """Conv, PRelu (a slope per channel, some negative), conv: the PRelu's output is not a
    graph output, so mixed precision can keep it int16. Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    slope = b.rng.uniform(-0.5, 0.5, (4, 1, 1)).astype(np.float32)
    b.node("Conv", ["x", b.weight("w1", 4, 3, 3, 3), b.weight("b1", 4, scale=.1)], "c1", pads=[1, 1, 1, 1])
    b.node("PRelu", ["c1", b.const("slope", slope)], "p")
    b.node("Conv", ["p", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("prelu_between_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 2, 8, 8]})


def hard_swish_between_convs(seed: int = 7) -> onnx.ModelProto:
    """Conv, HardSwish, conv (the HardSwish's output is not a graph output). Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    b.node("Conv", ["x", b.weight("w1", 4, 3, 3, 3, scale=1.5), b.weight("b1", 4)], "c1", pads=[1, 1, 1, 1])
    b.node("HardSwish", ["c1"], "h")
    b.node("Conv", ["h", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("hard_swish_between_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 2, 8, 8]}, opset=14)


def layer_norm_between_convs(seed: int = 13) -> onnx.ModelProto:
    """Conv, LayerNormalization over the last axis (W: its rows ``ln__centred`` SUB and
    ``ln__inverse`` RSQRT), conv. The first conv's channels differ 5x in gain, so the
    rows' variances spread. Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    gains = np.array([1, .5, .3, .2], np.float32)[:, None, None, None]
    w1 = b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * gains
    b.node("Conv", ["x", b.const("w1", w1), b.weight("b1", 4, scale=.01)], "c1", pads=[1, 1, 1, 1])
    b.node("LayerNormalization", ["c1", b.const("g", b.rng.uniform(.5, 1.5, 8).astype(np.float32)),
                                  b.const("beta", b.rng.normal(0, .1, 8).astype(np.float32))], "ln", axis=-1)
    b.node("Conv", ["ln", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("layer_norm_between_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 2, 8, 8]}, opset=17)


def gelu_between_convs(seed: int = 7) -> onnx.ModelProto:
    """Conv, Gelu (erf form, opset 20), conv. Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    b.node("Conv", ["x", b.weight("w1", 4, 3, 3, 3, scale=1.5), b.weight("b1", 4)], "c1", pads=[1, 1, 1, 1])
    b.node("Gelu", ["c1"], "g")
    b.node("Conv", ["g", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "y")
    return b.model("gelu_between_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 2, 8, 8]}, opset=20)


def sigmoid_tanh_between_convs(seed: int = 8) -> onnx.ModelProto:
    """Conv, then Sigmoid and Tanh of it, each into a 1x1 conv, added (neither activation's
    output is a graph output). Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    b.node("Conv", ["x", b.weight("w1", 4, 3, 3, 3, scale=1.5), b.weight("b1", 4)], "c1", pads=[1, 1, 1, 1])
    b.node("Sigmoid", ["c1"], "s")
    b.node("Tanh", ["c1"], "t")
    b.node("Conv", ["s", b.weight("w2", 2, 4, 1, 1), b.weight("b2", 2, scale=.1)], "ys")
    b.node("Conv", ["t", b.weight("w3", 2, 4, 1, 1), b.weight("b3", 2, scale=.1)], "yt")
    b.node("Add", ["ys", "yt"], "y")
    return b.model("sigmoid_tanh_between_convs", {"x": [1, 3, 8, 8]}, {"y": [1, 2, 8, 8]})


def concat_of_sigmoid(other: str = "Mul", seed: int = 10) -> onnx.ModelProto:
    """``Concat(other(x), Sigmoid(x))`` on axis 1 (issue 26's repro), ``other`` one of "Mul"
    (x * 100: far beyond the sigmoid's [0, 1)), "Sigmoid" (the same fixed grid) or "Tanh"
    (another fixed grid). Input [1, 8]."""
    b = _Builder(seed)
    if other == "Mul":
        b.node("Mul", ["x", b.const("hundred", np.float32(100))], "a")
    else:
        b.node(other, [b.node("Neg", ["x"], "nx")], "a")
    b.node("Sigmoid", ["x"], "s")
    b.node("Concat", ["a", "s"], "y", axis=1)
    return b.model("concat_of_sigmoid", {"x": [1, 8]}, {"y": [1, 16]})


def unary(op: str) -> onnx.ModelProto:
    """One ONNX node ``op`` of one input (default attributes). Input [1, 8]."""
    b = _Builder(0)
    b.node(op, ["x"], "y")
    return b.model(f"unary_{op}", {"x": [1, 8]}, {"y": [1, 8]})


def yolo_head(seed: int = 11, score_gain: float = 2.0, score_bias: float | None = None) -> onnx.ModelProto:
    """A YOLO-style detection head: a trunk conv, box regression in pixels (a conv scaled to
    hundreds) and class scores (conv, Sigmoid) concatenated on the channels, flattened to
    [1, 4 + classes, anchors]. Input [1, 3, 8, 8]. ``score_gain``: the class logits' weights'
    scale (larger: more scores saturate near 0 and 1); ``score_bias``: the logits' bias
    (default random; -16: every score a background anchor's, under 1e-4)."""
    b = _Builder(seed)
    n = b.node
    n("Conv", ["x", b.weight("w1", 8, 3, 3, 3), b.weight("b1", 8, scale=.1)], "c1", pads=[1, 1, 1, 1])
    n("Relu", ["c1"], "r1")
    n("Conv", ["r1", b.weight("wb", 4, 8, 1, 1, scale=60.0), b.const("bb", np.full(4, 160, np.float32))], "box")
    wc = b.weight("wc", 3, 8, 1, 1, scale=score_gain)
    bc = b.weight("bc", 3) if score_bias is None else b.const("bc", np.full(3, score_bias, np.float32))
    n("Conv", ["r1", wc, bc], "logits")
    n("Sigmoid", ["logits"], "scores")
    n("Concat", ["box", "scores"], "cat", axis=1)
    n("Reshape", ["cat", b.const("shape", np.array([1, 7, 64], np.int64))], "y")
    return b.model("yolo_head", {"x": [1, 3, 8, 8]}, {"y": [1, 7, 64]})


def outlier_channel(seed: int = 5, wide: float = 300.0, gain: float = 1.0,
                    sigmoid_bias: float | None = None) -> onnx.ModelProto:
    """A conv whose first output channel is ~300x (``wide``) the others, then a 1x1 conv that reads
    only the others: the shared int8 scale of the first conv's output leaves them a few
    levels (the output drifts far from float), int16 keeps them. Input [1, 4, 8, 8].
    ``sigmoid_bias``: the 1x1 conv's outputs (times ``gain``, plus that bias) are the logits
    of a final Sigmoid."""
    b = _Builder(seed)
    w1 = b.rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3
    w1[0] *= wide
    w2 = b.rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3 * gain
    w2[:, 0] = 0.0
    b.node("Conv", ["x", b.const("w1", w1), b.weight("b1", 8, scale=.1)], "c1", pads=[1, 1, 1, 1])
    b.node("Relu", ["c1"], "r1")
    if sigmoid_bias is None:
        b.node("Conv", ["r1", b.const("w2", w2), b.weight("b2", 4, scale=.1)], "y")
    else:
        b2 = b.rng.standard_normal(4).astype(np.float32) * 0.1 + np.float32(sigmoid_bias)
        b.node("Sigmoid", [b.node("Conv", ["r1", b.const("w2", w2), b.const("b2", b2)], "z")], "y")
    return b.model("outlier_channel", {"x": [1, 4, 8, 8]}, {"y": [1, 4, 8, 8]})


def sigmoid_score(seed: int = 3, bias: float = -12.0, width: int = 16) -> onnx.ModelProto:
    """A wake-word head: one score, the Sigmoid of a Gemm whose ``bias`` keeps it near 0
    (under one step of the score's int8 grid on inputs of unit spread). Input [1, width]."""
    b = _Builder(seed)
    b.node("Sigmoid", [b.node("Gemm", ["x", b.weight("w", width, 1, scale=.5),
                                      b.const("b", np.array([bias], np.float32))], "z")], "y")
    return b.model("sigmoid_score", {"x": [1, width]}, {"y": [1, 1]})


def channel_trunk(seed: int = 9) -> onnx.ModelProto:
    """A residual trunk whose channels differ in range (some ~20x narrower than others), as
    mediapipe's hand_recrop: conv, PRelu, 1x1 conv added back, depthwise conv, max pool,
    channel padding (8 -> 12), 1x1 conv added back, 1x1 conv out. Input [1, 3, 8, 8]."""
    b = _Builder(seed)
    gains = np.array([1, 1, 1, 1, .05, .05, .05, .05], np.float32)
    w1 = b.rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.4 * gains[:, None, None, None]
    w2 = b.rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.3 * gains[:, None, None, None]
    dw = b.rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.3 / gains[:, None, None, None] ** 0.5
    slope = b.rng.uniform(0.05, 0.3, (8, 1, 1)).astype(np.float32)
    b.node("Conv", ["x", b.const("w1", w1), b.weight("b1", 8, scale=.01)], "c1", pads=[1, 1, 1, 1])
    b.node("PRelu", ["c1", b.const("slope", slope)], "p1")
    b.node("Conv", ["p1", b.const("w2", w2), b.weight("b2", 8, scale=.01)], "c2")
    b.node("Add", ["p1", "c2"], "a1")
    b.node("Conv", ["a1", b.const("dw", dw), b.weight("bd", 8, scale=.01)], "d1", pads=[1, 1, 1, 1], group=8)
    b.node("MaxPool", ["d1"], "m1", kernel_shape=[2, 2], strides=[2, 2])
    b.node("Pad", ["m1", b.const("pads", np.array([0, 0, 0, 0, 0, 4, 0, 0], np.int64))], "q1")
    b.node("Conv", ["q1", b.weight("w3", 12, 12, 1, 1, scale=.2), b.weight("b3", 12, scale=.01)], "c3")
    b.node("Add", ["q1", "c3"], "a2")
    b.node("Conv", ["a2", b.weight("w4", 4, 12, 1, 1), b.weight("b4", 4, scale=.1)], "y")
    return b.model("channel_trunk", {"x": [1, 3, 8, 8]}, {"y": [1, 4, 4, 4]})


def attention_decoder(seed: int = 12, heads: int = 1, keys: int = 256, width: int = 32, queries: int = 8,
                      sink: float = 10.0, spelled: bool = False) -> onnx.ModelProto:
    """A transformer decoder's cross-attention as PyTorch exports it: LayerNorm of the
    queries ``x``, Q / K / V projections (MatMul), a learned key every query attends to
    with value 0 (``nn.MultiheadAttention(add_bias_kv=True)``: Concat before the memory's
    ``keys``), ``heads`` heads (Reshape + Transpose), MatMul(Q, K^T) * scale, Softmax over
    ``keys + 1``, MatMul with V, the output projection and a LayerNorm. ``sink`` sets the
    learned key's logit (~``sink``): it takes 60-80% of each query's weight, the rest is
    spread thin, so the output is carried by weights mostly under int8's 1/256 and its
    tokens differ ~40x in scale before the LayerNorm. Inputs x [1, queries, width],
    mem [1, keys, width]; output y [1, queries, width]. ``spelled``: the LayerNorms written
    out as PaddlePaddle exports them (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)."""
    b = _Builder(seed)
    n, r = b.node, b.rng
    dh = width // heads
    u = r.standard_normal((heads, dh))      # the learned key's direction: a unit vector, equal in every head
    u = (u / np.linalg.norm(u, axis=1, keepdims=True) / np.sqrt(heads)).reshape(-1).astype(np.float32)
    reach = np.float32(np.sqrt(sink * np.sqrt(dh) * heads))     # each head's q . k_sink / sqrt(dh) ~ sink

    def norm(x: str, out: str) -> str:
        gain, shift = (b.const(f"{out}_g", r.uniform(.5, 1.5, width).astype(np.float32)),
                       b.const(f"{out}_b", r.normal(0, .1, width).astype(np.float32)))
        if not spelled:
            return n("LayerNormalization", [x, gain, shift], out, axis=-1)
        centred = n("Sub", [x, n("ReduceMean", [x], f"{out}_mean", axes=[-1])], f"{out}_centred")
        squared = n("Pow", [centred, b.const(f"{out}_two", np.float32(2))], f"{out}_squared")
        spread = n("Add", [n("ReduceMean", [squared], f"{out}_variance", axes=[-1]),
                           b.const(f"{out}_eps", np.float32(1e-5))], f"{out}_shifted")
        normalized = n("Div", [centred, n("Sqrt", [spread], f"{out}_std")], f"{out}_normalized")
        return n("Add", [n("Mul", [normalized, gain], f"{out}_scaled"), shift], out)

    def split(t: str, rows: int, perm: list[int]) -> str:
        shaped = n("Reshape", [t, b.const(f"{t}_shape", np.array([1, rows, heads, dh], np.int64))], f"{t}_heads")
        return n("Transpose", [shaped], f"{t}_t", perm=perm)

    q = n("Add", [n("MatMul", [norm("x", "ln1"), b.weight("wq", width, width, scale=width ** -.5)], "q0"),
                  b.const("bq", u * reach * np.float32(dh ** .25))], "q")
    k = n("Concat", [b.const("k_sink", (u * reach / np.float32(dh ** .25))[None, None]),
                     n("MatMul", ["mem", b.weight("wk", width, width, scale=width ** -.5)], "k0")], "k", axis=1)
    v = n("Concat", [b.const("v_sink", np.zeros((1, 1, width), np.float32)),
                     n("MatMul", ["mem", b.weight("wv", width, width, scale=width ** -.5)], "v0")], "v", axis=1)
    if heads > 1:
        q, v = split(q, queries, [0, 2, 1, 3]), split(v, keys + 1, [0, 2, 1, 3])
        kt = split(k, keys + 1, [0, 2, 3, 1])
    else:
        kt = n("Transpose", [k], "kt", perm=[0, 2, 1])
    logits = n("Mul", [n("MatMul", [q, kt], "qk"), b.const("scale", np.float32(dh ** -.5))], "logits")
    ctx = n("MatMul", [n("Softmax", [logits], "attn", axis=-1), v], "ctx")
    if heads > 1:
        ctx = n("Reshape", [n("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]),
                            b.const("ctx_shape", np.array([1, queries, width], np.int64))], "ctx_merged")
    norm(n("MatMul", [ctx, b.weight("wo", width, width, scale=width ** -.5)], "o"), "y")
    return b.model("attention_decoder", {"x": [1, queries, width], "mem": [1, keys, width]},
                   {"y": [1, queries, width]}, opset=17)


def end_to_end_head(model: onnx.ModelProto, classes: int, k: int = 300, xywh: bool = True) -> onnx.ModelProto:
    """``model`` (one output [1, 4 + classes, anchors]: boxes in pixels, then class scores)
    with ultralytics' end-to-end post-processing appended as its ONNX export writes it
    (``v10postprocess``): Transpose to [1, anchors, 4 + classes], Split boxes / scores, the
    best class score per anchor (ReduceMax), TopK ``k`` anchors, GatherElements of their
    boxes and scores, TopK ``k`` of those scores flattened, class = index % classes, row =
    index // classes, GatherElements of the rows' boxes, Concat to one output ``dets``
    [1, k, 6] (x1, y1, x2, y2, score, class). ``xywh``: the boxes are centre and size
    (YOLOv8), turned into corners first."""
    raw = model.graph.output[0].name
    b = _Builder(0)
    n = b.node
    rows = n("Transpose", [raw], "e2e_rows", perm=[0, 2, 1])
    b.nodes.append(h.make_node("Split", [rows, b.const("e2e_split", np.array([4, classes], np.int64))],
                               ["e2e_boxes", "e2e_scores"], name="Split_e2e", axis=2))
    boxes = "e2e_boxes"
    if xywh:
        b.nodes.append(h.make_node("Split", [boxes, b.const("e2e_halves", np.array([2, 2], np.int64))],
                                   ["e2e_xy", "e2e_wh"], name="Split_e2e_xywh", axis=2))
        half = n("Mul", ["e2e_wh", b.const("e2e_half", np.float32(0.5))], "e2e_half_wh")
        boxes = n("Concat", [n("Sub", ["e2e_xy", half], "e2e_x1y1"), n("Add", ["e2e_xy", half], "e2e_x2y2")],
                  "e2e_xyxy", axis=2)
    best = n("ReduceMax", ["e2e_scores"], "e2e_best", axes=[2], keepdims=0)
    kk = b.const("e2e_k", np.array([k], np.int64))
    b.nodes.append(h.make_node("TopK", [best, kk], ["e2e_top", "e2e_anchor"], name="TopK_e2e_anchors", axis=1))
    anchor = n("Unsqueeze", ["e2e_anchor", b.const("e2e_axis2", np.array([2], np.int64))], "e2e_anchor3")
    box_idx = n("Tile", [anchor, b.const("e2e_tile4", np.array([1, 1, 4], np.int64))], "e2e_anchor_boxes")
    score_idx = n("Tile", [anchor, b.const("e2e_tilec", np.array([1, 1, classes], np.int64))], "e2e_anchor_scores")
    top_boxes = n("GatherElements", [boxes, box_idx], "e2e_top_boxes", axis=1)
    top_scores = n("GatherElements", ["e2e_scores", score_idx], "e2e_top_scores", axis=1)
    flat = n("Reshape", [top_scores, b.const("e2e_flat", np.array([1, -1], np.int64))], "e2e_flat_scores")
    b.nodes.append(h.make_node("TopK", [flat, kk], ["e2e_score", "e2e_index"], name="TopK_e2e_scores", axis=1))
    nc = b.const("e2e_classes", np.array(classes, np.int64))
    label = n("Cast", [n("Mod", ["e2e_index", nc], "e2e_label_i")], "e2e_label", to=TensorProto.FLOAT)
    row = n("Div", ["e2e_index", nc], "e2e_row")
    row_idx = n("Tile", [n("Unsqueeze", [row, "e2e_axis2"], "e2e_row3"), "e2e_tile4"], "e2e_row_boxes")
    det_boxes = n("GatherElements", [top_boxes, row_idx], "e2e_det_boxes", axis=1)
    n("Concat", [det_boxes, n("Unsqueeze", ["e2e_score", "e2e_axis2"], "e2e_score3"),
                 n("Unsqueeze", [label, "e2e_axis2"], "e2e_label3")], "dets", axis=2)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node.extend(b.nodes)
    m.graph.initializer.extend(b.inits)
    del m.graph.output[:]
    m.graph.output.append(h.make_tensor_value_info("dets", TensorProto.FLOAT, [1, k, 6]))
    onnx.checker.check_model(m)
    return m
