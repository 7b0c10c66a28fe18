"""Inputs of round 8's EEG models (brainmaze-eeg-models), prepared as their package prepares them.

``seizure._seizure_detect.preprocess_input`` (brainmaze-eeg-models 0.1.0; versions of
``benchmarks/corpus_manifest_round8.py``): each window of raw signal is z-scored, its
spectrogram taken as ``scipy.signal.spectrogram(x, fs, nperseg=fs, noverlap=fs // 2)`` makes
it (a periodic Tukey window of 0.25, each segment less its mean, one-sided power spectral
density: 1 Hz bins every 0.5 s) and cut to its first 100 bins, then each bin z-scored over
the window's columns; the model takes (batch, 100, columns). The package recommends 300 s
windows (599 columns, any number from 2 runs); a compiled model takes one length, here 30 s
(59 columns), so its two bidirectional LSTMs unroll over 59 steps. No EEG ships in a wheel
reached here, so the signals are synthesized at 500 Hz: 1/f background with theta and alpha
rhythms and a few interictal spikes, and in some windows a seizure (a 3-8 Hz spike-wave
rhythm of growing amplitude and falling frequency over 8-20 s); calibration and evaluation
from different seeds. The spectrogram is computed here with numpy (scipy is not a
dependency of this project); ``eeg_spectrogram`` follows scipy's definitions.

The sleep-spindle detector (``spindles._detector.SpindleDetector.predict_windows``, the
"eeg" model) takes 30 s windows at 250 Hz (7500 samples): ``raw_signal`` the window z-scored,
``spectrogram`` its scalogram (demeaned first: the "eeg" model's default), each of its 15 rows
z-scored. The scalogram is ``abs(pywt.cwt(x, geomspace(135, 270, 15), 'shan6-13'))`` at
pywt's precision 10, as ``spindles._cwt`` documents it (``spindle_scalogram``: the running
integral of the conjugated wavelet, resampled per scale, convolved, differenced, times
-sqrt(scale), trimmed to the window). The windows are synthesized sleep EEG: 1/f background,
delta and theta rhythms and 0-4 spindles (11-16 Hz, 0.5-2 s, waxing and waning) a window.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.corpus_inputs import Feed, Feeds, model_inputs
from benchmarks.corpus_manifest import CorpusModel

EEG_RATE = 500           # Hz: even and >= 200, as the package requires
EEG_SECONDS = 30         # a window (the package recommends 300 s; one length a compile)
EEG_BINS = 100           # N_FREQ_BINS: 0-99 Hz
EEG_WINDOWS = {"cal": 16, "eval": 6}
EEG_SEEDS = {"cal": 21, "eval": 22}


def tukey(size: int, alpha: float = 0.25) -> np.ndarray:
    """scipy's periodic ("fftbins") Tukey window: the symmetric one of ``size + 1`` points less its last."""
    m = size + 1
    n = np.arange(m)
    width = int(np.floor(alpha * (m - 1) / 2.0))
    w = np.ones(m)
    edge = n[:width + 1]
    w[:width + 1] = 0.5 * (1 + np.cos(np.pi * (-1 + 2.0 * edge / alpha / (m - 1))))
    w[m - width - 1:] = w[:width + 1][::-1]
    return w[:-1]


def eeg_spectrogram(x: np.ndarray, rate: int) -> np.ndarray:
    """``preprocess_input`` of one window: (EEG_BINS, columns) float32."""
    x = (x - x.mean()) / (x.std() or 1.0)
    hop, window = rate // 2, tukey(rate)
    segments = np.stack([x[i:i + rate] for i in range(0, len(x) - rate + 1, hop)])
    segments = segments - segments.mean(axis=1, keepdims=True)   # detrend="constant"
    power = np.abs(np.fft.rfft(segments * window, axis=1)) ** 2 / (rate * np.sum(window ** 2))
    power[:, 1:-1] *= 2   # one-sided density (an even segment: the Nyquist bin once)
    sxx = power[:, :EEG_BINS].T
    valid = sxx.sum(axis=0) != 0
    mean, std = sxx[:, valid].mean(axis=1, keepdims=True), sxx[:, valid].std(axis=1, keepdims=True)
    sxx[:, valid] = (sxx[:, valid] - mean) / np.where(std > 0, std, 1.0)
    return sxx.astype(np.float32)


def synthetic_eeg(rng: np.random.Generator, seizure: bool, rate: int = EEG_RATE,
                  seconds: int = EEG_SECONDS) -> np.ndarray:
    """A window of synthesized EEG (microvolts)."""
    n = rate * seconds
    t = np.arange(n) / rate
    spectrum = np.fft.rfft(rng.normal(size=n))
    spectrum[1:] /= np.sqrt(np.fft.rfftfreq(n, 1 / rate)[1:])   # 1/f background
    x = np.fft.irfft(spectrum, n) * 30 / np.fft.irfft(spectrum, n).std()
    for low, high, amplitude in ((4, 7, 12), (8, 12, 20)):   # theta and alpha, waxing and waning
        f = rng.uniform(low, high)
        x += amplitude * rng.uniform(0.3, 1) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) * (
            0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(0.05, 0.3) * t))
    for at in rng.uniform(0, seconds, rng.integers(0, 4)):   # interictal spikes
        x += rng.uniform(80, 200) * np.exp(-((t - at) / 0.02) ** 2)
    if seizure:
        start, length = rng.uniform(2, seconds - 10), rng.uniform(8, 20)
        phase = np.clip((t - start) / length, 0, 1)
        inside = (t >= start) & (t <= start + length)
        frequency = 8 - 5 * phase   # evolving: faster to slower
        wave = np.sin(2 * np.pi * np.cumsum(frequency) / rate)
        spikes = np.maximum(wave, 0) ** 6
        x += inside * (40 + 160 * phase) * (wave + 2 * spikes)
    return x


def eeg_windows(which: str) -> list[np.ndarray]:
    """The spectrograms of ``which`` ("cal" or "eval") synthesized windows, a third with a seizure."""
    rng = np.random.default_rng(EEG_SEEDS[which])
    return [eeg_spectrogram(synthetic_eeg(rng, seizure=i % 3 == 2), EEG_RATE) for i in range(EEG_WINDOWS[which])]


SPINDLE_RATE, SPINDLE_SAMPLES = 250, 7500
SPINDLE_SCALES = np.geomspace(135, 270, num=15)
SPINDLE_WINDOWS = {"cal": 12, "eval": 4}


def spindle_scalogram(x: np.ndarray, scales: np.ndarray = SPINDLE_SCALES, precision: int = 10) -> np.ndarray:
    """``abs(pywt.cwt(x, scales, 'shan6-13', method='conv', precision=10))``: (len(scales), len(x))."""
    grid = np.linspace(-20.0, 20.0, 2 ** precision)
    step = grid[1] - grid[0]
    psi = np.sqrt(6.0) * np.sinc(6.0 * grid) * np.exp(2j * np.pi * 13.0 * grid)
    integral = np.conj(np.cumsum(psi) * step)
    out = np.empty((len(scales), len(x)))
    for i, scale in enumerate(scales):
        j = (np.arange(scale * (grid[-1] - grid[0]) + 1) / (scale * step)).astype(int)
        kernel = integral[j[j < integral.size]][::-1]
        size = len(x) + kernel.size - 1
        full = np.fft.ifft(np.fft.fft(x, size) * np.fft.fft(kernel, size))   # np.convolve(x, kernel)
        coef = -np.sqrt(scale) * np.diff(full)
        d = (kernel.size - 2) / 2.0
        out[i] = np.abs(coef[int(np.floor(d)):coef.size - int(np.ceil(d))])
    return out


def _zscore_rows(a: np.ndarray) -> np.ndarray:
    std = a.std(axis=-1, keepdims=True)
    return ((a - a.mean(axis=-1, keepdims=True)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def synthetic_sleep_eeg(rng: np.random.Generator, rate: int = SPINDLE_RATE, samples: int = SPINDLE_SAMPLES
                        ) -> np.ndarray:
    """A 30 s window of synthesized sleep EEG (microvolts) with 0-4 spindles."""
    t = np.arange(samples) / rate
    spectrum = np.fft.rfft(rng.normal(size=samples))
    spectrum[1:] /= np.fft.rfftfreq(samples, 1 / rate)[1:] ** 0.6
    x = np.fft.irfft(spectrum, samples)
    x *= 25 / x.std()
    for low, high, amplitude in ((0.5, 2, 40), (4, 7, 10)):
        x += amplitude * rng.uniform(0.3, 1) * np.sin(2 * np.pi * rng.uniform(low, high) * t + rng.uniform(0, 6))
    for _ in range(rng.integers(0, 5)):
        at, length, frequency = rng.uniform(1, 28), rng.uniform(0.5, 2), rng.uniform(11, 16)
        envelope = np.exp(-0.5 * ((t - at) / (length / 4)) ** 2)
        x += rng.uniform(15, 40) * envelope * np.sin(2 * np.pi * frequency * t)
    return x


def spindles(model: CorpusModel, path: Path) -> Feeds:
    rng = {w: np.random.default_rng(EEG_SEEDS[w] + 10) for w in ("cal", "eval")}

    def feeds(which: str) -> list[Feed]:
        out = []
        for _ in range(SPINDLE_WINDOWS[which]):
            x = synthetic_sleep_eeg(rng[which])
            out.append({"raw_signal": _zscore_rows(x)[None, None],
                        "spectrogram": _zscore_rows(spindle_scalogram(x - x.mean()))[None]})
        return out
    return Feeds(feeds("cal"), feeds("eval"), {"raw_signal": (1, 1, SPINDLE_SAMPLES),
                                               "spectrogram": (1, len(SPINDLE_SCALES), SPINDLE_SAMPLES)})


def seizure(model: CorpusModel, path: Path) -> Feeds:
    name = model_inputs(path)[0].name

    def feeds(which: str) -> list[Feed]:
        return [{name: s[None]} for s in eeg_windows(which)]
    columns = 2 * EEG_SECONDS - 1
    return Feeds(feeds("cal"), feeds("eval"), {name: (1, EEG_BINS, columns)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {f.__name__: f for f in (seizure, spindles)}
