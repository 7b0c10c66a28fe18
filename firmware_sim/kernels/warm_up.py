"""Run every C kernel once on tiny operands before a chip forks its cores.

The first call of a kernel costs far more than the next ones: oneDNN generates its GEMM
code on first use, and the pages of the libraries' code are faulted into the process
then. Done by the chip's main process before it forks its cores (``chip.Chip.run``), the
cores inherit the generated code and the heap it built, shared: a model's first
inference does not pay for it, and each core's private memory stays small. Then the core's
power-on self-test (``firmware_sim.self_test``) runs the same operators as one job
through the executor, for the pages of the decoding, binding and replay paths.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from . import activations, conv, elementwise, fully_connected, native, pooling

__all__ = ["warm_up"]

_warmed = False      # per process; a core forked from a warmed chip inherits True


def _pattern(shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    return ((np.arange(n) * 37 + 11) % 255 - 127).astype(np.int8).reshape(shape)


def warm_up(scratch: Path | None = None) -> None:
    """Each C kernel once (when built), then the self-test job; once per process (and its
    forked children)."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    if native.library() is not None:
        _c_kernels()
    from firmware_sim.self_test import self_test  # not at the top: the executor imports the kernels
    try:
        failed = [r for r in self_test(scratch=scratch) if r.status]
    except OSError as exc:      # no room for its private memory: the core serves jobs all the same
        print(f"chip: the self-test job could not run: {exc}", file=sys.stderr, flush=True)
        return
    if failed:
        print(f"chip: the self-test job failed: {failed[0]}", file=sys.stderr, flush=True)


def _c_kernels() -> None:
    # Fixed patterns, not numpy.random: its modules would add their pages to every core.
    x = _pattern((1, 8, 8, 16))
    one, shift = np.array([1 << 30], np.int32), np.array([-8], np.int32)
    window = dict(stride=(1, 1), dilation=(1, 1), padding=(1, 1), out_hw=(8, 8), input_zp=1, output_zp=0,
                  multiplier=one, shift=shift)
    for k, cin in ((3, 16), (1, 16), (3, 4)):                 # oneDNN's GEMM: several shapes
        w = _pattern((16, k, k, cin))
        pad = (k // 2, k // 2)
        conv.conv2d_bound(x, w, None, **{**window, "padding": pad}, out=np.empty((1, 8, 8, 16), np.int8))
    dw = _pattern((1, 3, 3, 16))
    conv.depthwise_conv2d_bound(x, dw, None, **window, out=np.empty((1, 8, 8, 16), np.int8))
    fc_w = _pattern((10, 64))
    fully_connected.fully_connected_bound(x.reshape(16, 64), fc_w, None, input_zp=0, output_zp=0,
                                          multiplier=one, shift=shift, scale=None, act_min=-128,
                                          act_max=127, out=np.empty((16, 10), np.int8))
    for pool in (pooling.avg_pool2d_bound, pooling.max_pool2d_bound):
        pool(x, filter_hw=(2, 2), stride=(2, 2), padding=(0, 0), out_hw=(4, 4), out=np.empty((1, 4, 4, 16), np.int8))
    activations.softmax_bound(x.reshape(64, 16), input_beta_multiplier=1 << 30, input_beta_left_shift=20,
                              diff_min=-248, out=np.empty((64, 16), np.int8))
    f = x.astype(np.float32)
    elementwise.convert_bound(f, scale=0.5, zero_point=0, out=np.empty(x.shape, np.int8))
