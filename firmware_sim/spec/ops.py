"""Task descriptors of the compute operators (all but FULLY_CONNECTED, in ``spec.tasks``),
and the geometry rules the compiler and the chip share.
"""
from __future__ import annotations

__all__ = ["PADDING_SAME", "PADDING_VALID", "conv_geometry"]

PADDING_SAME, PADDING_VALID = 1, 2  # TFLite schema's Padding enum + 1 (0 = explicit)


def conv_geometry(in_size: int, filter_size: int, stride: int, dilation: int,
                  padding: int) -> tuple[int, int]:
    """``(out_size, pad_before)`` along one spatial axis, as TFLite computes them.

    SAME: ``out = ceil(in / stride)``; VALID: ``out = ceil((in - eff + 1) / stride)`` with
    ``eff = (filter - 1) * dilation + 1``. The total padding is split with the smaller half
    before the image.
    """
    if in_size < 0 or filter_size < 1 or stride < 1 or dilation < 1:
        raise ValueError("bad conv geometry: sizes must be >= 0, filter/stride/dilation >= 1")
    eff = (filter_size - 1) * dilation + 1
    if padding == PADDING_SAME:
        out = (in_size + stride - 1) // stride
    elif padding == PADDING_VALID:
        out = (in_size + stride - eff) // stride
    else:
        raise ValueError(f"unknown padding {padding}")
    out = max(out, 0)
    total = max((out - 1) * stride + eff - in_size, 0)
    return out, total // 2
