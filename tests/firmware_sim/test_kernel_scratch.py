"""What the C kernels keep per thread between calls (int8_kernels.c): the scratch arena
(``scratch_take``: a call finds the last one's bytes in it; a request too large to keep is
allocated per call) and the layers' requantization tables (``requant_kept``: used again only
while the multipliers and shifts hold the same bytes). Whatever they held before, the
outputs equal the numpy path's."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.kernels import native
from firmware_sim.kernels.conv import conv2d, depthwise_conv2d, depthwise_conv2d_bound
from npu_hw.ops import PADDING_SAME, conv_geometry
from tests.support.quant_utils import random_int8


def _layer(rng: np.random.Generator, h: int, w: int, cin: int, k: int, channels_out: int | None):
    """(inputs, weights, bias, keyword arguments) of a SAME-padded 3x3-ish layer, stride 1."""
    oh, pt = conv_geometry(h, k, 1, 1, PADDING_SAME)
    ow, pl = conv_geometry(w, k, 1, 1, PADDING_SAME)
    cout = channels_out or cin
    x = random_int8(rng, (1, h, w, cin))
    wt = random_int8(rng, (cout, k, k, cin) if channels_out else (1, k, k, cin))
    bias = rng.integers(-(1 << 20), 1 << 20, size=cout, dtype=np.int64).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, size=cout, dtype=np.int64).astype(np.int32)
    shift = rng.integers(-12, -6, size=cout).astype(np.int32)
    return x, wt, bias, dict(stride=(1, 1), dilation=(1, 1), padding=(pt, pl), out_hw=(oh, ow),
                             input_zp=int(rng.integers(-128, 128)), output_zp=int(rng.integers(-128, 128)),
                             multiplier=mult, shift=shift, act_min=-128, act_max=127)


def _both(fn, x, wt, bias, kwargs) -> tuple[np.ndarray, np.ndarray]:
    with native.enabled(True):
        assert native.library() is not None
        fast = fn(x, wt, bias, **kwargs)
    with native.enabled(False):
        slow = fn(x, wt, bias, **kwargs)
    return fast, slow


def test_small_calls_after_large_ones_see_no_stale_scratch() -> None:
    """Large, small, large again, alternating depthwise and convolution: each slot is
    grown, then reused holding a bigger layer's bytes; the largest depthwise's padded input
    (over 4 MB) is past what a slot keeps, so it goes through the per-call allocation."""
    rng = np.random.default_rng(27)
    layers = [(depthwise_conv2d, _layer(rng, 320, 300, 48, 3, None)),    # > SCRATCH_KEEP
              (depthwise_conv2d, _layer(rng, 40, 36, 64, 5, None)),
              (conv2d, _layer(rng, 24, 24, 32, 3, 40)),
              (depthwise_conv2d, _layer(rng, 3, 1, 8, 3, None)),
              (conv2d, _layer(rng, 2, 2, 4, 1, 3)),
              (depthwise_conv2d, _layer(rng, 40, 36, 64, 5, None))]
    for fn, (x, wt, bias, kwargs) in layers + layers[::-1]:
        fast, slow = _both(fn, x, wt, bias, kwargs)
        np.testing.assert_array_equal(fast, slow)


@pytest.mark.parametrize("per_channel", [True, False])
def test_kept_requantization_follows_multipliers_rewritten_in_place(per_channel: bool) -> None:
    """A bound depthwise call (what a job plan replays) keeps its layer's tables; the client
    rewrites the multipliers and shifts in place (same addresses, same sizes): the next call
    computes with the new ones, and a bad shift written in place is still refused."""
    rng = np.random.default_rng(3 + per_channel)
    x, wt, bias, kwargs = _layer(rng, 5, 1, 24, 3, None)
    if not per_channel:
        kwargs["multiplier"], kwargs["shift"] = kwargs["multiplier"][:1].copy(), kwargs["shift"][:1].copy()
    out = np.zeros((1, *kwargs["out_hw"], 24), np.int8)
    mult, shift = kwargs["multiplier"], kwargs["shift"]
    with native.enabled(True):
        bound = depthwise_conv2d_bound(x, wt, bias, out=out, **kwargs)
        assert bound is not None
        for _ in range(3):
            bound()
            with native.enabled(False):
                np.testing.assert_array_equal(out, depthwise_conv2d(x, wt, bias, **kwargs))
            mult[-1] = mult[-1] // 2 + (1 << 29)
            shift[0] -= 1
        shift[-1] = 40
        with pytest.raises(ValueError, match="shift"):
            bound()
