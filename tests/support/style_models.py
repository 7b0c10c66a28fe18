"""Arbitrary-style transfer networks in small, as Magenta's kind are built (and exported to ONNX).

A content picture and a style vector in, a stylized picture out: a conv encoder (reflect
``Pad`` + ``Conv`` + conditional instance normalization + ``Relu``), residual blocks,
nearest-neighbour upsampling (``Resize``) + conv decoder, a last conv + normalization +
``Sigmoid``. Conditional instance normalization takes each channel's mean and variance over
H, W at run time and scales and shifts by a gamma and a beta computed from the style vector
through ``MatMul`` + ``Add`` (run-time values, not constants). ``form`` spells it:

- ``"tf"``: as TensorFlow's ``nn.moments`` + ``nn.batch_normalization`` export (tf2onnx):
  ``inv = Reciprocal(Sqrt(var + eps)) * gamma``; ``x * inv + (beta - mean * inv)``;
- ``"centred"``: ``(x - mean) / Sqrt(var + eps) * gamma + beta``;
- ``"onnx"``: PyTorch's fast-style networks: ``InstanceNormalization`` with constant
  scale and bias (no style vector input).
"""
from __future__ import annotations

import numpy as np
import onnx

from .model_builders import _Builder

STYLE = 100


def _style_params(b: _Builder, name: str, c: int, nhwc: bool) -> tuple[str, str]:
    """gamma and beta [1, C, 1, 1] from the style vector [1, 100] through MatMul + Add each;
    ``nhwc``: [1, 1, 1, C] from the style bottleneck [1, 1, 1, 100] through a 1x1 Conv between
    Transposes each (as tf2onnx writes a TFLite CONV_2D)."""
    n = b.node
    out = []
    for what, centre in (("gamma", 1.0), ("beta", 0.0)):
        w = (b.rng.standard_normal((STYLE, c)) * .3 / np.sqrt(STYLE)).astype(np.float32)
        bias = (centre + b.rng.normal(0, .1, c)).astype(np.float32)
        v = f"{name}_{what}"
        if nhwc:
            t = n("Transpose", ["style"], f"{v}_nchw", perm=[0, 3, 1, 2])
            t = n("Conv", [t, b.const(f"{v}_w", w.T.reshape(c, STYLE, 1, 1).copy()), b.const(f"{v}_b", bias)],
                  f"{v}_cn")
            out.append(n("Transpose", [t], v, perm=[0, 2, 3, 1]))
            continue
        t = n("Add", [n("MatMul", ["style", b.const(f"{v}_w", w)], f"{v}_mm"), b.const(f"{v}_b", bias)], f"{v}_v")
        out.append(n("Reshape", [t, b.const(f"{v}_shape", np.array([1, c, 1, 1], np.int64))], v))
    return out[0], out[1]


def _norm(b: _Builder, x: str, name: str, c: int, form: str, nhwc: bool = False, eps: float = 1e-3) -> str:
    n = b.node
    if form == "onnx":
        return n("InstanceNormalization", [x, b.const(f"{name}_s", b.rng.uniform(.6, 1.4, c).astype(np.float32)),
                                           b.const(f"{name}_b", b.rng.normal(0, .2, c).astype(np.float32))],
                 f"{name}_out", epsilon=eps)
    gamma, beta = _style_params(b, name, c, nhwc)
    axes = [1, 2] if nhwc else [2, 3]
    epsilon = b.const(f"{name}_eps", np.float32(eps))
    mean = n("ReduceMean", [x], f"{name}_mean", axes=axes, keepdims=1)
    d = n("Sub", [x, mean], f"{name}_d")
    var = n("ReduceMean", [n("Mul", [d, d], f"{name}_sq")], f"{name}_var", axes=axes, keepdims=1)
    std = n("Sqrt", [n("Add", [var, epsilon], f"{name}_ve")], f"{name}_std")
    if form == "centred":
        return n("Add", [n("Mul", [n("Div", [d, std], f"{name}_n"), gamma], f"{name}_s"), beta], f"{name}_out")
    inv = n("Mul", [n("Reciprocal", [std], f"{name}_r"), gamma], f"{name}_inv")
    shift = n("Sub", [beta, n("Mul", [mean, inv], f"{name}_mi")], f"{name}_shift")
    return n("Add", [n("Mul", [x, inv], f"{name}_xs"), shift], f"{name}_out")


def _conv(b: _Builder, x: str, name: str, cin: int, cout: int, k: int, stride: int = 1, nhwc: bool = False,
          spread: float = 1.0) -> str:
    """Reflect Pad + Conv; ``nhwc``: on NHWC values, the Conv between Transposes (tf2onnx's
    spelling of a TFLite CONV_2D before its optimizer)."""
    p = k // 2
    pads = [0, p, p, 0, 0, p, p, 0] if nhwc else [0, 0, p, p, 0, 0, p, p]
    padded = b.node("Pad", [x, b.const(f"{name}_pads", np.array(pads, np.int64))], f"{name}_pad", mode="reflect")
    if nhwc:
        padded = b.node("Transpose", [padded], f"{name}_nchw", perm=[0, 3, 1, 2])
    gains = spread ** -b.rng.uniform(0, 1, cout)       # output channels of sizes 1 .. 1 / spread
    weights = b.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)) * gains[:, None, None, None]
    w, bias = b.const(f"{name}_w", weights.astype(np.float32)), b.const(f"{name}_bias", (
        b.rng.standard_normal(cout) * .1 * gains).astype(np.float32))
    y = b.node("Conv", [padded, w, bias],
               f"{name}_c" if not nhwc else f"{name}_cn", strides=[stride, stride])
    return b.node("Transpose", [y], f"{name}_c", perm=[0, 2, 3, 1]) if nhwc else y


def style_transfer(size: int = 32, width: int = 8, form: str = "tf", seed: int = 3,
                   nhwc: bool = False, blocks: int = 1, spread: float = 1.0, eps: float = 1e-3) -> onnx.ModelProto:
    """Inputs ``content`` [1, 3, size, size] ([1, size, size, 3] ``nhwc``) in [0, 1] and
    (but for ``form="onnx"``) ``style`` [1, 100]; output ``stylized`` of the content's
    shape, in (0, 1); ``blocks`` residual blocks. A trained network's convolutions give
    channels of very different sizes, which the normalization after them evens out:
    ``spread`` makes the smallest output channel of each ``1 / spread`` times the largest;
    ``eps`` the normalizations' epsilon."""
    b = _Builder(seed)
    n = b.node
    w = width

    def block(x: str, name: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
        return _norm(b, _conv(b, x, f"{name}c", cin, cout, k, stride, nhwc, spread), f"{name}n", cout, form, nhwc,
                     eps)
    h = n("Relu", [block("content", "e1", 3, w, 5)], "r1")
    h = n("Relu", [block(h, "e2", w, 2 * w, 3, 2)], "r2")
    for k in range(blocks):
        r = n("Relu", [block(h, f"r{k}a", 2 * w, 2 * w, 3)], f"rr{k}")
        h = n("Add", [h, block(r, f"r{k}b", 2 * w, 2 * w, 3)], f"res{k}")
    scales = [1, 2, 2, 1] if nhwc else [1, 1, 2, 2]
    up = n("Resize", [h, "", b.const("up_scales", np.array(scales, np.float32))], "up", mode="nearest")
    h = n("Relu", [block(up, "d1", 2 * w, w, 3)], "r5")
    n("Sigmoid", [block(h, "d2", w, 3, 5)], "stylized")
    shape = [1, size, size, 3] if nhwc else [1, 3, size, size]
    inputs = {"content": shape}
    if form != "onnx":
        inputs["style"] = [1, 1, 1, STYLE] if nhwc else [1, STYLE]
    return b.model(f"style_transfer_{form}", inputs, {"stylized": shape})


def feeds(count: int, size: int = 32, seed: int = 0, style: bool = True,
          nhwc: bool = False) -> list[dict[str, np.ndarray]]:
    """Smooth pictures in [0, 1] (blobs and gradients, as photos are) and style vectors as a
    style predictor gives them (a bottleneck's values, mostly small, a few of them larger)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = []
    for _ in range(count):
        pic = np.empty((1, 3, size, size), np.float32)
        for c in range(3):
            cx, cy, s = rng.uniform(0, 1, 3)
            pic[0, c] = .5 + .4 * np.sin(6 * (xx * cx + yy * cy) + s * 6) * np.exp(-((xx - cx) ** 2) * 2)
        pic = np.clip(pic + rng.normal(0, .03, pic.shape), 0, 1).astype(np.float32)
        feed = {"content": pic.transpose(0, 2, 3, 1).copy() if nhwc else pic}
        if style:
            v = rng.standard_normal((1, STYLE)) * rng.uniform(.2, 1.5)
            feed["style"] = v.reshape((1, 1, 1, STYLE) if nhwc else (1, STYLE)).astype(np.float32)
        out.append(feed)
    return out



def qdq_style_norm(size: int = 16, channels: int = 8, spread: float = 3.0, seed: int = 4,
                   calibration: list[dict[str, np.ndarray]] | None = None) -> onnx.ModelProto:
    """An int8 QDQ model as tf2onnx writes a quantized TensorFlow style network: ``content``
    [1, 3, size, size] -> Conv -> conditional-instance-norm spelling -> Relu -> Conv ->
    ``stylized``, a QuantizeLinear -> DequantizeLinear pair on each value the int8 model
    holds (the grids from the float values over ``calibration``, default ``feeds(4, size)``).

    The norm is TensorFlow's ``nn.moments`` + ``nn.batch_normalization`` with the means as
    GlobalAveragePool; the per-channel mean goes int8 through ``Reshape`` to [1, C, 1, 1]
    (tf2onnx's NHWC Transpose) before the Sub; ``(x - mean)^2`` and the variance on grids
    starting at 0 (zero point -128), the variance's several times finer than the squares'.
    The conv's output channels are 1 .. ``spread`` times apart in size, as a trained
    network's are."""
    b = _Builder(seed)
    n = b.node
    feeds_ = calibration if calibration is not None else [{"content": f["content"]} for f in feeds(4, size)]
    c = channels
    gains = spread ** -np.linspace(0, 1, c)
    w1 = b.rng.standard_normal((c, 3, 3, 3)) * np.sqrt(2 / 27) * gains[:, None, None, None]
    bias1 = b.rng.standard_normal(c) * .1 * gains
    w2 = b.rng.standard_normal((3, c, 3, 3)) * np.sqrt(2 / (9 * c))
    gamma, beta = b.rng.uniform(.6, 1.4, c) * np.where(np.arange(c) == 1, -1, 1), b.rng.normal(0, .2, c)

    def float_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
        import onnxruntime as ort  # 0.3 s to import: only the builder's calibration needs it
        names = [vi.name for vi in model.graph.output]
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        runs = [session.run(names, f) for f in feeds_]
        return {name: np.stack([r[k] for r in runs]) for k, name in enumerate(names)}

    def build(grids: dict[str, np.ndarray] | None) -> onnx.ModelProto:
        b.nodes, b.inits = [], []
        made: list[str] = []

        def grid(value: str, name: str, from_zero: bool) -> tuple[str, str]:
            """The scale and zero point of ``value``'s calibrated range."""
            lo, hi = min(float(grids[value].min()), 0.0), max(float(grids[value].max()), 0.0)
            scale = max(hi - lo, 1e-8) / 255
            zero = -128 if from_zero else int(np.clip(np.round(-128 - lo / scale), -128, 127))
            return b.const(f"{name}_s", np.float32(scale)), b.const(f"{name}_z", np.int8(zero))

        def pair(value: str, name: str, from_zero: bool = False) -> str:
            """``value`` through a Q -> DQ pair on its calibrated grid (nothing while calibrating)."""
            made.append(value)
            if grids is None:
                return value
            s, z = grid(value, name, from_zero)
            return n("DequantizeLinear", [n("QuantizeLinear", [value, s, z], f"{name}_q"), s, z], f"{name}_dq")

        def weight(name: str, values: np.ndarray) -> str:
            if grids is None:
                return b.const(name, values.astype(np.float32))
            scale = np.abs(values).reshape(values.shape[0], -1).max(axis=1) / 127
            q = np.round(values / scale.reshape((-1,) + (1,) * (values.ndim - 1))).astype(np.int8)
            return n("DequantizeLinear", [b.const(f"{name}_i8", q), b.const(f"{name}_ws", scale.astype(np.float32)),
                                          b.const(f"{name}_wz", np.zeros(values.shape[0], np.int8))], name, axis=0)
        x = pair("content", "in")
        pads = [0, 0, 1, 1, 0, 0, 1, 1]
        x = n("Pad", [x, b.const("pads1", np.array(pads, np.int64))], "pad1", mode="reflect")
        conv = pair(n("Conv", [x, weight("w1", w1), b.const("b1", bias1.astype(np.float32))], "conv1"), "conv1")
        mean = n("GlobalAveragePool", [conv], "mean")
        made.append(mean)
        shape = b.const("chan_shape", np.array([1, c, 1, 1], np.int64))
        if grids is None:
            mean_f, moved = mean, n("Reshape", [mean, shape], "mean_moved")
        else:        # tf2onnx: the int8 mean's Reshape (its NHWC Transpose) before the pair's DQ
            s, z = grid(mean, "mean", False)
            q = n("QuantizeLinear", [mean, s, z], "mean_q")
            mean_f = n("DequantizeLinear", [q, s, z], "mean_dq")
            moved = n("DequantizeLinear", [n("Reshape", [q, shape], "mean_moved_q"), s, z], "mean_moved")
        d = n("Sub", [conv, moved], "diff")
        squares = pair(n("Mul", [d, d], "squares"), "squares", from_zero=True)
        var = pair(n("GlobalAveragePool", [squares], "variance"), "variance", from_zero=True)
        eps = b.const("eps", np.float32(1e-5))
        shifted = pair(n("Add", [var, eps], "shifted"), "shifted", from_zero=True)
        inverse = pair(n("Reciprocal", [n("Sqrt", [shifted], "std")], "inverse"), "inverse", from_zero=True)
        g = b.const("gamma", gamma.reshape(1, c, 1, 1).astype(np.float32))
        inv = pair(n("Mul", [inverse, g], "inv"), "inv")
        mean_inv = pair(n("Mul", [mean_f, inv], "mean_inv"), "mean_inv")
        shift = pair(n("Sub", [b.const("beta", beta.reshape(1, c, 1, 1).astype(np.float32)), mean_inv], "shift"),
                     "shift")
        scaled = pair(n("Mul", [conv, inv], "scaled"), "scaled")
        r = pair(n("Relu", [n("Add", [scaled, shift], "normed")], "relu"), "relu", from_zero=True)
        r = n("Pad", [r, b.const("pads2", np.array(pads, np.int64))], "pad2", mode="reflect")
        n("Conv", [r, weight("w2", w2), b.const("b2", np.zeros(3, np.float32))], "stylized")
        outputs = {"stylized": [1, 3, size, size]}
        if grids is None:
            outputs.update({v: [] for v in made})
        m = b.model("qdq_style_norm", {"content": [1, 3, size, size]}, outputs)
        if grids is None:          # the intermediate outputs' shapes: whatever they compute
            for vi in m.graph.output[1:]:
                vi.type.tensor_type.ClearField("shape")
        return m
    return build(float_values(build(None)))
