"""int8 fully connected layer, byte-identical to LiteRT's reference kernel.

Follows ``reference_integer_ops::FullyConnected`` / ``FullyConnectedPerChannel``: symmetric
int8 weights, int32 accumulation (wrapping), int32 bias, requantization per tensor or per
output channel, output zero point, then the fused-activation clamp.

LiteRT's reference kernel requantizes in double: ``round(acc * scale)`` with
``scale = in_scale * filter_scale / out_scale`` (see ``spec.fixedpoint.effective_scale``).
Pass that as ``scale`` for byte-identical results. Without it the kernel uses the fixed-point
``multiplier``/``shift`` with the same rounding rule (one rounding, ties away from zero),
which can differ by one LSB only when ``acc * scale`` lies within ~2**-31 (relative) of a
half-integer.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from . import native, weight_cache
from .fixedpoint import multiply_by_quantized_multiplier_round_away, requantize_double
from .gemm import exact_gemm, for_row_blocks, gemm_chunk, int8_offset_bound
from .native import calls as native_calls
from .output import accumulate_bias, check_int8_param, store_int8

__all__ = ["fully_connected", "fully_connected_bound"]


def _prepare_weights(w: np.ndarray) -> tuple[np.ndarray, int]:
    # (K, N) contiguous float32: OpenBLAS runs x @ W about twice as fast in this layout
    # as with the transposed view of (N, K).
    wt = np.ascontiguousarray(w.T, dtype=np.float32)
    wt.flags.writeable = False
    row_abs = np.abs(w.astype(np.int32)).sum(axis=1) if w.size else np.zeros(1, np.int64)
    return wt, int(row_abs.max()) if row_abs.size else 0


def fully_connected(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                    input_zp: int, output_zp: int,
                    multiplier: np.ndarray, shift: np.ndarray,
                    act_min: int = -128, act_max: int = 127,
                    out: np.ndarray | None = None,
                    scale: np.ndarray | None = None) -> np.ndarray:
    """int8 fully connected: ``out = requant((x - input_zp) @ w.T + bias)``.

    x: int8 (M, K); w: int8 (N, K), zero point 0; bias: int32 (N,) or None;
    multiplier/shift: int32 (N,) per channel or (1,) per tensor, TFLite convention
    (positive shift = left). ``act_min``/``act_max`` carry the fused activation.
    scale: optional float64 effective scales, same shape as ``multiplier``; when given
    they drive the requantization (LiteRT's exact arithmetic) instead of multiplier/shift.
    Returns int8 (M, N), written into ``out`` when it is given.
    """
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise TypeError(f"x and w must be int8, got {x.dtype} and {w.dtype}")
    if x.ndim != 2 or w.ndim != 2:
        raise InvalidCommand(f"x must be (M, K) and w (N, K), got {x.shape} and {w.shape}")
    m, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k:
        raise InvalidCommand(f"inner dimensions differ: x {x.shape}, w {w.shape}")
    input_zp = check_int8_param("input_zp", input_zp)
    output_zp = check_int8_param("output_zp", output_zp)
    act_min = check_int8_param("act_min", act_min)
    act_max = check_int8_param("act_max", act_max)
    if act_min > act_max:
        raise InvalidCommand(f"act_min {act_min} > act_max {act_max}")
    multiplier = np.asarray(multiplier)
    shift = np.asarray(shift)
    if multiplier.shape != shift.shape or multiplier.shape not in ((n,), (1,)):
        raise InvalidCommand(f"multiplier/shift must both be ({n},) or (1,), "
                         f"got {multiplier.shape} and {shift.shape}")
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        if scale.shape != multiplier.shape:
            raise InvalidCommand(f"scale shape {scale.shape} != multiplier shape {multiplier.shape}")
    if bias is not None:
        bias = np.asarray(bias)
        if bias.dtype != np.int32 or bias.shape != (n,):
            raise InvalidCommand(f"bias must be int32 ({n},), got {bias.dtype} {bias.shape}")
    if out is not None and (out.dtype != np.int8 or out.shape != (m, n)):
        raise InvalidCommand(f"out must be int8 {(m, n)}, got {out.dtype} {out.shape}")

    if out is None:
        out = np.empty((m, n), np.int8)
    if native.library() is not None:
        target = out if out.flags.c_contiguous else np.empty((m, n), np.int8)
        native_calls.fully_connected_s8(x, w, bias, input_zp, output_zp, multiplier, shift,
                                        scale, act_min, act_max, target)
        if target is not out:
            np.copyto(out, target)
        return out
    # Weights as float32 (K, N) plus the largest per-row sum of |w|, cached across calls.
    wt, row_abs_max = weight_cache.converted(w, "fc", _prepare_weights)
    bound_x = int8_offset_bound(-input_zp)
    chunk = gemm_chunk(k, bound_x, row_abs_max)
    acc_bound = bound_x * row_abs_max

    def block(r0: int, r1: int) -> None:
        xf = x[r0:r1].astype(np.float32)
        xf -= np.float32(input_zp)
        acc = accumulate_bias(exact_gemm(xf, wt, chunk), bias, acc_bound)
        if scale is not None:
            scaled = requantize_double(acc, scale)
        else:
            scaled = multiply_by_quantized_multiplier_round_away(acc, multiplier, shift)
        store_int8(scaled, output_zp, act_min, act_max, out[r0:r1])

    for_row_blocks(m, n, block)
    return out


def fully_connected_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                          input_zp: int, output_zp: int,
                          multiplier: np.ndarray, shift: np.ndarray,
                          act_min: int = -128, act_max: int = 127,
                          out: np.ndarray, scale: np.ndarray | None = None
                          ) -> native_calls.BoundCall | None:
    """:func:`fully_connected` into ``out``, then a call that reruns it on the same arrays
    (their contents at the time of the call) without checking or converting anything
    again; None when that is not possible (numpy path, or an operand had to be copied)."""
    fully_connected(x, w, bias, input_zp=input_zp, output_zp=output_zp, multiplier=multiplier,
                    shift=shift, act_min=act_min, act_max=act_max, out=out, scale=scale)
    if native.library() is None:
        return None
    return native_calls.bind_fully_connected(x, w, bias, input_zp, output_zp, multiplier, shift,
                                             scale, act_min, act_max, out)
