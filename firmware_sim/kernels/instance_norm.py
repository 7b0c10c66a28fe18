"""Integer instance normalization with a per-channel scale and shift (INSTANCE_NORM).

LiteRT has no such kernel (TFLite graphs spell it as means, squared differences, inverse square roots),
so the chip runs our formula (npu_hw.ops ``INSTANCE_NORM``, docs/hardware.md): each
(batch, channel) plane's mean and variance come from exact integer sums of its codes,
and everything after them is float64, one IEEE operation at a time in a fixed order, so
any implementation doing the same steps gives the same bytes. A plane's statistics are
exact whatever its size relative to the tensor's grid: a channel a hundred times
narrower than the widest is normalized as well as the widest, where the op-by-op graph
loses it in the grid of its squares.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from .output import check_act_range, check_int_param

__all__ = ["instance_norm"]


def _plane_values(v: np.ndarray, channels: int, zp: int, scale: float, name: str) -> np.ndarray:
    if v.size not in (1, channels):
        raise InvalidCommand(f"{name} holds {v.size} values for {channels} channels (1 or {channels})")
    return (v.astype(np.float64).reshape(-1) - zp) * scale


def instance_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, input_zp: int, gamma_zp: int,
                  beta_zp: int, output_zp: int, act_min: int, act_max: int, input_scale: float,
                  gamma_scale: float, beta_scale: float, output_scale: float, epsilon: float,
                  out: np.ndarray | None = None) -> np.ndarray:
    """``x`` [batch, pixels, channels] (int8 or int16) normalized per (batch, channel)
    over its pixels, times ``gamma`` plus ``beta`` (1 or ``channels`` codes each), on the
    output grid (``x``'s dtype)."""
    if x.ndim != 3 or x.dtype not in (np.int8, np.int16):
        raise TypeError(f"x must be int8 or int16 [batch, pixels, channels], got {x.dtype} {x.shape}")
    info = np.iinfo(x.dtype)
    low, high = check_act_range(act_min, act_max, info.min, info.max)
    zx = check_int_param("input_zp", input_zp, info.min, info.max)
    zy = check_int_param("output_zp", output_zp, info.min, info.max)
    scales = np.array([input_scale, gamma_scale, beta_scale, output_scale], np.float64)
    if not (np.all(np.isfinite(scales)) and np.all(scales > 0) and np.isfinite(epsilon) and epsilon >= 0):
        raise InvalidCommand(f"instance norm: scales {scales.tolist()} and epsilon {epsilon} must be finite, "
                             "the scales positive")
    batch, pixels, channels = x.shape
    g = _plane_values(gamma, channels, gamma_zp, gamma_scale, "gamma")
    b = _plane_values(beta, channels, beta_zp, beta_scale, "beta")
    q = x.astype(np.int64) - zx
    s1 = q.sum(axis=1)                                     # [batch, channels], exact
    s2 = (q * q).sum(axis=1)                               # exact: |q| < 2^16, pixels < 2^31
    mean = np.empty((batch, channels), np.float64)
    var = np.empty((batch, channels), np.float64)
    for i in range(batch):
        for c in range(channels):
            a1, a2 = int(s1[i, c]), int(s2[i, c])
            mean[i, c] = a1 / pixels                       # correctly rounded (Python int division)
            var[i, c] = (pixels * a2 - a1 * a1) / (pixels * pixels)
    k = input_scale * g / np.sqrt(var * (input_scale * input_scale) + epsilon)
    y = ((q - mean[:, None, :]) * k[:, None, :] + b) / output_scale
    res = np.clip(np.rint(y) + zy, low, high).astype(x.dtype)
    if out is None:
        return res
    out[...] = res
    return out
