"""An independent, integer-exact reference for the int8 fully connected layer
(TFLite int8 quantization spec), written with Python ints for clarity."""
from __future__ import annotations

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _srdhm(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) >> 31
    return q if ab + nudge >= 0 else -q          # C division truncates toward zero


def _rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLite's classic MultiplyByQuantizedMultiplier (gemmlowp double rounding)."""
    left, right = max(shift, 0), max(-shift, 0)
    return _rdbpot(_srdhm(x * (1 << left), multiplier), right)


def fc_requantize(x: int, multiplier: int, shift: int) -> int:
    """The chip's FC rule (npu_hw/tasks.py): one rounding of
    x * multiplier / 2**(31 - shift), ties away from zero."""
    num, den = x * multiplier, 1 << (31 - shift)
    magnitude = (abs(num) + den // 2) // den
    return magnitude if num >= 0 else -magnitude


def fc_requantize_double(x: int, scale: float) -> int:
    """FC_DOUBLE_SCALE: C round() of x * scale in double."""
    from math import floor
    v = x * scale
    return int(floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def fully_connected(x, w, bias, input_zp, output_zp, multiplier, shift, act_min=-128, act_max=127, scale=None):
    rows, k = x.shape
    n = w.shape[0]
    out = np.zeros((rows, n), np.int8)
    for r in range(rows):
        for c in range(n):
            acc = sum((int(x[r, i]) - input_zp) * int(w[c, i]) for i in range(k))
            if bias is not None:
                acc += int(bias[c])
            if scale is not None:
                value = fc_requantize_double(acc, float(scale[c] if np.ndim(scale) else scale))
            else:
                m = int(multiplier[c] if np.ndim(multiplier) else multiplier)
                s = int(shift[c] if np.ndim(shift) else shift)
                value = fc_requantize(acc, m, s)
            value += output_zp
            out[r, c] = min(max(value, act_min), act_max)
    return out
