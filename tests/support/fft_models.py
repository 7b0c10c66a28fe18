"""Small float TFLite models with an FFT in the graph, as TF's ``tf.signal.stft`` exports it
(RFFT2D -> complex64 -> COMPLEX_ABS, or REAL / IMAG), for the complex-tensor tests
(libnpu.compiler.complex_tensors): built with ``tflite_builder``, run by LiteRT."""
from __future__ import annotations

import numpy as np
import tflite

from .tflite_builder import OpSpec, TensorSpec, build_model, int32_const, named_options, squeeze_options

F, C = np.float32, np.complex64
OP = tflite.BuiltinOperator


class _Model:
    """Tensors and operators added one at a time."""

    def __init__(self) -> None:
        self.tensors: list[TensorSpec] = []
        self.ops: list[OpSpec] = []

    def tensor(self, shape, dtype=F, data=None, name: str = "", signature=None) -> int:
        self.tensors.append(TensorSpec(tuple(shape), dtype, data=data, name=name, signature=signature))
        return len(self.tensors) - 1

    def const(self, values) -> int:
        self.tensors.append(int32_const(values))
        return len(self.tensors) - 1

    def op(self, code: int, ins: list[int], shape, name: str, dtype=F, options=None, signature=None) -> int:
        out = self.tensor(shape, dtype, name=name, signature=signature)
        otype, write = options if options else (0, None)
        self.ops.append(OpSpec(code, ins, [out], otype, write))
        return out


def rfft_classifier(*, frames: int = 8, window: int = 32, parts: str = "abs", crossing: bool = False,
                    complex_output: bool = False, dynamic_frames: bool = False, log: bool = False,
                    seed: int = 0) -> bytes:
    """Input [1, frames * window] audio: framed (RESHAPE [1, frames, 1, window]), windowed
    (MUL by a Hann window), RFFT2D (fft_length [1, window]) -> complex64 [1, frames, 1, bins],
    SQUEEZE -> [1, frames, bins], then the magnitude: ``parts="abs"``: COMPLEX_ABS; ``"real_imag"``:
    REAL and IMAG, squared (MUL) and added. ``log``: LOG(magnitude + 1e-3) after it. A head:
    RESHAPE [1, frames, bins, 1], CONV_2D 3x3 (4 channels, RELU), MEAN over frames and bins,
    FULLY_CONNECTED -> [1, 3].

    ``crossing``: the spectrum is also scaled by its own magnitude passed through a chip op:
    MUL(spectrum, CAST(COMPLEX_ABS(spectrum) * 0.5)) before the magnitude (a chip op on a
    path between the spectrum's writer and a reader). ``complex_output``: the model ends at
    the squeezed spectrum (a complex64 output). ``dynamic_frames``: the frame count is
    computed as TF's converter leaves it with a free batch dimension (SHAPE -> REDUCE_PROD
    -> FLOOR_DIV -> PACK -> the RESHAPE's shape), every shape after it a placeholder of
    1 frame with ``-1`` in its signature."""
    bins = window // 2 + 1
    rng = np.random.default_rng(seed)
    m = _Model()
    dyn = (lambda *dims: [-1 if d == "frames" else d for d in dims]) if dynamic_frames else (lambda *dims: None)
    shown = 1 if dynamic_frames else frames       # what the file stores for the frame count
    x = m.tensor((1, frames * window), name="audio", signature=[-1, frames * window] if dynamic_frames else None)
    if dynamic_frames:
        shape = m.op(OP.SHAPE, [x], (2,), "shape", np.int32,
                     named_options("ShapeOptions", OutType=tflite.TensorType.INT32))
        samples = m.op(OP.REDUCE_PROD, [shape, m.const([0])], (), "samples", np.int32,
                       named_options("ReducerOptions", KeepDims=False))
        count = m.op(OP.FLOOR_DIV, [samples, m.tensor((), np.int32, np.int32(window))], (), "count", np.int32)
        target = m.op(OP.PACK, [m.tensor((), np.int32, np.int32(1)), count, m.tensor((), np.int32, np.int32(1)),
                                m.tensor((), np.int32, np.int32(window))], (4,), "frame_shape", np.int32,
                      named_options("PackOptions", ValuesCount=4, Axis=0))
    else:
        target = m.const([1, frames, 1, window])
    framed = m.op(OP.RESHAPE, [x, target], (1, shown, 1, window), "frames", signature=dyn(1, "frames", 1, window))
    hann = np.hanning(window + 2)[1:-1].astype(F)
    windowed = m.op(OP.MUL, [framed, m.tensor((window,), F, hann, "hann")], (1, shown, 1, window), "windowed",
                    options=named_options("MulOptions"), signature=dyn(1, "frames", 1, window))
    spectrum = m.op(OP.RFFT2D, [windowed, m.const([1, window])], (1, shown, 1, bins), "fft", C,
                    signature=dyn(1, "frames", 1, bins))
    spectrum = m.op(OP.SQUEEZE, [spectrum], (1, shown, bins), "spectrum", C, squeeze_options([2]),
                    signature=dyn(1, "frames", bins))
    if complex_output:
        return build_model(m.tensors, m.ops, [x], [spectrum])
    if crossing:
        size = m.op(OP.COMPLEX_ABS, [spectrum], (1, shown, bins), "size")
        half = m.op(OP.MUL, [size, m.tensor((1,), F, np.array([0.5], F), "half")], (1, shown, bins), "half_size",
                    options=named_options("MulOptions"))
        gain = m.op(OP.CAST, [half], (1, shown, bins), "gain", C)
        spectrum = m.op(OP.MUL, [spectrum, gain], (1, shown, bins), "scaled", C, named_options("MulOptions"))
    if parts == "abs":
        power = m.op(OP.COMPLEX_ABS, [spectrum], (1, shown, bins), "magnitude", signature=dyn(1, "frames", bins))
    else:
        re, im = (m.op(code, [spectrum], (1, shown, bins), name) for code, name in ((OP.REAL, "re"), (OP.IMAG, "im")))
        re2, im2 = (m.op(OP.MUL, [t, t], (1, shown, bins), f"{name}2", options=named_options("MulOptions"))
                    for t, name in ((re, "re"), (im, "im")))
        power = m.op(OP.ADD, [re2, im2], (1, shown, bins), "power", options=named_options("AddOptions"))
    if log:
        lifted = m.op(OP.ADD, [power, m.tensor((1,), F, np.array([1e-3], F), "eps")], (1, shown, bins), "lifted",
                      options=named_options("AddOptions"), signature=dyn(1, "frames", bins))
        power = m.op(OP.LOG, [lifted], (1, shown, bins), "log_power", signature=dyn(1, "frames", bins))
    image = m.op(OP.RESHAPE, [power, m.const([1, frames, bins, 1])], (1, frames, bins, 1), "image")
    w = (rng.standard_normal((4, 3, 3, 1)) / 3).astype(F)
    conv = m.op(OP.CONV_2D, [image, m.tensor(w.shape, F, w, "conv_w"), m.tensor((4,), F, np.full(4, 0.1, F), "conv_b")],
                (1, frames - 2, bins - 2, 4), "conv",
                options=named_options("Conv2DOptions", Padding=tflite.Padding.VALID, StrideH=1, StrideW=1,
                                      FusedActivationFunction=tflite.ActivationFunctionType.RELU))
    pooled = m.op(OP.MEAN, [conv, m.const([1, 2])], (1, 4), "pooled", options=named_options("ReducerOptions",
                                                                                                KeepDims=False))
    w = rng.standard_normal((3, 4)).astype(F)
    out = m.op(OP.FULLY_CONNECTED, [pooled, m.tensor(w.shape, F, w, "fc_w"), m.tensor((3,), F, np.zeros(3, F), "fc_b")],
               (1, 3), "classes", options=named_options("FullyConnectedOptions"))
    return build_model(m.tensors, m.ops, [x], [out])


def tones(count: int, samples: int, seed: int) -> list[np.ndarray]:
    """``count`` clips [1, samples]: two tones and a little noise, each 0.1 to 1 loud."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples)
    clips = []
    for _ in range(count):
        clip = sum(rng.uniform(0.2, 1) * np.sin(2 * np.pi * rng.uniform(0.02, 0.45) * t) for _ in range(2))
        clip = clip * rng.uniform(0.1, 1) + rng.standard_normal(samples) * 0.01
        clips.append(clip.astype(F)[None])
    return clips


def onnx_spectrum_classifier(op: str, *, frames: int = 8, window: int = 32, seed: int = 0) -> bytes:
    """ONNX (opset 20) with onnxruntime's FFT ops, whose complex values are a trailing axis of
    2 floats (no complex type): input [1, frames * window] audio; ``op="DFT"``: Reshape
    [1, frames, window, 1], DFT over the window (onesided); ``"STFT"``: Unsqueeze to
    [1, samples, 1], STFT (frame step ``window``, a Hann window). Then Reshape [1, -1] and
    Gemm -> [1, 3]."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    bins = window // 2 + 1
    consts = {"flat": np.array([1, frames * bins * 2], np.int64),
              "w": (rng.standard_normal((3, frames * bins * 2)) * 0.1).astype(F)}
    if op == "DFT":
        consts |= {"frame_shape": np.array([1, frames, window, 1], np.int64), "axis": np.array(2, np.int64)}
        nodes = [helper.make_node("Reshape", ["audio", "frame_shape"], ["framed"]),
                 helper.make_node("DFT", ["framed", "", "axis"], ["spectrum"], onesided=1)]
    else:
        consts |= {"step": np.array(window, np.int64), "hann": np.hanning(window).astype(F),
                   "last": np.array([2], np.int64)}
        nodes = [helper.make_node("Unsqueeze", ["audio", "last"], ["signal"]),
                 helper.make_node("STFT", ["signal", "step", "hann"], ["spectrum"], onesided=1)]
    nodes += [helper.make_node("Reshape", ["spectrum", "flat"], ["features"]),
              helper.make_node("Gemm", ["features", "w"], ["classes"], transB=1)]
    graph = helper.make_graph(nodes, op.lower(), [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                                                [1, frames * window])],
                              [helper.make_tensor_value_info("classes", TensorProto.FLOAT, [1, 3])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model.SerializeToString()
