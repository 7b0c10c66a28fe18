"""The float reference's exact speed-ups for full-resolution convolutions: the patch matrix
in a scratch buffer (``libnpu.compiler.scratch``) and GPTQ's moments from the drawn rows
only give the same bits as before."""
from __future__ import annotations

import numpy as np

from libnpu.compiler import float_ref, weight_rounding
from libnpu.compiler.ir import Op, Tensor
from libnpu.compiler.ops.conv import conv2d
from libnpu.compiler.scratch import reusing_scratch, scratch


def _reference_conv(x, w, b, *, stride, dilation, pads, groups, activation):
    """The convolution as numpy's tensordot computes it from the strided windows (before)."""
    cout, kh, kw, cin_g = w.shape
    win = float_ref.windows(x, kh, kw, stride, dilation, pads)
    parts = [np.tensordot(win[:, :, :, g * cin_g:(g + 1) * cin_g],
                          w[g * (cout // groups):(g + 1) * (cout // groups)].transpose(3, 1, 2, 0),
                          axes=([3, 4, 5], [0, 1, 2])) for g in range(groups)]
    y = np.concatenate(parts, axis=3) + b
    return float_ref.activation(y.astype(np.float32), activation)


def test_convolutions_give_the_same_bits_with_a_reused_patch_buffer() -> None:
    rng = np.random.default_rng(3)
    cases = [((1, 37, 41, 16), (8, 3, 3, 16), (1, 1), (1, 1), (1, 1, 1, 1), 1),
             ((2, 20, 9, 8), (6, 3, 5, 4), (2, 1), (2, 1), (2, 0, 1, 2), 2),
             ((1, 64, 64, 3), (4, 5, 5, 3), (1, 1), (1, 1), (2, 2, 2, 2), 1),
             ((1, 12, 12, 32), (16, 1, 1, 32), (2, 2), (1, 1), (0, 0, 0, 0), 1)]
    with reusing_scratch():
        for shape, wshape, stride, dilation, pads, groups in cases * 2:     # buffers reused, shrunk and grown
            x = rng.standard_normal(shape).astype(np.float32)
            w, b = rng.standard_normal(wshape).astype(np.float32), rng.standard_normal(wshape[0]).astype(np.float32)
            attrs = dict(stride=stride, dilation=dilation, pads=pads, groups=groups, activation="RELU")
            got, want = conv2d(x, w, b, **attrs), _reference_conv(x, w, b, **attrs)
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_scratch_buffers_live_as_long_as_their_outermost_scope() -> None:
    with reusing_scratch():
        a = scratch((4, 5), np.float32)
        with reusing_scratch():
            b = scratch((2, 3), np.float32)
        assert np.shares_memory(a, b) and b.flags["C_CONTIGUOUS"] and b.shape == (2, 3)
        assert not np.shares_memory(scratch((6,), np.float64), b)
    assert not np.shares_memory(scratch((4, 5), np.float32), a)      # outside a scope: a fresh array


def test_moments_from_the_drawn_rows_only_are_those_of_every_row_drawn_from() -> None:
    rng = np.random.default_rng(4)

    class Weights:      # what the row builders read of a graph: the weights' shape
        def __init__(self, shape: tuple[int, ...]) -> None:
            self.tensors = {"w": Tensor("w", shape, "float32")}

    for kind, wshape in (("CONV_2D", (8, 3, 3, 6)), ("DEPTHWISE_CONV_2D", (1, 3, 3, 6))):
        op = Op(kind, ["x", "w", "b"], ["y"], {"stride": (1, 1), "dilation": (1, 1), "pads": (1, 1, 1, 1)})
        graph = Weights(wshape)
        x = rng.standard_normal((2, 50, 60, 6)).astype(np.float32)      # 6000 positions: 4096 drawn
        every = weight_rounding._rows(op, graph, x)   # type: ignore[arg-type]
        want = every[..., np.random.default_rng(9).choice(every.shape[-2], weight_rounding.ROWS_PER_SAMPLE,
                                                            replace=False), :]
        got = weight_rounding._drawn_rows(op, graph, x, np.random.default_rng(9))   # type: ignore[arg-type]
        assert got is not None and got.strides == want.strides and np.array_equal(got, want)
