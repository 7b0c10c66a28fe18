"""The float-weights cache never serves stale weights."""
from __future__ import annotations

import numpy as np

from firmware_sim.kernels import weight_cache
from firmware_sim.kernels.conv import conv2d
from firmware_sim.kernels.fully_connected import fully_connected
from npu_hw.fixedpoint import quantize_multiplier_array
from tests.support.quant_utils import random_int8


def test_rewritten_weights_are_converted_again() -> None:
    weight_cache.clear()
    rng = np.random.default_rng(0)
    w = random_int8(rng, (256, 512))  # large enough to be cached
    assert w.nbytes >= weight_cache.MIN_CACHED_BYTES
    x = random_int8(rng, (3, 512))
    mult, shift = quantize_multiplier_array(np.full(256, 0.0004))
    kw = dict(input_zp=5, output_zp=-3, multiplier=mult, shift=shift)
    first = fully_connected(x, w, None, **kw)
    w[:, :7] = -w[:, :7] + 1  # rewrite in place: same address, same shape
    w[17, 100] ^= 0x55
    again = fully_connected(x, w, None, **kw)
    weight_cache.clear()
    fresh = fully_connected(x, w, None, **kw)
    np.testing.assert_array_equal(again, fresh)
    assert np.any(first != again)


def test_same_bytes_at_another_address_and_layouts_are_separate() -> None:
    weight_cache.clear()
    rng = np.random.default_rng(1)
    w = random_int8(rng, (64, 3, 3, 64))
    x = random_int8(rng, (1, 6, 6, 64))
    mult, shift = quantize_multiplier_array(np.full(64, 0.0005))
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(6, 6), input_zp=0,
              output_zp=0, multiplier=mult, shift=shift)
    a = conv2d(x, w, None, **kw)
    b = conv2d(x, w.copy(), None, **kw)
    np.testing.assert_array_equal(a, b)
    # The same buffer read as a grouped conv is another conversion.
    w2 = w.reshape(128, 3, 3, 32)
    x2 = random_int8(rng, (1, 6, 6, 64))
    m2, s2 = quantize_multiplier_array(np.full(128, 0.0005))
    grouped = conv2d(x2, w2, None, **{**kw, "multiplier": m2, "shift": s2})
    weight_cache.clear()
    np.testing.assert_array_equal(grouped, conv2d(x2, w2, None, **{**kw, "multiplier": m2,
                                                                   "shift": s2}))


def test_reused_requantization_plans_do_not_alias_caller_arrays() -> None:
    rng = np.random.default_rng(2)
    x, w = random_int8(rng, (1, 4, 4, 8)), random_int8(rng, (1, 3, 3, 8))
    from firmware_sim.kernels.conv import depthwise_conv2d

    mult, shift = quantize_multiplier_array(np.full(8, 0.003))
    bias = rng.integers(-1000, 1000, 8).astype(np.int32)
    kw = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(4, 4), input_zp=1,
              output_zp=2, shift=shift)
    first = depthwise_conv2d(x, w, bias, multiplier=mult, **kw)
    same_values = bias.copy()
    bias[:] = 0            # the first call's buffers now hold other values...
    mult_view = mult.copy()
    mult[:] = 1 << 30
    again = depthwise_conv2d(x, w, same_values, multiplier=mult_view, **kw)
    np.testing.assert_array_equal(first, again)  # ...and must not leak into this call


def test_the_invalidation_drops_entries_of_released_memory() -> None:
    """``caches.invalidate`` hands the cache the host ranges of released buffers; entries of
    weights that lived there go, the others stay."""
    weight_cache.clear()
    rng = np.random.default_rng(1)
    kept, released = random_int8(rng, (64, 64)), random_int8(rng, (64, 64))
    for w in (kept, released):
        weight_cache.converted(w, "test", lambda a: a.astype(np.float32))
    start = released.__array_interface__["data"][0]
    weight_cache.drop_released(1, 7, [(start, start + released.nbytes)])
    calls = []

    def convert(a: np.ndarray) -> np.ndarray:
        calls.append(a)
        return a.astype(np.float32)
    weight_cache.converted(kept, "test", convert)
    assert not calls                       # still cached
    weight_cache.converted(released, "test", convert)
    assert len(calls) == 1                 # dropped, converted again
    weight_cache.clear()
