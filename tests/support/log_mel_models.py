"""Log-mel spectrogram models that are all front end (framing as a convolution or a matmul
with fixed DFT weights, the power, a mel filter bank, a log), as TFLite and ONNX, and audio
frames to calibrate and judge them: the escalation's CPU float step for a front end that
is the whole model (libnpu.compiler.cpu_float)."""
from __future__ import annotations

import numpy as np
import tflite
from onnx import ModelProto, TensorProto, helper, numpy_helper

from .tflite_builder import OpSpec, TensorSpec, build_model, named_options

F = np.float32
OP = tflite.BuiltinOperator


def dft_weights(window: int, bins: int) -> np.ndarray:
    """[2 * bins, window]: a Hann-windowed DFT's real parts, then its imaginary parts."""
    n = np.arange(window)
    k = np.arange(bins)[:, None]
    hann = np.hanning(window + 2)[1:-1]
    angle = 2 * np.pi * k * n / window
    return np.concatenate([np.cos(angle) * hann, -np.sin(angle) * hann]).astype(F)


def mel_weights(bins: int, mels: int) -> np.ndarray:
    """[mels, 2 * bins]: triangular filters over the bins, once for the squared real parts
    and once for the squared imaginary parts (their sum is the power's filter bank)."""
    edges = np.linspace(1, bins - 1, mels + 2)
    k = np.arange(bins)
    bank = np.stack([np.clip(np.minimum((k - lo) / (mid - lo), (hi - k) / (hi - mid)), 0, None)
                     for lo, mid, hi in zip(edges, edges[1:], edges[2:])])
    return np.concatenate([bank, bank], axis=1).astype(F)


def log_mel_tflite(*, frames: int = 24, window: int = 64, bins: int = 33, mels: int = 16,
                   framing: str = "conv", decibels: bool = True, head: int = 0, seed: int = 0) -> bytes:
    """A float TFLite log-mel spectrogram, input [1, frames * window] audio:
    ``framing="conv"``: RESHAPE [1, 1, L, 1], CONV_2D with the DFT as its filters (stride
    ``window``); ``"matmul"``: RESHAPE [frames, window], FULLY_CONNECTED by the DFT. Then
    SQUARE, RESHAPE [frames, 2 * bins], FULLY_CONNECTED by the mel bank, MAXIMUM(1e-10),
    LOG, and ``decibels``: MUL by 10 / ln 10 (the model's last op). ``head``: a dense layer
    of that many units on the flattened log-mel (RESHAPE [1, frames * mels], FULLY_CONNECTED)."""
    samples, spec = frames * window, 2 * bins
    rng = np.random.default_rng(seed)
    tensors: list[TensorSpec] = []

    def tensor(shape, data=None, name="", dtype=F) -> int:
        tensors.append(TensorSpec(tuple(shape), dtype, data=data, name=name))
        return len(tensors) - 1

    def shape_of(values) -> int:
        return tensor((len(values),), np.asarray(values, np.int32), dtype=np.int32)

    ops: list[OpSpec] = []

    def op(code, ins, shape, name, options=None) -> int:
        out = tensor(shape, name=name)
        otype, write = options if options else (0, None)
        ops.append(OpSpec(code, ins, [out], otype, write))
        return out

    x = tensor((1, samples), name="audio")
    dft = dft_weights(window, bins)
    if framing == "conv":
        r = op(OP.RESHAPE, [x, shape_of([1, 1, samples, 1])], (1, 1, samples, 1), "signal")
        w = tensor((spec, 1, window, 1), dft.reshape(spec, 1, window, 1), "dft")
        b = tensor((spec,), np.zeros(spec, F), "dft_bias")
        stft = op(OP.CONV_2D, [r, w, b], (1, 1, frames, spec), "stft",
                  named_options("Conv2DOptions", Padding=tflite.Padding.VALID, StrideH=1, StrideW=window))
    elif framing == "matmul":
        r = op(OP.RESHAPE, [x, shape_of([frames, window])], (frames, window), "frames")
        stft = op(OP.FULLY_CONNECTED, [r, tensor((spec, window), dft, "dft"), -1], (frames, spec), "stft",
                  named_options("FullyConnectedOptions"))
    else:
        raise ValueError(f"framing {framing!r}: conv or matmul")
    sq = op(OP.SQUARE, [stft], tensors[stft].shape, "squares")
    flat = op(OP.RESHAPE, [sq, shape_of([frames, spec])], (frames, spec), "squares2d")
    mel = op(OP.FULLY_CONNECTED, [flat, tensor((mels, spec), mel_weights(bins, mels), "mel_bank"), -1],
             (frames, mels), "mel", named_options("FullyConnectedOptions"))
    floor = op(OP.MAXIMUM, [mel, tensor((1,), np.array([1e-10], F), "eps")], (frames, mels), "floored")
    out = op(OP.LOG, [floor], (frames, mels), "log_mel")
    if decibels:
        out = op(OP.MUL, [out, tensor((1,), np.array([10 / np.log(10)], F), "db")], (frames, mels), "decibels",
                 named_options("MulOptions"))
    if head:
        feats = op(OP.RESHAPE, [out, shape_of([1, frames * mels])], (1, frames * mels), "features")
        w = (rng.standard_normal((head, frames * mels)) / np.sqrt(frames * mels) * 0.1).astype(F)
        bias = tensor((head,), np.zeros(head, F), "head_b")
        out = op(OP.FULLY_CONNECTED, [feats, tensor(w.shape, w, "head_w"), bias], (1, head), "head",
                 named_options("FullyConnectedOptions"))
    return build_model(tensors, ops, [x], [out])


def log_mel_onnx(*, frames: int = 24, window: int = 64, bins: int = 33, mels: int = 16) -> ModelProto:
    """The ONNX equivalent of :func:`log_mel_tflite` with matmul framing: Reshape [frames,
    window], MatMul by the DFT, Pow 2, MatMul by the mel bank, Clip(1e-10), Log, Mul by
    10 / ln 10. Input [1, frames * window]."""
    consts = {"frame_shape": np.array([frames, window], np.int64), "dft": dft_weights(window, bins).T.copy(),
              "two": np.array(2, F), "mel_bank": mel_weights(bins, mels).T.copy(), "eps": np.array(1e-10, F),
              "db": np.array(10 / np.log(10), F)}
    nodes = [helper.make_node("Reshape", ["audio", "frame_shape"], ["frames"]),
             helper.make_node("MatMul", ["frames", "dft"], ["stft"]),
             helper.make_node("Pow", ["stft", "two"], ["squares"]),
             helper.make_node("MatMul", ["squares", "mel_bank"], ["mel"]),
             helper.make_node("Clip", ["mel", "eps"], ["floored"]),
             helper.make_node("Log", ["floored"], ["log_mel"]),
             helper.make_node("Mul", ["log_mel", "db"], ["decibels"])]
    graph = helper.make_graph(nodes, "log_mel", [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                                               [1, frames * window])],
                              [helper.make_tensor_value_info("decibels", TensorProto.FLOAT, [frames, mels])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def audio(count: int, samples: int, seed: int) -> list[list[np.ndarray]]:
    """``count`` clips of ``samples``: a few tones and a noise floor, each 1e-4 to 1 loud
    (speech-like dynamics: the power spans many decades, quiet bins far under loud ones)."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples)
    clips = []
    for _ in range(count):
        tones = sum(np.sin(2 * np.pi * rng.uniform(0.01, 0.45) * t + rng.uniform(0, 6)) * rng.uniform(0.1, 1)
                    for _ in range(3))
        envelope = 10.0 ** rng.uniform(-3, 0, samples // 64 + 1).repeat(64)[:samples]
        clip = tones * envelope + rng.standard_normal(samples) * 10.0 ** rng.uniform(-4, -2)
        clips.append([clip.astype(F)[None]])
    return clips
