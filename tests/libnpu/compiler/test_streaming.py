"""Streaming models as users bring them (one STFT frame a call, caches in and out:
tests/support/streaming_models.py), quantized on frames of a stream and judged frame by frame
against onnxruntime, as the corpus judges them: a frame 30 dB quieter than the loudest is
a frame like any other."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.lower import lower
from libnpu.compiler.mixed_precision import promotable, quantize_mixed
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.rnn_models import cosine
from tests.support.streaming_models import magnitude_model, speech_frames

ort = pytest.importorskip("onnxruntime")


def test_magnitude_with_epsilon_holds_quiet_frames(tmp_path):
    """GTCRN's ``sqrt(re**2 + im**2 + 1e-12)`` becomes REDUCE_L2 as the magnitude without the
    epsilon does (exact integer squares, one rounding after the root), and all int16 keeps a
    frame 30 dB under the loudest at cosine >= 0.99 on the chip. The epsilon hid it from the
    rewrite: SQRT (int8 only) of a power whose grid spans the loudest frame's energy (the
    square of its range: 78 dB for a 39 dB quieter frame) read the quiet frame's bins as 0
    or one step: cosine 0.60 here, 0.40 at int8 on the corpus's STFT frames."""
    model = magnitude_model()
    frames = speech_frames(160, seed=3)
    loudness = np.abs(frames).reshape(len(frames), -1).max(1)
    graph = import_onnx(model.SerializeToString())
    promote = [op.outputs[0] for op in optimize(graph).ops if promotable(op)]
    q = quantize_mixed(graph, [{"spec": f[None]} for f in frames[:120]], int16=promote)
    assert [op.type for op in q.ops if op.type in ("SQRT", "REDUCE_L2")] == ["REDUCE_L2"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    unseen = frames[120:]
    quiet = unseen[np.argmin(loudness[120:])]
    assert np.abs(quiet).max() < loudness.max() / 30      # the stream holds a frame 30 dB down
    mem = ChipMemory(tmp_path, size=4 << 20)
    loadable = lower(q)
    for frame in [quiet, *unseen[::8]]:
        (want,) = session.run(None, {"spec": frame[None]})
        (got,) = run_loadable(mem, loadable, [frame[None]])
        assert cosine(got, want) >= 0.99, (float(np.abs(frame).max()), cosine(got, want))
