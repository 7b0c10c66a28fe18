"""The VNNI GEMM of convolutions (``gemm_kernels.c``) against the numpy path byte for byte:
tile edges (output pixels around the 4-row tile, channels around the 16-lane block and the
64-channel tile, depths not a multiple of 4), groups, zero points at both ends; and its
packed-filter cache, which must follow weights and biases rewritten in place."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.kernels import native
from firmware_sim.kernels.conv import conv2d, conv2d_bound
from tests.support.quant_utils import random_int8

pytestmark = pytest.mark.skipif(not native.has_dnnl(), reason="the C convolution needs oneDNN's build")


def _case(rng: np.random.Generator, pixels: int, cin: int, cout: int, kh: int, groups: int = 1) -> tuple:
    x = random_int8(rng, (1, pixels, 1, cin * groups))
    w = random_int8(rng, (cout * groups, kh, 1, cin))
    bias = rng.integers(-(1 << 16), 1 << 16, size=cout * groups).astype(np.int32)
    mult = rng.integers(1 << 30, (1 << 31) - 1, size=cout * groups).astype(np.int32)
    shift = rng.integers(-14, -6, size=cout * groups).astype(np.int32)
    kwargs = dict(stride=(1, 1), dilation=(1, 1), padding=(kh // 2, 0), out_hw=(pixels, 1),
                  input_zp=int(rng.choice([-128, -3, 0, 5, 127])), output_zp=int(rng.integers(-128, 128)),
                  multiplier=mult, shift=shift, act_min=-128, act_max=127)
    return x, w, bias, kwargs


@pytest.mark.parametrize("cout", [1, 15, 16, 17, 64, 65, 120])
def test_vnni_tiles_equal_numpy(cout: int) -> None:
    rng = np.random.default_rng(400 + cout)
    for pixels, cin, kh in [(1, 1, 1), (3, 3, 1), (4, 4, 1), (5, 5, 3), (9, 40, 1), (13, 7, 3)]:
        x, w, bias, kwargs = _case(rng, pixels, cin, cout, kh)
        with native.enabled(True):
            fast = conv2d(x, w, bias, **kwargs)
        with native.enabled(False):
            slow = conv2d(x, w, bias, **kwargs)
        np.testing.assert_array_equal(fast, slow, err_msg=f"pixels {pixels} cin {cin} kh {kh}")


def test_vnni_groups_and_no_bias_equal_numpy() -> None:
    rng = np.random.default_rng(7)
    x, w, bias, kwargs = _case(rng, 6, 5, 18, 3, groups=3)
    for b in (bias, None):
        with native.enabled(True):
            fast = conv2d(x, w, b, **kwargs)
        with native.enabled(False):
            slow = conv2d(x, w, b, **kwargs)
        np.testing.assert_array_equal(fast, slow)


def test_packed_filters_follow_weights_rewritten_in_place() -> None:
    """A bound convolution reruns on its operands' current bytes: new weights or a new bias
    at the same addresses are packed afresh, not served from the cache."""
    rng = np.random.default_rng(11)
    x, w, bias, kwargs = _case(rng, 7, 12, 20, 1)
    out = np.zeros((1, 7, 1, 20), np.int8)
    with native.enabled(True):
        bound = conv2d_bound(x, w, bias, out=out, **kwargs)
        assert bound is not None
        for change in ("weights", "bias", "both"):
            if change in ("weights", "both"):
                w[:] = random_int8(rng, w.shape)
            if change in ("bias", "both"):
                bias[:] = rng.integers(-(1 << 16), 1 << 16, size=bias.size)
            bound()
            with native.enabled(False):
                expected = conv2d(x, w, bias, **kwargs)
            np.testing.assert_array_equal(out, expected, err_msg=change)
