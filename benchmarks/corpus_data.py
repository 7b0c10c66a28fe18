"""Natural data for the corpus, available offline: pictures, text lines and synthesized speech.

* Pictures: the scikit-image wheel's (``libnpu.model_zoo.picture``), split as
  benchmarks/models_in_the_wild.py splits them: ten to calibrate, astronaut and chelsea to
  evaluate.
* Text lines: the lines of scikit-image's ``page`` (a photographed book page), found by
  their row profile; the first lines calibrate, the others (and a strip of ``text``, a
  photographed blackboard) evaluate.
* Speech: phrases spoken by espeak-ng (Debian's ``espeak-ng``; installed with apt-get when
  missing and this process may, else a clear error), cached as .wav under
  ``corpus/speech``; calibration and evaluation phrases differ, and so do their voices.
* Files: the Python standard library's own files, for a content-type classifier.

Calibration and evaluation data never overlap: what a model is judged on is unseen.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import wave
from functools import cache
from pathlib import Path

import numpy as np

from benchmarks.corpus_manifest import corpus_dir
from libnpu import model_zoo
from libnpu.tools.vision.image import resize

CAL_PICTURES = ("coffee", "camera", "motorcycle_left", "coins", "moon", "brick", "grass", "gravel", "ihc", "page")
EVAL_PICTURES = ("astronaut", "chelsea")

CAL_PHRASES = (
    ("en-us", "Alexa, turn on the kitchen lights and play some music."),
    ("en-gb", "Hey Jarvis, what is the weather like in London tomorrow?"),
    ("en-us+f3", "Okay Nabu, set a timer for ten minutes please."),
    ("en-us+m3", "Hey Mycroft, how far away is the moon from the earth?"),
    ("en-gb+f2", "Switch off the fan, then open the garage door."),
    ("en-us+m5", "Seven, three, nine, zero. Yes, no, up, down, left, right."),
)
EVAL_PHRASES = (
    ("en-us+f4", "Hey Rhasspy, what time is it in Tokyo right now?"),
    ("en-gb+m2", "Alexa, stop the alarm. Okay Nabu, go to sleep."),
)


# pictures ----------------------------------------------------------------------------------

def picture(name: str) -> np.ndarray:
    """A scikit-image picture, uint8 RGB (H, W, 3)."""
    return model_zoo.picture(name)


def letterbox(pixels: np.ndarray, height: int, width: int, fill: float = 0.0, center: bool = False) -> np.ndarray:
    """``pixels`` scaled to fit (height, width) with its aspect kept, the rest ``fill``
    (top-left aligned, as YOLO exporters' loaders do, or centered as mediapipe's)."""
    scale = min(height / pixels.shape[0], width / pixels.shape[1])
    h, w = max(1, round(pixels.shape[0] * scale)), max(1, round(pixels.shape[1] * scale))
    out = np.full((height, width, pixels.shape[2]), fill, np.float32)
    top, left = ((height - h) // 2, (width - w) // 2) if center else (0, 0)
    out[top:top + h, left:left + w] = resize(pixels, h, w)
    return out


def center_square(pixels: np.ndarray) -> np.ndarray:
    side = min(pixels.shape[:2])
    top, left = (pixels.shape[0] - side) // 2, (pixels.shape[1] - side) // 2
    return pixels[top:top + side, left:left + side]


@cache
def text_lines() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(calibration, evaluation) crops of text, uint8 RGB, about six times as wide as high (a
    phrase, as an OCR detector boxes it): the lines of ``page``, found by their row profile
    once each column's paper shade is taken away (the first half of the lines calibrates),
    and for evaluation also strips of ``text``."""
    page = picture("page")
    grey = page.astype(np.float32).mean(axis=2)
    ink = ((grey - np.median(grey, axis=0, keepdims=True)) < -35).mean(axis=1)
    lines, start = [], None
    for y, dark in enumerate(np.append(ink > 0.03, False)):
        if dark and start is None:
            start = y
        elif not dark and start is not None:
            if y - start >= 6:
                lines.append(page[max(0, start - 3):min(page.shape[0], y + 3)])
            start = None
    half = (len(lines) + 1) // 2

    def pieces(line: np.ndarray) -> list[np.ndarray]:
        width = int(6 * line.shape[0])
        return [line[:, x:x + width] for x in range(0, line.shape[1] - width // 2, width)]

    text = picture("text")
    return ([p for line in lines[:half] for p in pieces(line)],
            [p for line in lines[half:] for p in pieces(line)] + [text[y:y + 40, :240] for y in (25, 95)])


# speech ------------------------------------------------------------------------------------

def _espeak() -> str:
    found = shutil.which("espeak-ng")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "espeak-ng"], env=env, capture_output=True, timeout=600)
        found = shutil.which("espeak-ng")
        if found:
            return found
    raise RuntimeError("speech data needs espeak-ng (Debian package espeak-ng): apt-get install espeak-ng")


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path)) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), np.int16)
        return frames.reshape(-1, w.getnchannels())[:, 0].astype(np.float32) / 32768.0, w.getframerate()


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Band-limited resampling by the FFT (as scipy.signal.resample), float32."""
    if rate == target:
        return audio.astype(np.float32)
    n = int(round(len(audio) * target / rate))
    spectrum = np.fft.rfft(audio)
    keep = min(len(spectrum), n // 2 + 1)
    out = np.zeros(n // 2 + 1, complex)
    out[:keep] = spectrum[:keep]
    return (np.fft.irfft(out, n) * (n / len(audio))).astype(np.float32)


def speech(voice: str, text: str, rate: int = 16000) -> np.ndarray:
    """``text`` spoken by espeak-ng with ``voice``, mono float in [-1, 1] at ``rate`` Hz,
    with 0.3 s of silence around it (cached as a .wav)."""
    folder = corpus_dir() / "speech"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (hashlib.sha256(f"{voice}|{text}".encode()).hexdigest()[:16] + ".wav")
    if not path.is_file():
        part = path.with_name(path.name + f".part{os.getpid()}.wav")
        subprocess.run([_espeak(), "-v", voice, "-s", "150", "-w", str(part), text], check=True,
                       capture_output=True, timeout=120)
        os.replace(part, path)
    audio, native = _read_wav(path)
    audio = resample(audio, native, rate)
    silence = np.zeros(int(0.3 * rate), np.float32)
    return np.concatenate([silence, audio, silence])


def phrases(which: str, rate: int = 16000) -> list[np.ndarray]:
    """The calibration ("cal") or evaluation ("eval") phrases at ``rate`` Hz."""
    return [speech(v, t, rate) for v, t in (CAL_PHRASES if which == "cal" else EVAL_PHRASES)]


def frames(audio: np.ndarray, size: int, hop: int) -> np.ndarray:
    """Overlapping frames (n, size) of ``audio`` (zero-padded at the end)."""
    n = max(1, 1 + (len(audio) - size + hop - 1) // hop)
    padded = np.pad(audio, (0, max(0, (n - 1) * hop + size - len(audio))))
    idx = np.arange(size)[None, :] + hop * np.arange(n)[:, None]
    return padded[idx]


def mel_filters(bins: int, fft: int, rate: int, low: float = 20.0, high: float | None = None) -> np.ndarray:
    """Triangular HTK mel filters (bins, fft // 2 + 1)."""
    high = high or rate / 2

    def mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    points = 700.0 * (10 ** (np.linspace(mel(low), mel(high), bins + 2) / 2595.0) - 1.0)
    freqs = np.linspace(0, rate / 2, fft // 2 + 1)
    out = np.zeros((bins, len(freqs)), np.float32)
    for i in range(bins):
        lo, mid, hi = points[i:i + 3]
        out[i] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    return out


def log_mel(audio: np.ndarray, rate: int, bins: int, window_ms: float = 30, step_ms: float = 10,
            low: float = 125.0, high: float = 7500.0) -> np.ndarray:
    """Log mel energies (frames, bins) with a Hann window: the shape of the TFLite Micro
    audio front end's output (before its noise reduction and gain control)."""
    size, hop = int(rate * window_ms / 1000), int(rate * step_ms / 1000)
    fft = 1 << (size - 1).bit_length()
    spec = np.abs(np.fft.rfft(frames(audio, size, hop) * np.hanning(size), fft)) ** 2
    return np.log(spec @ mel_filters(bins, fft, rate, low, high).T + 1e-6).astype(np.float32)


# files -------------------------------------------------------------------------------------

def stdlib_files() -> tuple[list[Path], list[Path]]:
    """(calibration, evaluation) files of several types from the standard library and the
    scikit-image pictures: sources, a zip, texts, PNGs."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    cached = model_zoo.cache_dir()
    cal = [lib / "json" / "__init__.py", lib / "LICENSE.txt", cached / "coffee.png", lib / "wave.py",
           Path(sys.executable).resolve(), lib / "email" / "mime" / "text.py", cached / "moon.png", lib / "csv.py"]
    evaluation = [lib / "zipfile" / "__init__.py" if (lib / "zipfile").is_dir() else lib / "zipfile.py",
                  cached / "astronaut.png", lib / "this.py", lib / "html" / "entities.py"]
    return [p for p in cal if p.is_file()], [p for p in evaluation if p.is_file()]
