"""Choosing an int8 activation range from a tensor's observed values.

Each tensor's values over the calibration runs are summarized as its exact min/max and a
histogram (``Histogram``: 2048 bins spanning the values seen so far and zero, widened as
new values fall outside). The methods (``METHODS``) then pick the range [lo, hi] that the
255 steps of an asymmetric int8 grid will cover:

* ``minmax``: the whole observed range; no value is clipped, the steps are as coarse as
  the rarest outlier makes them.
* ``percentile``: cut at the ``percentile`` and ``100 - percentile`` quantiles.
* ``mse``: the range whose quantization error, integrated over the histogram, is
  smallest: values inside cost ``step^2 / 12`` (uniform rounding error), values outside
  their squared distance to the clipped end. Each end is searched on its own scale.
* ``entropy``: TensorRT's KL-divergence calibration, extended to both sides: the range
  ``f * [min, max]`` whose 255-level quantization Q of the clipped histogram P (outliers
  folded into the end bins) has the smallest KL(P || Q).

The ranges always include zero (the int8 grid must represent it exactly).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Histogram", "METHODS", "choose_range"]

METHODS = ("minmax", "percentile", "mse", "entropy")
LEVELS = 255  # steps of the int8 grid


class Histogram:
    """Counts of a tensor's values over ``bins`` equal bins of a range that only widens."""

    def __init__(self, bins: int = 2048) -> None:
        self.bins = bins
        self.counts = np.zeros(bins, np.float64)
        self.lo = self.hi = 0.0          # the histogram's span (includes zero)
        self.min, self.max = math.inf, -math.inf  # exact extremes of the values seen
        # Exact zeros (ReLU outputs are often half zeros) are counted apart: the int8 grid
        # represents zero exactly, and a spike in one bin would skew the entropy method.
        self.zeros = 0.0

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, self.bins + 1)

    @property
    def total(self) -> float:
        return float(self.counts.sum()) + self.zeros

    def add(self, values: np.ndarray) -> None:
        v = np.asarray(values, np.float64).reshape(-1)
        if v.size == 0:
            return
        vmin, vmax = float(v.min()), float(v.max())
        self.min, self.max = min(self.min, vmin), max(self.max, vmax)
        nonzero = v[v != 0]
        self.zeros += v.size - nonzero.size
        lo, hi = min(self.lo, vmin, 0.0), max(self.hi, vmax, 0.0)
        if hi - lo < 1e-12:
            hi = lo + 1e-12
        if (lo, hi) != (self.lo, self.hi):
            if self.counts.any():
                # Re-bin what was counted: each old bin's count goes to the new bin of its centre.
                centres = (self.edges[:-1] + self.edges[1:]) / 2
                self.counts = np.histogram(centres, self.bins, (lo, hi), weights=self.counts)[0]
            self.lo, self.hi = lo, hi
        self.counts += np.histogram(nonzero, self.bins, (self.lo, self.hi))[0]


def _percentile(h: Histogram, percentile: float) -> tuple[float, float]:
    counts = h.counts.copy()
    counts[min(int((0.0 - h.lo) / (h.hi - h.lo) * h.bins), h.bins - 1)] += h.zeros
    cdf = np.cumsum(counts) / h.total
    edges = h.edges
    q_lo, q_hi = (100.0 - percentile) / 100.0, percentile / 100.0
    lo = float(np.interp(q_lo, np.concatenate([[0.0], cdf]), edges))
    hi = float(np.interp(q_hi, np.concatenate([[0.0], cdf]), edges))
    return max(lo, h.min), min(hi, h.max)


def _candidates(extreme: float, count: int = 48) -> np.ndarray:
    """Ends to try between 1/16 of ``extreme`` and ``extreme`` itself (geometric steps)."""
    if extreme == 0.0:
        return np.zeros(1)
    return extreme * np.geomspace(1 / 16, 1.0, count)


def _mse(h: Histogram) -> tuple[float, float]:
    edges = h.edges
    x = (edges[:-1] + edges[1:]) / 2
    c = h.counts
    los = _candidates(min(h.min, 0.0))
    his = _candidates(max(h.max, 0.0))
    below = (np.where(x[None, :] < los[:, None], (x[None, :] - los[:, None]) ** 2, 0.0)) @ c
    above = (np.where(x[None, :] > his[:, None], (x[None, :] - his[:, None]) ** 2, 0.0)) @ c
    cum = np.concatenate([[0.0], np.cumsum(c)])
    count_below = cum[np.searchsorted(x, los, side="left")]   # values under each lo
    count_upto = cum[np.searchsorted(x, his, side="right")]   # values up to each hi
    inside = count_upto[None, :] - count_below[:, None]
    step = (his[None, :] - los[:, None]) / LEVELS
    err = below[:, None] + above[None, :] + inside * step * step / 12.0
    err = np.where(step > 0, err, np.inf)
    k, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return float(los[k]), float(his[j])


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def _entropy(h: Histogram) -> tuple[float, float]:
    edges, c = h.edges, h.counts
    full = (min(h.min, 0.0), max(h.max, 0.0))
    width = (h.hi - h.lo) / h.bins
    best, best_range = math.inf, full
    for f in np.linspace(1.0, 1 / 16, 64):
        lo, hi = full[0] * f, full[1] * f
        i0 = int(np.clip(np.floor((lo - h.lo) / width + 1e-9), 0, h.bins - 1))
        i1 = int(np.clip(np.ceil((hi - h.lo) / width - 1e-9), i0 + 1, h.bins))
        window = c[i0:i1]
        if i1 - i0 < LEVELS or window.sum() == 0 or c.sum() == 0:
            continue
        p = window.copy()
        p[0] += c[:i0].sum()
        p[-1] += c[i1:].sum()
        # Q: the window (without its outliers) merged into LEVELS chunks, each chunk's mass
        # spread evenly over the bins it had values in.
        starts = np.linspace(0, window.size, LEVELS + 1).astype(int)[:-1]
        mass = np.add.reduceat(window, starts)
        used = np.add.reduceat((window > 0).astype(np.float64), starts)
        chunk = np.repeat(np.arange(LEVELS), np.diff(np.append(starts, window.size)))
        q = np.where(window > 0, (mass / np.maximum(used, 1))[chunk], 0.0)
        if q.sum() == 0:
            continue
        d = _kl(p, q)
        if d < best:
            best, best_range = d, (float(edges[i0]), float(edges[i1]))
    return max(best_range[0], full[0]), min(best_range[1], full[1])


def choose_range(h: Histogram, method: str, percentile: float = 99.99) -> tuple[float, float]:
    """The activation range ``method`` picks for the values summarized by ``h``."""
    if not h.total:
        return 0.0, 0.0
    if method == "minmax" or not h.counts.any():  # nothing but zeros
        return h.min, h.max
    if method == "minmax":
        return h.min, h.max
    if method == "percentile":
        return _percentile(h, percentile)
    if method == "mse":
        return _mse(h)
    if method == "entropy":
        return _entropy(h)
    raise ValueError(f"unknown calibration method {method!r} (expected one of {', '.join(METHODS)})")
