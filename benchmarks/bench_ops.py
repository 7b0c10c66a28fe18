"""Time the chip's int8 conv2d / depthwise / FC kernels on MobileNet-v1-like layers next to
LiteRT's reference kernels (BUILTIN_REF, the golden source) and XNNPACK (the default).

Run: ``python -m benchmarks.bench_ops [--repeat N] [--layers quick|mobilenet]``.
Prints per-layer times (ms), MACs, and our speed-up over each LiteRT resolver, and checks
on the way that our outputs equal BUILTIN_REF's byte for byte. "numpy ms" is the same
kernel with the C inner loops turned off (depthwise and FC have them; conv2d is numpy +
BLAS either way).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import tflite
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from firmware_sim.kernels import native
from firmware_sim.kernels.conv import conv2d, depthwise_conv2d
from firmware_sim.kernels.fully_connected import fully_connected

# The same layers `npu bench ops` runs through the device.
from libnpu.tools.ops_bench import MOBILENET, Layer
from npu_hw.fixedpoint import effective_scale, quantize_multiplier_array
from npu_hw.ops import PADDING_SAME, conv_geometry
from tests.support.tflite_builder import TensorSpec, single_op_model

QUICK = [MOBILENET[i] for i in (0, 1, 2, 5, 8, 13, 14, 19, 20)]


def build(layer: Layer, rng: np.random.Generator):
    """(model bytes, input, our kernel as a thunk, MACs) for one layer."""
    in_s, in_zp, out_s, out_zp = 0.05, -3, 0.2, 4
    n = layer.cout
    w_scales = rng.uniform(0.002, 0.01, n).astype(np.float32)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    scale = effective_scale(in_s, w_scales, out_s)
    mult, shift = quantize_multiplier_array(scale)
    b_scales = [float(np.float32(in_s) * s) for s in w_scales]
    if layer.kind == "fc":
        x = rng.integers(-128, 128, (layer.hw, layer.cin), dtype=np.int8)
        w = rng.integers(-127, 128, (n, layer.cin), dtype=np.int8)
        tensors = [TensorSpec(x.shape, np.int8, [in_s], [in_zp]),
                   TensorSpec(w.shape, np.int8, list(w_scales), [0] * n, 0, w),
                   TensorSpec((layer.hw, n), np.int8, [out_s], [out_zp]),
                   TensorSpec((n,), np.int32, b_scales, [0] * n, 0, bias)]

        def options(b):
            tflite.FullyConnectedOptionsStart(b)
            return tflite.FullyConnectedOptionsEnd(b)

        model = single_op_model(tflite.BuiltinOperator.FULLY_CONNECTED, tensors, [0, 1, 3], [2],
                                tflite.BuiltinOptions.FullyConnectedOptions, options)
        ours = lambda: fully_connected(x, w, bias, input_zp=in_zp, output_zp=out_zp,  # noqa: E731
                                       multiplier=mult, shift=shift, scale=scale)
        return model, x, ours, layer.hw * layer.cin * n
    oh, pad = conv_geometry(layer.hw, layer.k, layer.stride, 1, PADDING_SAME)
    x = rng.integers(-128, 128, (1, layer.hw, layer.hw, layer.cin), dtype=np.int8)
    dw = layer.kind == "dw"
    w_shape = (1, layer.k, layer.k, n) if dw else (n, layer.k, layer.k, layer.cin)
    w = rng.integers(-127, 128, w_shape, dtype=np.int8)
    tensors = [TensorSpec(x.shape, np.int8, [in_s], [in_zp]),
               TensorSpec(w.shape, np.int8, list(w_scales), [0] * n, 3 if dw else 0, w),
               TensorSpec((1, oh, oh, n), np.int8, [out_s], [out_zp]),
               TensorSpec((n,), np.int32, b_scales, [0] * n, 0, bias)]

    def options(b):
        if dw:
            tflite.DepthwiseConv2DOptionsStart(b)
            tflite.DepthwiseConv2DOptionsAddStrideH(b, layer.stride)
            tflite.DepthwiseConv2DOptionsAddStrideW(b, layer.stride)
            tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, 1)
            tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, 1)
            tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, 1)
            return tflite.DepthwiseConv2DOptionsEnd(b)
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddStrideH(b, layer.stride)
        tflite.Conv2DOptionsAddStrideW(b, layer.stride)
        tflite.Conv2DOptionsAddDilationHFactor(b, 1)
        tflite.Conv2DOptionsAddDilationWFactor(b, 1)
        return tflite.Conv2DOptionsEnd(b)

    op = tflite.BuiltinOperator.DEPTHWISE_CONV_2D if dw else tflite.BuiltinOperator.CONV_2D
    opt = (tflite.BuiltinOptions.DepthwiseConv2DOptions if dw
           else tflite.BuiltinOptions.Conv2DOptions)
    model = single_op_model(op, tensors, [0, 1, 3], [2], opt, options)
    fn = depthwise_conv2d if dw else conv2d
    ours = lambda: fn(x, w, bias, stride=(layer.stride,) * 2, dilation=(1, 1),  # noqa: E731
                      padding=(pad, pad), out_hw=(oh, oh), input_zp=in_zp, output_zp=out_zp,
                      multiplier=mult, shift=shift)
    macs = oh * oh * n * layer.k * layer.k * (1 if dw else layer.cin)
    return model, x, ours, macs


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def interpreter(model: bytes, resolver: OpResolverType) -> Interpreter:
    it = Interpreter(model_content=model, experimental_op_resolver_type=resolver, num_threads=1)
    it.allocate_tensors()
    return it


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", choices=["quick", "mobilenet"], default="mobilenet")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    layers = QUICK if args.layers == "quick" else MOBILENET
    print(f"{'layer':16} {'MMACs':>7} {'ours ms':>8} {'numpy ms':>8} {'ref ms':>8} {'xnn ms':>8} "
          f"{'ref/ours':>8} {'xnn/ours':>8}")
    totals = np.zeros(4)
    for layer in layers:
        model, x, ours, macs = build(layer, rng)
        runs = {}
        for name, resolver in (("ref", OpResolverType.BUILTIN_REF),
                               ("xnn", OpResolverType.AUTO)):
            it = interpreter(model, resolver)
            inp, outp = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
            it.set_tensor(inp, x)
            runs[name] = (best_of(it.invoke, args.repeat), it.get_tensor(outp).copy())
        t_ours = best_of(ours, args.repeat)
        with native.enabled(False):
            t_numpy = best_of(ours, args.repeat)
        if not np.array_equal(ours(), runs["ref"][1]):
            print(f"{layer.name}: OUTPUT DIFFERS FROM BUILTIN_REF", file=sys.stderr)
            return 1
        t_ref, t_xnn = runs["ref"][0], runs["xnn"][0]
        totals += (t_ours, t_numpy, t_ref, t_xnn)
        print(f"{layer.name:16} {macs / 1e6:7.1f} {t_ours * 1e3:8.2f} {t_numpy * 1e3:8.2f} "
              f"{t_ref * 1e3:8.2f} {t_xnn * 1e3:8.2f} {t_ref / t_ours:8.2f} {t_xnn / t_ours:8.2f}")
    print(f"{'total':16} {'':7} {totals[0] * 1e3:8.2f} {totals[1] * 1e3:8.2f} "
          f"{totals[2] * 1e3:8.2f} {totals[3] * 1e3:8.2f} {totals[2] / totals[0]:8.2f} "
          f"{totals[3] / totals[0]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
