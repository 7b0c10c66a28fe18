"""The conv requantization plans a core keeps stay within their byte bound, whatever the
channel counts a client's convolutions have, and a plan served again gives the same result.
(The numpy path keeps them: the tests take it even where oneDNN is there.)"""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.kernels import conv
from npu_hw.fixedpoint import quantize_multiplier_array
from tests.support.quant_utils import random_int8


@pytest.fixture(autouse=True)
def numpy_path(monkeypatch):
    monkeypatch.setattr(conv.native, "has_dnnl", lambda: False)
    conv._clear_requant_plans()
    yield
    conv._clear_requant_plans()


def _wide_conv(rng: np.random.Generator, channels: int, bias_value: int) -> np.ndarray:
    """A 1x1 convolution over one input channel with ``channels`` outputs (a hostile shape)."""
    x = random_int8(rng, (1, 2, 2, 1))
    w = random_int8(rng, (channels, 1, 1, 1))
    bias = np.full(channels, bias_value, np.int32)
    mult, shift = quantize_multiplier_array(np.full(channels, 0.01))
    return conv.conv2d(x, w, bias, stride=(1, 1), dilation=(1, 1), padding=(0, 0), out_hw=(2, 2), input_zp=0,
                       output_zp=0, multiplier=mult, shift=shift)


def test_plans_of_wide_convolutions_stay_within_the_byte_bound(monkeypatch) -> None:
    monkeypatch.setattr(conv, "REQUANT_PLAN_BYTES", 4 << 20)
    rng = np.random.default_rng(0)
    for bias_value in range(12):            # ~1.9 MB a plan: each new bias is a new plan
        _wide_conv(rng, 20_000, bias_value)
        assert conv.requant_plan_bytes() <= 4 << 20
    assert 1 <= len(conv._REQUANT_PLANS) <= 2
    _wide_conv(rng, 60_000, 0)              # larger than the bound alone: used, not kept
    assert conv.requant_plan_bytes() <= 4 << 20 and len(conv._REQUANT_PLANS) <= 2
    conv._clear_requant_plans()
    assert conv.requant_plan_bytes() == 0


def test_a_kept_plan_gives_what_a_fresh_one_gives() -> None:
    first = _wide_conv(np.random.default_rng(1), 64, 7)
    assert len(conv._REQUANT_PLANS) == 1
    again = _wide_conv(np.random.default_rng(1), 64, 7)
    assert len(conv._REQUANT_PLANS) == 1
    conv._clear_requant_plans()
    fresh = _wide_conv(np.random.default_rng(1), 64, 7)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, fresh)
