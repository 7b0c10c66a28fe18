"""A numpy float reference interpreter for the IR (used for calibration and checks).

Values flow as float32 "real" numbers. Quantized tensors are simulated: a quantized
constant or input is dequantized when read, and every quantized op output is rounded
to its int grid (quantize then dequantize) when written. On a float graph this is a
plain float interpreter; on an int8 graph it approximates the int8 kernels to within
the rounding of the fixed-point requantization (a few LSBs), which is what a quick
sanity check of an imported int8 model needs. Bit-exact int8 results come from the
chip's kernels, not from here.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .ir import Graph, IRError, Op, Tensor

__all__ = ["FloatInterpreter", "run_float", "OPS"]


def _activation(x: np.ndarray, act: str) -> np.ndarray:
    if act == "NONE":
        return x
    if act == "RELU":
        return np.maximum(x, 0)
    if act == "RELU6":
        return np.clip(x, 0, 6)
    if act == "RELU_N1_TO_1":
        return np.clip(x, -1, 1)
    raise IRError(f"unknown fused activation {act!r}")


def _pad_nhwc(x: np.ndarray, pads: tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    top, bottom, left, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def _windows(x: np.ndarray, kh: int, kw: int, stride, dilation, pads, value=0.0) -> np.ndarray:
    """(N, OH, OW, C, KH, KW) strided view of the padded input."""
    xp = _pad_nhwc(x, pads, value)
    dh, dw = dilation
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    return win[:, ::stride[0], ::stride[1], :, ::dh, ::dw]


def conv2d(x, w, b, *, stride, dilation, pads, groups, activation) -> np.ndarray:
    cout, kh, kw, cin_g = w.shape
    win = _windows(x, kh, kw, stride, dilation, pads)
    outs = []
    cout_g = cout // groups
    for g in range(groups):
        patches = win[:, :, :, g * cin_g:(g + 1) * cin_g]
        wg = w[g * cout_g:(g + 1) * cout_g].transpose(3, 1, 2, 0)  # (Cin_g, KH, KW, Cout_g)
        outs.append(np.tensordot(patches, wg, axes=([3, 4, 5], [0, 1, 2])))
    y = outs[0] if groups == 1 else np.concatenate(outs, axis=3)
    if b is not None:
        y = y + b
    return _activation(y.astype(np.float32), activation)


def depthwise_conv2d(x, w, b, *, stride, dilation, pads, depth_multiplier, activation) -> np.ndarray:
    _, kh, kw, cout = w.shape
    if depth_multiplier > 1:
        x = np.repeat(x, depth_multiplier, axis=3)
    xp = _pad_nhwc(x, pads)
    n, hp, wp, _ = xp.shape
    sh, sw = stride
    dh, dw = dilation
    oh = (hp - (kh - 1) * dh - 1) // sh + 1
    ow = (wp - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, oh, ow, cout), np.float32)
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw] * w[0, i, j]
    if b is not None:
        y = y + b
    return _activation(y, activation)


def pool(x, *, kind: str, filter, stride, pads, activation) -> np.ndarray:
    kh, kw = filter
    if kind == "max":
        win = _windows(x, kh, kw, stride, (1, 1), pads, value=-np.inf)
        y = win.max(axis=(4, 5))
    else:
        # TFLite averages over the valid (unpadded) elements only.
        win = _windows(x, kh, kw, stride, (1, 1), pads)
        ones = np.ones((1,) + x.shape[1:3] + (1,), np.float32)
        cnt = _windows(ones, kh, kw, stride, (1, 1), pads).sum(axis=(4, 5))
        y = win.sum(axis=(4, 5)) / cnt
    return _activation(y.astype(np.float32), activation)


def _resize_coords(out_size: int, in_size: int, align: bool, half: bool):
    scale = (in_size - 1) / (out_size - 1) if align and out_size > 1 else in_size / out_size
    return np.arange(out_size, dtype=np.float64), scale


def resize_bilinear(x, *, size, align_corners, half_pixel_centers) -> np.ndarray:
    out = x
    for axis, (osz) in ((1, size[0]), (2, size[1])):
        isz = out.shape[axis]
        pos, scale = _resize_coords(osz, isz, align_corners, half_pixel_centers)
        src = (pos + 0.5) * scale - 0.5 if half_pixel_centers else pos * scale
        lo = np.maximum(np.floor(src), 0).astype(np.int64)
        hi = np.minimum(np.ceil(src), isz - 1).astype(np.int64)
        frac = (src - np.floor(src)).astype(np.float32)
        shape = [1] * out.ndim
        shape[axis] = osz
        frac = frac.reshape(shape)
        out = np.take(out, lo, axis=axis) * (1 - frac) + np.take(out, hi, axis=axis) * frac
    return out.astype(np.float32)


def resize_nearest(x, *, size, align_corners, half_pixel_centers) -> np.ndarray:
    out = x
    for axis, osz in ((1, size[0]), (2, size[1])):
        isz = out.shape[axis]
        pos, scale = _resize_coords(osz, isz, align_corners, half_pixel_centers)
        off = 0.5 if half_pixel_centers else 0.0
        src = np.round((pos + off) * scale) if align_corners else np.floor((pos + off) * scale)
        idx = np.clip(src.astype(np.int64), 0, isz - 1)
        out = np.take(out, idx, axis=axis)
    return out


def softmax(x, *, beta) -> np.ndarray:
    z = (x - x.max(axis=-1, keepdims=True)) * beta
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _fc(x, w, b, *, activation, keep_num_dims, out_shape) -> np.ndarray:
    y = x.reshape(-1, w.shape[1]) @ w.T
    if b is not None:
        y = y + b
    return _activation(y, activation).reshape(out_shape)


def _strided_slice(x: np.ndarray, op: Op, out: Tensor) -> np.ndarray:
    # begin/end are resolved, non-negative indices; end -1 with a negative stride means
    # "through index 0", which a Python slice spells as None.
    index = tuple(slice(b, None if (e < 0 and s < 0) else e, s)
                  for b, e, s in zip(op.attrs["begin"], op.attrs["end"], op.attrs["strides"]))
    return x[index].reshape(out.shape)


def _binary(fn: Callable) -> Callable:
    return lambda op, ins, out: _activation(fn(ins[0], ins[1]).astype(np.float32), op.attrs.get("activation", "NONE"))


OPS: dict[str, Callable[[Op, list, Tensor], np.ndarray]] = {
    "CONV_2D": lambda op, ins, out: conv2d(ins[0], ins[1], ins[2], **op.attrs),
    "DEPTHWISE_CONV_2D": lambda op, ins, out: depthwise_conv2d(ins[0], ins[1], ins[2], **op.attrs),
    "FULLY_CONNECTED": lambda op, ins, out: _fc(ins[0], ins[1], ins[2], out_shape=out.shape, **op.attrs),
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "MAX_POOL_2D": lambda op, ins, out: pool(ins[0], kind="max", **op.attrs),
    "AVERAGE_POOL_2D": lambda op, ins, out: pool(ins[0], kind="avg", **op.attrs),
    "RESHAPE": lambda op, ins, out: ins[0].reshape(out.shape),
    "SOFTMAX": lambda op, ins, out: softmax(ins[0], **op.attrs),
    "CONCATENATION": lambda op, ins, out: _activation(
        np.concatenate(ins, axis=op.attrs["axis"]), op.attrs.get("activation", "NONE")),
    "PAD": lambda op, ins, out: np.pad(ins[0], op.attrs["paddings"]),
    "RELU": lambda op, ins, out: np.maximum(ins[0], 0),
    "RELU6": lambda op, ins, out: np.clip(ins[0], 0, 6),
    "RELU_N1_TO_1": lambda op, ins, out: np.clip(ins[0], -1, 1),
    "LOGISTIC": lambda op, ins, out: (1 / (1 + np.exp(-ins[0]))).astype(np.float32),
    "TANH": lambda op, ins, out: np.tanh(ins[0]),
    # In the real-valued domain both are identities; the write path applies the grid.
    "QUANTIZE": lambda op, ins, out: ins[0],
    "DEQUANTIZE": lambda op, ins, out: ins[0],
    "MEAN": lambda op, ins, out: ins[0].mean(axis=op.attrs["axes"], keepdims=op.attrs["keep_dims"]),
    "TRANSPOSE": lambda op, ins, out: ins[0].transpose(op.attrs["perm"]),
    "RESIZE_BILINEAR": lambda op, ins, out: resize_bilinear(ins[0], **op.attrs),
    "RESIZE_NEAREST_NEIGHBOR": lambda op, ins, out: resize_nearest(ins[0], **op.attrs),
    "STRIDED_SLICE": lambda op, ins, out: _strided_slice(ins[0], op, out),
}


def _to_real(t: Tensor, value: np.ndarray) -> np.ndarray:
    if t.quant is not None and t.dtype in ("int8", "uint8", "int16", "int32"):
        return t.quant.dequantize(np.asarray(value))
    return np.asarray(value, np.float32)


def _on_grid(t: Tensor, value: np.ndarray) -> np.ndarray:
    """Round a real value to what the quantized tensor ``t`` can represent."""
    if t.quant is not None and t.dtype in ("int8", "uint8", "int16"):
        return t.quant.dequantize(t.quant.quantize(value, t.dtype))
    return value


class FloatInterpreter:
    """Runs a graph on numpy in float32, keeping every intermediate tensor if asked."""

    def __init__(self, graph: Graph) -> None:
        graph.validate()
        for op in graph.ops:
            if op.type not in OPS:
                raise IRError(f"float reference: unsupported op {op.describe()}")
        self.graph = graph
        self._consts = {t.name: _to_real(t, t.data) for t in graph.constants()}

    def run(self, feeds: Mapping[str, np.ndarray] | Iterable[np.ndarray], *,
            keep: bool | Iterable[str] = False) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` maps input names (or lists inputs in order) to arrays
        in the input tensors' dtypes. Returns the graph outputs, converted back to
        their dtypes, plus (as float32 real values) every intermediate if ``keep`` is
        True or the named ones if ``keep`` is a collection of names.
        """
        g = self.graph
        if not isinstance(feeds, Mapping):
            feeds = dict(zip(g.inputs, feeds, strict=True))
        env: dict[str, np.ndarray] = dict(self._consts)
        for name in g.inputs:
            if name not in feeds:
                raise IRError(f"missing input {name!r}")
            t = g.tensors[name]
            arr = np.asarray(feeds[name])
            if arr.shape != t.shape:
                raise IRError(f"input {name!r}: shape {arr.shape} != {t.shape}")
            env[name] = _to_real(t, arr)
        for op in g.ops:
            ins = [env[i] if i else None for i in op.inputs]
            out_t = g.tensors[op.outputs[0]]
            try:
                y = OPS[op.type](op, ins, out_t)
            except (ValueError, IndexError, TypeError) as exc:
                raise IRError(f"float reference: {op.describe()} failed: {exc}") from exc
            if y.shape != out_t.shape:
                raise IRError(f"float reference: {op.describe()} produced shape {y.shape}, "
                              f"expected {out_t.shape}")
            env[op.outputs[0]] = _on_grid(out_t, np.asarray(y, np.float32))
        result = {}
        for name in g.outputs:
            t = g.tensors[name]
            v = env[name]
            if t.quant is not None and t.dtype in ("int8", "uint8", "int16"):
                v = t.quant.quantize(v, t.dtype)
            result[name] = v.astype(t.dtype) if t.dtype != "float16" else v
        if keep:
            names = [n for n in env if n not in self._consts] if keep is True else keep
            for n in names:
                result.setdefault(n, env[n])
        return result


def run_float(graph: Graph, feeds: Mapping[str, np.ndarray] | Iterable[np.ndarray]) -> dict[str, np.ndarray]:
    """One-shot helper: run ``graph`` on ``feeds`` and return its outputs."""
    return FloatInterpreter(graph).run(feeds)
