"""Small streaming models as PyTorch exports them (one frame a call, caches in and out),
built with onnx.helper, and the frame streams to feed them.

* :func:`conv_cache_model`: a causal dilated convolution over time with its cache:
  ``Concat(cache, frame)`` along time -> Conv -> PRelu; the new cache is the concatenation
  less its oldest frame (``Slice``).
* :func:`gru_cache_model`: a GRU step (PyTorch's ``linear_before_reset``) with its hidden state
  in and out, a dense layer and a sigmoid gate on the frame (GTCRN's temporal attention).
* :func:`delay_model`: a delay line, its output only ever what its cache held.
* :func:`magnitude_model`: the magnitude ``sqrt(re^2 + im^2)`` of a complex STFT frame.
* :func:`spectral_mask_model`: GTCRN's shape in small: one STFT frame ``(1, F, 1, 2)`` (real
  and imaginary parts), features (magnitude, real, imaginary) through a convolution, the conv
  cache block and the GRU cache block, a ``Tanh`` complex mask, and the mask times the input
  spectrum as the model's main output.

:func:`speech_frames` makes STFT frames of a voiced, syllabic signal in noise (frames 40 dB
apart in loudness, as speech and its pauses are); :func:`stream_feeds` runs a model in float
over a stream, each call given the caches the call before left (as a package's wrapper
does): the feeds the corpus calibrates and judges such models on.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

FFT, HOP = 128, 64            # STFT of the frames: 65 bins
FREQS = FFT // 2 + 1


def _model(nodes: list, inputs: list, outputs: list, inits: list, name: str) -> onnx.ModelProto:
    def info(name_shape):
        return h.make_tensor_value_info(name_shape[0], TensorProto.FLOAT, list(name_shape[1]))
    graph = h.make_graph(nodes, name, [info(i) for i in inputs], [info(o) for o in outputs], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _conv_weights(rng: np.random.Generator, out: int, inp: int, kh: int, kw: int) -> np.ndarray:
    return rng.normal(0, 1 / np.sqrt(inp * kh * kw), (out, inp, kh, kw)).astype(np.float32)


def _cache_block(rng, x: str, cache: str, channels: int, kernel: int, dilation: int,
                 prefix: str) -> tuple[list, list, str, str]:
    """``Concat(cache, x)`` on time -> depthwise (kernel x 3) Conv dilated on time -> PRelu;
    the new cache: the concatenation less its first frame."""
    inits = [nh.from_array(_conv_weights(rng, channels, 1, kernel, 3), f"{prefix}_w"),
             nh.from_array(rng.normal(0, 0.1, channels).astype(np.float32), f"{prefix}_b"),
             nh.from_array(np.full((channels, 1, 1), 0.25, np.float32), f"{prefix}_slope"),
             nh.from_array(np.array([1], np.int64), f"{prefix}_start"),
             nh.from_array(np.array([1 << 30], np.int64), f"{prefix}_end"),
             nh.from_array(np.array([2], np.int64), f"{prefix}_axis")]
    nodes = [h.make_node("Concat", [cache, x], [f"{prefix}_cat"], axis=2),
             h.make_node("Conv", [f"{prefix}_cat", f"{prefix}_w", f"{prefix}_b"], [f"{prefix}_conv"],
                         group=channels, kernel_shape=[kernel, 3], dilations=[dilation, 1], pads=[0, 1, 0, 1]),
             h.make_node("PRelu", [f"{prefix}_conv", f"{prefix}_slope"], [f"{prefix}_y"]),
             h.make_node("Slice", [f"{prefix}_cat", f"{prefix}_start", f"{prefix}_end", f"{prefix}_axis"],
                         [f"{prefix}_cache_out"])]
    return nodes, inits, f"{prefix}_y", f"{prefix}_cache_out"


def _gru_block(rng, x: str, hidden_in: str, channels: int, hidden: int, prefix: str) -> tuple[list, list, str, str]:
    """GTCRN's temporal attention: the frame's energy per channel ``mean(x^2)`` over
    frequency -> one GRU step from ``hidden_in`` -> dense -> sigmoid, which gates ``x``."""
    k = 1 / np.sqrt(hidden)

    def u(*shape):
        return rng.uniform(-k, k, shape).astype(np.float32)
    inits = [nh.from_array(u(1, 3 * hidden, channels), f"{prefix}_W"),
             nh.from_array(u(1, 3 * hidden, hidden), f"{prefix}_R"),
             nh.from_array(u(1, 6 * hidden), f"{prefix}_B"),
             nh.from_array(u(hidden, channels) * 2, f"{prefix}_fc"), nh.from_array(u(channels), f"{prefix}_fc_b"),
             nh.from_array(np.array([1, channels, 1, 1], np.int64), f"{prefix}_gate_shape"),
             nh.from_array(np.array([1, 1, channels], np.int64), f"{prefix}_seq_shape")]
    nodes = [h.make_node("Mul", [x, x], [f"{prefix}_sq"]),
             h.make_node("ReduceMean", [f"{prefix}_sq"], [f"{prefix}_z"], axes=[-1], keepdims=0),
             h.make_node("Reshape", [f"{prefix}_z", f"{prefix}_seq_shape"], [f"{prefix}_seq"]),
             h.make_node("GRU", [f"{prefix}_seq", f"{prefix}_W", f"{prefix}_R", f"{prefix}_B", "", hidden_in],
                         [f"{prefix}_Y", f"{prefix}_h_out"], hidden_size=hidden, linear_before_reset=1),
             h.make_node("Reshape", [f"{prefix}_h_out", f"{prefix}_hid_shape"],
                         [f"{prefix}_h2"]),
             h.make_node("MatMul", [f"{prefix}_h2", f"{prefix}_fc"], [f"{prefix}_a"]),
             h.make_node("Add", [f"{prefix}_a", f"{prefix}_fc_b"], [f"{prefix}_ab"]),
             h.make_node("Sigmoid", [f"{prefix}_ab"], [f"{prefix}_at"]),
             h.make_node("Reshape", [f"{prefix}_at", f"{prefix}_gate_shape"], [f"{prefix}_gate"]),
             h.make_node("Mul", [x, f"{prefix}_gate"], [f"{prefix}_y"])]
    inits.append(nh.from_array(np.array([1, hidden], np.int64), f"{prefix}_hid_shape"))
    return nodes, inits, f"{prefix}_y", f"{prefix}_h_out"


def conv_cache_model(channels: int = 8, freqs: int = 16, kernel: int = 3, dilation: int = 2,
                     seed: int = 0) -> onnx.ModelProto:
    """A causal dilated convolution with its cache (module docstring): inputs ``x`` (1, C,
    1, F) and ``cache`` (1, C, (kernel - 1) * dilation, F); outputs ``y`` and ``cache_out``."""
    rng = np.random.default_rng(seed)
    depth = (kernel - 1) * dilation
    nodes, inits, y, cache_out = _cache_block(rng, "x", "cache", channels, kernel, dilation, "b")
    nodes += [h.make_node("Identity", [y], ["y"]), h.make_node("Identity", [cache_out], ["cache_out"])]
    return _model(nodes, [("x", (1, channels, 1, freqs)), ("cache", (1, channels, depth, freqs))],
                  [("y", (1, channels, 1, freqs)), ("cache_out", (1, channels, depth, freqs))], inits, "conv_cache")


def gru_cache_model(channels: int = 8, freqs: int = 16, hidden: int = 16, seed: int = 0) -> onnx.ModelProto:
    """A GRU step with its hidden state in and out gating a frame (module docstring):
    inputs ``x`` (1, C, 1, F) and ``h`` (1, 1, H); outputs ``y`` and ``h_out``."""
    rng = np.random.default_rng(seed)
    nodes, inits, y, h_out = _gru_block(rng, "x", "h", channels, hidden, "t")
    nodes += [h.make_node("Identity", [y], ["y"]), h.make_node("Identity", [h_out], ["h_out"])]
    return _model(nodes, [("x", (1, channels, 1, freqs)), ("h", (1, 1, hidden))],
                  [("y", (1, channels, 1, freqs)), ("h_out", (1, 1, hidden))], inits, "gru_cache")


def spectral_mask_model(freqs: int = FREQS, channels: int = 8, hidden: int = 16, dilation: int = 2,
                        seed: int = 0) -> onnx.ModelProto:
    """GTCRN in small (module docstring): inputs ``spec`` (1, F, 1, 2), ``conv_cache`` (1, C,
    2 * dilation, F), ``gru_cache`` (1, 1, H); outputs ``enhanced`` (1, F, 1, 2) (the complex
    mask times ``spec``), ``conv_cache_out`` and ``gru_cache_out``."""
    rng = np.random.default_rng(seed)

    def const(name, value, dtype=np.int64):
        return nh.from_array(np.asarray(value, dtype), name)
    inits = [const("zero", [0]), const("one", [1]), const("zero_s", 0), const("one_s", 1),
             const("eps", 1e-12, np.float32),
             nh.from_array(_conv_weights(rng, channels, 3, 1, 3), "w_in"),
             nh.from_array(rng.normal(0, 0.1, channels).astype(np.float32), "b_in"),
             nh.from_array(np.full((channels, 1, 1), 0.25, np.float32), "slope_in"),
             nh.from_array(_conv_weights(rng, 2, channels, 1, 3) * 3, "w_mask"),
             nh.from_array(rng.normal(0, 0.1, 2).astype(np.float32), "b_mask")]
    nodes = [   # spec (1, F, 1, 2) -> real, imag (1, 1, 1, F) as PyTorch exports spec[..., 0].permute(...)
        h.make_node("Gather", ["spec", "zero"], ["re_g"], axis=3),
        h.make_node("Gather", ["spec", "one"], ["im_g"], axis=3),
        h.make_node("Transpose", ["re_g"], ["re"], perm=[0, 3, 2, 1]),
        h.make_node("Transpose", ["im_g"], ["im"], perm=[0, 3, 2, 1]),
        h.make_node("Mul", ["re", "re"], ["re2"]), h.make_node("Mul", ["im", "im"], ["im2"]),
        h.make_node("Add", ["re2", "im2"], ["power"]), h.make_node("Add", ["power", "eps"], ["power_eps"]),
        h.make_node("Sqrt", ["power_eps"], ["mag"]),
        h.make_node("Concat", ["mag", "re", "im"], ["feat"], axis=1),            # (1, 3, 1, F)
        h.make_node("Conv", ["feat", "w_in", "b_in"], ["conv_in"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
        h.make_node("PRelu", ["conv_in", "slope_in"], ["x0"])]
    block, block_inits, x1, conv_cache_out = _cache_block(rng, "x0", "conv_cache", channels, 3, dilation, "enc")
    nodes += block
    inits += block_inits
    block, block_inits, x2, gru_cache_out = _gru_block(rng, x1, "gru_cache", channels, hidden, "tra")
    nodes += block
    inits += block_inits
    nodes += [   # the complex ratio mask: (m_re + i m_im) (re + i im)
        h.make_node("Conv", [x2, "w_mask", "b_mask"], ["mask_logits"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
        h.make_node("Tanh", ["mask_logits"], ["mask"]),
        h.make_node("Gather", ["mask", "zero_s"], ["m_re"], axis=1),
        h.make_node("Gather", ["mask", "one_s"], ["m_im"], axis=1),
        h.make_node("Squeeze", ["re", "one"], ["s_re"]), h.make_node("Squeeze", ["im", "one"], ["s_im"]),
        h.make_node("Mul", ["s_re", "m_re"], ["rr"]), h.make_node("Mul", ["s_im", "m_im"], ["ii"]),
        h.make_node("Sub", ["rr", "ii"], ["out_re"]),
        h.make_node("Mul", ["s_im", "m_re"], ["ir"]), h.make_node("Mul", ["s_re", "m_im"], ["ri"]),
        h.make_node("Add", ["ir", "ri"], ["out_im"]),
        h.make_node("Unsqueeze", ["out_re", "one"], ["out_re4"]),
        h.make_node("Unsqueeze", ["out_im", "one"], ["out_im4"]),
        h.make_node("Concat", ["out_re4", "out_im4"], ["stacked"], axis=1),      # (1, 2, 1, F)
        h.make_node("Transpose", ["stacked"], ["enhanced"], perm=[0, 3, 2, 1]),  # (1, F, 1, 2)
        h.make_node("Identity", [conv_cache_out], ["conv_cache_out"]),
        h.make_node("Identity", [gru_cache_out], ["gru_cache_out"])]
    depth = 2 * dilation
    return _model(nodes, [("spec", (1, freqs, 1, 2)), ("conv_cache", (1, channels, depth, freqs)),
                          ("gru_cache", (1, 1, hidden))],
                  [("enhanced", (1, freqs, 1, 2)), ("conv_cache_out", (1, channels, depth, freqs)),
                   ("gru_cache_out", (1, 1, hidden))], inits, "spectral_mask")


def delay_model(width: int = 16, depth: int = 3) -> onnx.ModelProto:
    """A delay line as a cache spells it: ``cat = Concat(cache, x)`` on time, ``y`` its oldest
    frame, ``cache_out`` the rest: inputs ``x`` (1, 1, W), ``cache`` (1, D, W); outputs
    ``y`` (1, 1, W), ``cache_out``. Its output is only ever the cache: from a zero cache, all
    zeros."""
    inits = [nh.from_array(np.array([v], np.int64), n) for n, v in (("zero", 0), ("one", 1), ("end", 1 << 30))]
    nodes = [h.make_node("Concat", ["cache", "x"], ["cat"], axis=1),
             h.make_node("Slice", ["cat", "zero", "one", "one"], ["y"]),
             h.make_node("Slice", ["cat", "one", "end", "one"], ["cache_out"])]
    return _model(nodes, [("x", (1, 1, width)), ("cache", (1, depth, width))],
                  [("y", (1, 1, width)), ("cache_out", (1, depth, width))], inits, "delay")


def magnitude_model(freqs: int = FREQS) -> onnx.ModelProto:
    """The magnitude of a complex STFT frame as GTCRN's export spells it: ``spec`` (1, F, 1,
    2) -> ``sqrt(re**2 + im**2 + 1e-12)`` (1, 1, 1, F) (``Gather``, ``Transpose``, ``Pow``, ``Add``,
    ``Sqrt``)."""
    inits = [nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([1], np.int64), "one"),
             nh.from_array(np.array(1e-12, np.float32), "eps"), nh.from_array(np.array(2.0, np.float32), "two")]
    nodes = [h.make_node("Gather", ["spec", "zero"], ["re_g"], axis=3),
             h.make_node("Gather", ["spec", "one"], ["im_g"], axis=3),
             h.make_node("Transpose", ["re_g"], ["re"], perm=[0, 3, 2, 1]),
             h.make_node("Transpose", ["im_g"], ["im"], perm=[0, 3, 2, 1]),
             h.make_node("Pow", ["re", "two"], ["re2"]), h.make_node("Pow", ["im", "two"], ["im2"]),
             h.make_node("Add", ["re2", "im2"], ["power"]), h.make_node("Add", ["power", "eps"], ["power_eps"]),
             h.make_node("Sqrt", ["power_eps"], ["mag"])]
    return _model(nodes, [("spec", (1, freqs, 1, 2))], [("mag", (1, 1, 1, freqs))], inits, "magnitude")


def speech_frames(count: int, seed: int = 0, snr_db: float = 20.0) -> np.ndarray:
    """``count`` STFT frames (count, F, 1, 2) of a voiced signal in white noise: syllables of
    a few frames (a random pitch each, harmonics falling off) between pauses, so frames
    differ by ~40 dB in loudness as speech does (square-root Hann window, FFT/HOP)."""
    rng = np.random.default_rng(seed)
    samples = (count + 1) * HOP
    t = np.arange(samples) / 16000.0
    voice, envelope = np.zeros(samples), np.zeros(samples)
    at = 0
    while at < samples:
        length = int(rng.integers(4, 10)) * HOP
        if rng.random() < 0.6:   # a syllable (else a pause)
            f0 = rng.uniform(90, 250)
            piece = sum(np.sin(2 * np.pi * f0 * k * t[at:at + length] + rng.uniform(0, 6)) / k for k in range(1, 20))
            voice[at:at + length] = piece
            envelope[at:at + length] = rng.uniform(0.3, 1.0) * np.hanning(len(piece))
        at += length
    signal = voice * envelope
    signal += rng.normal(0, np.std(signal) * 10 ** (-snr_db / 20), samples)
    window = np.hanning(FFT) ** 0.5
    padded = np.pad(signal, FFT // 2)
    frames = np.stack([padded[i * HOP:i * HOP + FFT] * window for i in range(count)])
    spectrum = np.fft.rfft(frames)
    return np.stack([spectrum.real, spectrum.imag], -1).astype(np.float32)[:, :, None, :]


def stream_feeds(model: onnx.ModelProto, frames: Sequence[np.ndarray],
                 caches: dict[str, str]) -> list[dict[str, np.ndarray]]:
    """Feeds of ``model`` over ``frames`` (its first input), each call given the caches
    (``caches``: input -> output) onnxruntime's float run of the call before left; the first
    call zeros."""
    import onnxruntime as ort  # 0.5 s to import: only the tests that stream pay for it
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    frame_input = next(n for n in inputs if n not in caches)
    state = {n: np.zeros(inputs[n], np.float32) for n in caches}
    feeds = []
    for frame in frames:
        feed = {frame_input: np.asarray(frame, np.float32).reshape(inputs[frame_input]), **state}
        feeds.append(feed)
        outs = dict(zip(names, session.run(None, feed)))
        state = {n: outs[o] for n, o in caches.items()}
    return feeds
