"""ONNX graphs built with ``onnx.helper`` the way PyTorch's exporter writes them (no torch
needed): ``F.pad`` whose pads come from shape arithmetic, ``F.interpolate`` whose output
size does, a YOLOv8-style detection head
whose anchors and strides come from Shape / Range / Expand arithmetic, an ``If`` on a
shape test, and a declared output shape that disagrees with inference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from .model_builders import _Builder

INT64_MIN = np.iinfo(np.int64).min


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _dim(b: _Builder, x: str, axis: int, out: str) -> str:
    """``x.shape[axis]`` as torch traces it: a 0-d int64 from Shape -> Gather."""
    b.node("Shape", [x], f"{out}_shape")
    return b.node("Gather", [f"{out}_shape", b.const(f"{out}_axis", np.int64(axis))], out, axis=0)


def _unsqueeze0(b: _Builder, x: str, opset: int = 13) -> str:
    if opset < 13:    # axes an attribute until opset 13
        return b.node("Unsqueeze", [x], f"{x}_1d", axes=[0])
    return b.node("Unsqueeze", [x, b.const(f"{x}_ax0", _i64(0))], f"{x}_1d")


def torch_pad_paddings(b: _Builder, x: str, pad: str, out: str) -> str:
    """torch.onnx's ``_prepare_onnx_paddings`` (opset 11+) for an input of unknown rank:
    torch's ``[last_begin, last_end, ...]`` list padded with zeros to ``2 * rank`` by
    ConstantOfShape, reshaped to pairs, flipped by a Slice of step -1, transposed and
    flattened to ONNX's ``[begins..., ends...]``."""
    n = b.node
    n("Shape", [pad], f"{out}_padshape")
    n("Gather", [f"{out}_padshape", b.const(f"{out}_zero", _i64(0))], f"{out}_padlen", axis=0)
    n("Shape", [x], f"{out}_xshape")
    n("Size", [f"{out}_xshape"], f"{out}_rank")
    n("Mul", [f"{out}_rank", b.const(f"{out}_two", np.int64(2))], f"{out}_rank2")
    n("Sub", [f"{out}_rank2", f"{out}_padlen"], f"{out}_ext")
    n("Cast", [pad], f"{out}_pad64", to=TensorProto.INT64)
    b.nodes.append(h.make_node("ConstantOfShape", [f"{out}_ext"], [f"{out}_zeros"], name=f"{out}_cos",
                               value=h.make_tensor("v", TensorProto.INT64, [1], [0])))
    n("Concat", [f"{out}_pad64", f"{out}_zeros"], f"{out}_cat", axis=0)
    n("Reshape", [f"{out}_cat", b.const(f"{out}_pairs", _i64(-1, 2))], f"{out}_pairs2")
    n("Slice", [f"{out}_pairs2", b.const(f"{out}_st", _i64(-1)), b.const(f"{out}_en", _i64(INT64_MIN)),
                b.const(f"{out}_ax", _i64(0)), b.const(f"{out}_sp", _i64(-1))], f"{out}_flip")
    n("Transpose", [f"{out}_flip"], f"{out}_t", perm=[1, 0])
    n("Reshape", [f"{out}_t", b.const(f"{out}_flat", _i64(-1))], f"{out}_flat1")
    return n("Cast", [f"{out}_flat1"], out, to=TensorProto.INT64)


def torch_pad_to_multiple(seed: int = 20, shape: tuple[int, int, int, int] = (1, 3, 10, 13),
                          multiple: int = 8, opset: int = 13) -> onnx.ModelProto:
    """``F.pad(x, (0, pw, 0, ph))`` with ``ph, pw`` rounding H and W up to ``multiple``
    (as OCR detectors pad their input), then a Conv. Output ``[1, 4, H', W']``; ``opset``
    11 or 12 writes Unsqueeze's axes as an attribute."""
    b = _Builder(seed)
    n = b.node
    m = b.const("mult", np.int64(multiple))
    extra = []
    for axis in (3, 2):      # torch's order: last axis first
        d = _dim(b, "x", axis, f"d{axis}")
        n("Mod", [d, m], f"r{axis}")
        n("Sub", [m, f"r{axis}"], f"s{axis}")
        n("Mod", [f"s{axis}", m], f"p{axis}")
        extra.append(_unsqueeze0(b, f"p{axis}", opset))
    zero = b.const("z1", _i64(0))
    n("Concat", [zero, extra[0], zero, extra[1]], "pad", axis=0)
    torch_pad_paddings(b, "x", "pad", "pads")
    n("Pad", ["x", "pads", b.const("pad_value", np.float32(0))], "xp", mode="constant")
    n("Conv", ["xp", b.weight("w", 4, shape[1], 3, 3), b.weight("bias", 4, scale=.1)], "y", pads=[1, 1, 1, 1])
    up = [-(-s // multiple) * multiple for s in shape[2:]]
    return b.model("torch_pad", {"x": list(shape)}, {"y": [shape[0], 4, *up]}, opset=opset)


def torch_interpolate(seed: int = 24, shape: tuple[int, int, int, int] = (1, 3, 5, 6)) -> onnx.ModelProto:
    """``F.interpolate(x, scale_factor=2, recompute_scale_factor=True)`` as traced: the
    output size ``floor(H * 2), floor(W * 2)`` from Shape -> Slice -> Cast -> Mul -> Floor
    -> Cast, concatenated with N, C into Resize's ``sizes``. Output ``[N, C, 2H, 2W]``."""
    b = _Builder(seed)
    n = b.node
    n("Shape", ["x"], "s")
    n("Slice", ["s", b.const("st0", _i64(0)), b.const("en2", _i64(2))], "nc")
    n("Slice", ["s", b.const("st2", _i64(2)), b.const("en4", _i64(4))], "hw")
    n("Cast", ["hw"], "hwf", to=TensorProto.FLOAT)
    n("Mul", ["hwf", b.const("scale", np.array([2, 2], np.float32))], "hw2")
    n("Floor", ["hw2"], "hw2f")
    n("Cast", ["hw2f"], "hw2i", to=TensorProto.INT64)
    n("Concat", ["nc", "hw2i"], "sizes", axis=0)
    n("Resize", ["x", "", "", "sizes"], "y", mode="nearest", coordinate_transformation_mode="asymmetric",
      nearest_mode="floor")
    return b.model("torch_interpolate", {"x": list(shape)}, {"y": [*shape[:2], 2 * shape[2], 2 * shape[3]]})


def _make_anchors(b: _Builder, feat: str, stride: float, i: int) -> tuple[str, str]:
    """ultralytics' ``make_anchors`` for one level as traced: Range over the feature
    map's H and W (+0.5), meshgrid as Reshape + Expand, stack, view(-1, 2), and
    ``torch.full((h * w, 1), stride)`` as ConstantOfShape."""
    n = b.node
    hh, ww = _dim(b, feat, 2, f"hgt{i}"), _dim(b, feat, 3, f"wid{i}")
    zero, one = b.const(f"r0_{i}", np.int64(0)), b.const(f"r1_{i}", np.int64(1))
    half = b.const(f"half_{i}", np.float32(0.5))
    for ax, d in (("x", ww), ("y", hh)):
        n("Range", [zero, d, one], f"ar{ax}{i}")
        n("Cast", [f"ar{ax}{i}"], f"arf{ax}{i}", to=TensorProto.FLOAT)
        n("Add", [f"arf{ax}{i}", half], f"s{ax}{i}")
    # torch.meshgrid(sy, sx, indexing="ij")
    n("Shape", [f"sy{i}"], f"shy{i}")
    n("Shape", [f"sx{i}"], f"shx{i}")
    n("Concat", [f"shy{i}", f"shx{i}"], f"grid{i}", axis=0)
    n("Reshape", [f"sy{i}", b.const(f"col{i}", _i64(-1, 1))], f"syc{i}")
    n("Reshape", [f"sx{i}", b.const(f"row{i}", _i64(1, -1))], f"sxr{i}")
    n("Expand", [f"syc{i}", f"grid{i}"], f"gy{i}")
    n("Expand", [f"sxr{i}", f"grid{i}"], f"gx{i}")
    n("Unsqueeze", [f"gx{i}", b.const(f"last{i}", _i64(-1))], f"ux{i}")
    n("Unsqueeze", [f"gy{i}", f"last{i}"], f"uy{i}")
    n("Concat", [f"ux{i}", f"uy{i}"], f"st{i}", axis=-1)
    n("Reshape", [f"st{i}", b.const(f"pairs{i}", _i64(-1, 2))], f"anchors{i}")
    n("Mul", [hh, ww], f"hw{i}")
    hw1 = _unsqueeze0(b, f"hw{i}")
    n("Concat", [hw1, b.const(f"one1_{i}", _i64(1))], f"fshape{i}", axis=0)
    b.nodes.append(h.make_node("ConstantOfShape", [f"fshape{i}"], [f"strides{i}"], name=f"full{i}",
                               value=h.make_tensor("v", TensorProto.FLOAT, [1], [stride])))
    return f"anchors{i}", f"strides{i}"


def yolov8_head(seed: int = 21, nc: int = 3, reg_max: int = 4) -> onnx.ModelProto:
    """A YOLOv8-style detector as ultralytics exports it, small: two levels (strides 4
    and 8) of 1x1 Conv heads, flattened with shape arithmetic and concatenated; DFL
    (softmax over ``reg_max`` bins, a Conv by arange); anchors and strides from
    ``make_anchors``; ``dist2bbox`` to xywh times the strides; output
    ``Concat(boxes, Sigmoid(class scores))`` of shape ``[1, 4 + nc, 80]``. Input
    ``[1, 3, 32, 32]``."""
    b = _Builder(seed)
    n = b.node
    no = 4 * reg_max + nc
    n("Conv", ["x", b.weight("w0", 8, 3, 3, 3)], "c0", pads=[1, 1, 1, 1], strides=[2, 2])
    n("Relu", ["c0"], "f0")
    n("Conv", ["f0", b.weight("w1", 8, 8, 3, 3)], "c1", pads=[1, 1, 1, 1], strides=[2, 2])
    n("Relu", ["c1"], "p3")
    n("Conv", ["p3", b.weight("w2", 8, 8, 3, 3)], "c2", pads=[1, 1, 1, 1], strides=[2, 2])
    n("Relu", ["c2"], "p4")
    flat, anchors, strides = [], [], []
    for i, (feat, stride) in enumerate((("p3", 4.0), ("p4", 8.0))):
        n("Conv", [feat, b.weight(f"wh{i}", no, 8, 1, 1), b.weight(f"bh{i}", no, scale=.5)], f"head{i}")
        bs = _unsqueeze0(b, _dim(b, f"head{i}", 0, f"b{i}"))
        n("Concat", [bs, b.const(f"no{i}", _i64(no)), b.const(f"m1_{i}", _i64(-1))], f"view{i}", axis=0)
        flat.append(n("Reshape", [f"head{i}", f"view{i}"], f"flat{i}"))
        a, s = _make_anchors(b, feat, stride, i)
        anchors.append(a)
        strides.append(s)
    n("Concat", flat, "xcat", axis=2)
    n("Concat", anchors, "anc", axis=0)
    n("Concat", strides, "strd", axis=0)
    n("Transpose", ["anc"], "ancT", perm=[1, 0])
    n("Unsqueeze", ["ancT", b.const("ax0", _i64(0))], "anchor")
    n("Transpose", ["strd"], "stride", perm=[1, 0])
    b.nodes.append(h.make_node("Split", ["xcat", b.const("split", _i64(4 * reg_max, nc))], ["box", "cls"],
                               name="split", axis=1))
    # DFL: view(b, 4, reg_max, a).transpose(2, 1).softmax(1), Conv by arange, view(b, 4, a)
    bb = _unsqueeze0(b, _dim(b, "box", 0, "bb"))
    aa = _unsqueeze0(b, _dim(b, "box", 2, "aa"))
    n("Concat", [bb, b.const("four", _i64(4)), b.const("rm", _i64(reg_max)), aa], "dflshape", axis=0)
    n("Reshape", ["box", "dflshape"], "dfl0")
    n("Transpose", ["dfl0"], "dfl1", perm=[0, 2, 1, 3])
    n("Softmax", ["dfl1"], "dfl2", axis=1)
    n("Conv", ["dfl2", b.const("arange", np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1))], "dfl3")
    n("Concat", [bb, b.const("four2", _i64(4)), aa], "distshape", axis=0)
    n("Reshape", ["dfl3", "distshape"], "dist")
    # dist2bbox(xywh=True, dim=1)
    b.nodes.append(h.make_node("Split", ["dist", b.const("halves", _i64(2, 2))], ["lt", "rb"], name="chunk",
                               axis=1))
    n("Sub", ["anchor", "lt"], "x1y1")
    n("Add", ["anchor", "rb"], "x2y2")
    n("Add", ["x1y1", "x2y2"], "csum")
    n("Div", ["csum", b.const("two", np.float32(2))], "cxy")
    n("Sub", ["x2y2", "x1y1"], "wh")
    n("Concat", ["cxy", "wh"], "xywh", axis=1)
    n("Mul", ["xywh", "stride"], "dbox")
    n("Sigmoid", ["cls"], "scores")
    n("Concat", ["dbox", "scores"], "y", axis=1)
    return b.model("yolov8_head", {"x": [1, 3, 32, 32]}, {"y": [1, 4 + nc, 80]})


def if_on_shape(seed: int = 22) -> onnx.ModelProto:
    """``if x.shape[1] == 3: y = x * 2 + c else: y = x`` as a scripted exporter writes it:
    Equal on Shape -> Gather, and an If whose branches read the outer scope; a Relu on
    its result. Input ``[1, 3, 4, 4]``."""
    b = _Builder(seed)
    c = b.const("c", np.float32(0.25))
    d = _dim(b, "x", 1, "ch")
    b.node("Equal", [d, b.const("three", np.int64(3))], "is3")
    out = h.make_tensor_value_info("t", TensorProto.FLOAT, None)
    then = h.make_graph([h.make_node("Mul", ["x", "two"], ["m"]), h.make_node("Add", ["m", c], ["t"])], "then",
                        [], [out], [onnx.numpy_helper.from_array(np.float32(2), "two")])
    other = h.make_graph([h.make_node("Identity", ["x"], ["t"])], "else", [], [out])
    b.nodes.append(h.make_node("If", ["is3"], ["branch"], name="if", then_branch=then, else_branch=other))
    b.node("Relu", ["branch"], "y")
    return b.model("if_on_shape", {"x": [1, 3, 4, 4]}, {"y": [1, 3, 4, 4]})


def declared_output_mismatch() -> onnx.ModelProto:
    """A model exported with batch 2 whose input's batch is free (fixed to 1 at import)
    and whose output and intermediate ``value_info`` still declare 2: what onnxruntime
    runs with a warning. ``r + ConstantOfShape(Shape(r), 0.5)``: folding must take r's
    shape from its input, not from the stale declaration."""
    b = _Builder(23)
    b.node("Relu", ["x"], "r")
    b.node("Shape", ["r"], "rs")
    b.nodes.append(h.make_node("ConstantOfShape", ["rs"], ["half"], value=h.make_tensor("v", TensorProto.FLOAT,
                                                                                        [1], [0.5])))
    b.node("Add", ["r", "half"], "a")
    b.node("Sigmoid", ["a"], "y")
    g = h.make_graph(b.nodes, "mismatch", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                     value_info=[h.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def length_output(seed: int = 25, length: int = 16) -> onnx.ModelProto:
    """A speech model's second output, its sequence length ``x.shape[2]`` as int64 ``[1]``
    (NeMo's ``signal_len``): Shape -> Gather -> Unsqueeze, folded to a constant once the
    input's shape is fixed, beside a Conv over ``[1, 2, length, 1]``."""
    b = _Builder(seed)
    b.node("Conv", ["x", b.weight("w", 4, 2, 3, 1), b.weight("bias", 4, scale=.1)], "y", pads=[1, 0, 1, 0])
    _unsqueeze0(b, _dim(b, "x", 2, "len0"))
    b.node("Identity", ["len0_1d"], "x_len")
    g = h.make_graph(b.nodes, "length_output", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, length, 1])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, length, 1]),
                      h.make_tensor_value_info("x_len", TensorProto.INT64, [1])], b.inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m
