"""Resizing: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (ONNX Resize with the settings
that mean exactly what TFLite's two ops compute)."""
from __future__ import annotations

import numpy as np
import tflite

from npu_hw import ops as spec_ops

from .. import onnx_import, tflite_import
from ..registry import Operator, onnx, register, tflite_options
from .gather import add_gather


def _tflite(options_class: type):
    def handler(im, ins, outs, table, where):
        o = tflite_import.options(table, options_class)
        size = im.const(ins[1], "size", where).reshape(-1)
        return dict(size=(int(size[0]), int(size[1])),
                    align_corners=bool(o.AlignCorners()) if o else False,
                    half_pixel_centers=bool(o.HalfPixelCenters()) if o else False), ins[:1]
    return handler


def _coords(out_size: int, in_size: int, align: bool):
    scale = (in_size - 1) / (out_size - 1) if align and out_size > 1 else in_size / out_size
    return np.arange(out_size, dtype=np.float64), scale


def resize_bilinear(x, *, size, align_corners, half_pixel_centers) -> np.ndarray:
    """Bilinear resize of NHWC ``x`` to ``size`` (H, W) in float, as TFLite computes it."""
    out = x
    for axis, osz in ((1, size[0]), (2, size[1])):
        isz = out.shape[axis]
        pos, scale = _coords(osz, isz, align_corners)
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
    """Nearest-neighbour resize of NHWC ``x`` to ``size`` (H, W), as TFLite computes it."""
    out = x
    for axis, osz in ((1, size[0]), (2, size[1])):
        isz = out.shape[axis]
        pos, scale = _coords(osz, isz, align_corners)
        off = 0.5 if half_pixel_centers else 0.0
        src = np.round((pos + off) * scale) if align_corners else np.floor((pos + off) * scale)
        idx = np.clip(src.astype(np.int64), 0, isz - 1)
        out = np.take(out, idx, axis=axis)
    return out


def _params(g, op) -> dict:
    return dict(out_hw=tuple(op.attrs["size"]), align_corners=bool(op.attrs["align_corners"]),
                half_pixel_centers=bool(op.attrs["half_pixel_centers"]))


def _lower(low, op, p):
    flags = (spec_ops.OPF_ALIGN_CORNERS if p["align_corners"] else 0) | \
            (spec_ops.OPF_HALF_PIXEL_CENTERS if p["half_pixel_centers"] else 0)
    return low.emit(op.type, op, dict(in_shape=low.shape(op.inputs[0]), out_hw=p["out_hw"]), flags)


def _export(options: str):
    def export(wr, op, outs) -> None:
        wr.with_constant(op, outs, op.attrs["size"], {options: dict(
            AlignCorners=bool(op.attrs["align_corners"]), HalfPixelCenters=bool(op.attrs["half_pixel_centers"]))})
    return export


_ATTRS = ("size", "align_corners", "half_pixel_centers")
register(Operator("RESIZE_BILINEAR", _ATTRS, tflite=_tflite(tflite.ResizeBilinearOptions),
                  float_ref=lambda op, ins, out: resize_bilinear(ins[0], **op.attrs), same_scale=True,
                  params=_params, lower=_lower, export=_export("ResizeBilinearOptions"), tflite_version=3,
                  int16=True))
register(Operator("RESIZE_NEAREST_NEIGHBOR", _ATTRS, tflite=_tflite(tflite.ResizeNearestNeighborOptions),
                  float_ref=lambda op, ins, out: resize_nearest(ins[0], **op.attrs), same_scale=True,
                  params=_params, lower=_lower, export=_export("ResizeNearestNeighborOptions"),
                  tflite_version=3, int16=True))


@onnx("Resize")
def _onnx_resize(im, node, attrs, where):
    def text(key: str, default: str) -> str:
        v = attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v
    mode, coord = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel")
    nearest = text("nearest_mode", "round_prefer_floor")
    in_shape, out_shape = im.onnx_shape(node.input[0], where), im.onnx_shape(node.output[0], where)
    # NCHW, or a channels-last tensor (scales 1, s, s, 1: tf2onnx's RESIZE_NEAREST_NEIGHBOR
    # where its optimizer left the layout), taken as the IR's NHWC as it is
    last = len(in_shape) == 4 and in_shape[:2] != out_shape[:2] and (in_shape[0], in_shape[3]) == (
        out_shape[0], out_shape[3])
    if len(in_shape) != 4 or (in_shape[:2] != out_shape[:2] and not last):
        raise onnx_import.ONNXImportError(f"{where}: only spatial (H, W) resizing of 4-D tensors is supported")
    spatial = (1, 2) if last else (2, 3)
    if coord == "pytorch_half_pixel" and min(out_shape[a] for a in spatial) > 1:
        coord = "half_pixel"
    # The ONNX settings that mean exactly what TFLite's two resize ops compute.
    table = {("linear", "asymmetric"): ("RESIZE_BILINEAR", False, False),
             ("linear", "align_corners"): ("RESIZE_BILINEAR", True, False),
             ("linear", "half_pixel"): ("RESIZE_BILINEAR", False, True),
             ("nearest", "asymmetric", "floor"): ("RESIZE_NEAREST_NEIGHBOR", False, False),
             ("nearest", "align_corners", "round_prefer_ceil"): ("RESIZE_NEAREST_NEIGHBOR", True, False),
             ("nearest", "tf_half_pixel_for_nn", "floor"): ("RESIZE_NEAREST_NEIGHBOR", False, True)}
    key = (mode, coord) if mode == "linear" else (mode, coord, nearest)
    if mode == "nearest" and key not in table and not attrs.get("antialias", 0):
        _onnx_nearest_by_gather(im, node, coord, nearest, in_shape, out_shape, where, spatial)
        return
    if key not in table or attrs.get("antialias", 0) or attrs.get("exclude_outside", 0):
        raise onnx_import.ONNXImportError(
            f"{where}: Resize mode={mode} coordinate_transformation_mode={coord}"
            f"{'' if mode == 'linear' else ' nearest_mode=' + nearest} is not supported")
    op_type, align, half = table[key]
    im.emit(op_type, [im.value(node.input[0], not last, where)], node.output[0], not last, where,
            dict(size=tuple(out_shape[a] for a in spatial), align_corners=align, half_pixel_centers=half))


def nearest_indices(in_len: int, out_len: int, scale: float, coord: str, nearest: str) -> np.ndarray:
    """ONNX Resize's source index of every output position along one axis (nearest mode)."""
    x = np.arange(out_len, dtype=np.float64)
    if coord == "half_pixel":
        src = (x + 0.5) / scale - 0.5
    elif coord == "pytorch_half_pixel":
        src = (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    elif coord == "align_corners":
        src = x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    elif coord == "asymmetric":
        src = x / scale
    elif coord == "tf_half_pixel_for_nn":
        src = (x + 0.5) / scale
    else:
        raise ValueError(f"coordinate_transformation_mode {coord}")
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}
    if nearest not in rounding:
        raise ValueError(f"nearest_mode {nearest}")
    return np.clip(rounding[nearest](src), 0, in_len - 1).astype(np.int64)


def _onnx_nearest_by_gather(im, node, coord, nearest, in_shape, out_shape, where,
                            spatial: tuple[int, int] = (2, 3)) -> None:
    """Nearest resizing in any coordinate and rounding mode: one GATHER per resized axis
    (``spatial``: the ONNX tensor's H, W axes; (1, 2) for a channels-last one)."""
    scales = None
    if len(node.input) > 2 and node.input[2] and node.input[2] in im.consts and im.consts[node.input[2]].size:
        scales = [float(v) for v in im.consts[node.input[2]].reshape(-1)]
    nhwc = spatial == (2, 3)
    x = im.value(node.input[0], nhwc, where)
    steps = []
    for onnx_axis, nhwc_axis in zip(spatial, (1, 2)):
        scale = scales[onnx_axis] if scales else out_shape[onnx_axis] / in_shape[onnx_axis]
        try:
            idx = nearest_indices(in_shape[onnx_axis], out_shape[onnx_axis], scale, coord, nearest)
        except ValueError as exc:
            raise onnx_import.ONNXImportError(f"{where}: Resize {exc} is not supported") from None
        if in_shape[onnx_axis] != out_shape[onnx_axis] or np.any(idx != np.arange(len(idx))):
            steps.append((nhwc_axis, idx))
    if not steps:
        steps = [(1, np.arange(in_shape[spatial[0]]))]
    out = im.new_tensor(node.output[0], nhwc, where)
    for k, (axis, idx) in enumerate(steps):
        x = add_gather(im.g, x, axis, idx, out if k == len(steps) - 1 else None)


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(RESIZE_BILINEAR='ResizeBilinearOptions', RESIZE_NEAREST_NEIGHBOR='ResizeNearestNeighborOptions')
