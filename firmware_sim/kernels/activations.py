"""int8 activations as TFLite's reference kernels compute them.

* ``relu_family``: standalone RELU / RELU6 / RELU_N1_TO_1 (``ReluX``: requantize, clamp).
* ``lut_lookup``: TANH and LOGISTIC, which TFLite evaluates for int8 through a 256-entry
  table built at prepare time (``spec.fixedpoint.activation_lut`` builds the same table);
  on int16 through a 65536-entry one (``spec.sigmoid16.activation_lut_int16`` tabulates
  LiteRT's int16 kernels).
* ``softmax``: the int8 reference softmax on the last axis (gemmlowp fixed-point exp,
  Q12 accumulation, fixed-point reciprocal).
"""
from __future__ import annotations

import numpy as np

from .. import caches
from ..errors import InvalidCommand
from . import native
from .fixedpoint import (
    multiply_by_quantized_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap_int32,
)
from .gemmlowp import exp_on_negative_values_q5, get_reciprocal
from .int16x8 import check_int16_param, check_zero_points, store_int16
from .native import calls as native_calls
from .output import check_int8_param, store_int8

__all__ = ["relu_family", "lut_lookup", "softmax", "softmax_bound"]


def _check_int8(name: str, a: np.ndarray) -> None:
    if a.dtype != np.int8:
        raise TypeError(f"{name} must be int8, got {a.dtype}")


def relu_family(x: np.ndarray, *, input_zp: int, output_zp: int, multiplier: int,
                shift: int, act_min: int, act_max: int,
                out: np.ndarray | None = None) -> np.ndarray:
    """``clamp(out_zp + requant(x - in_zp), act_min, act_max)``; any shape.

    multiplier/shift: ``spec.fixedpoint.relu_multiplier``; act_min/act_max:
    ``fused_activation_range`` with RELU, RELU6 or RELU_N1_TO_1 on the output quantization.
    ``x`` int8, or int16 (zero points 0, the same arithmetic with int16 bounds).
    """
    if x.dtype == np.int16:
        check_zero_points(input_zp=input_zp, output_zp=output_zp)
        if act_min > act_max or out is not None and (out.dtype != np.int16 or out.shape != x.shape):
            raise InvalidCommand(f"act_min > act_max, or out is not int16 {x.shape}")
        scaled = multiply_by_quantized_multiplier(x.astype(np.int64), multiplier, shift)
        return store_int16(scaled, 0, check_int16_param("act_min", act_min),
                           check_int16_param("act_max", act_max), out)
    _check_int8("x", x)
    input_zp = check_int8_param("input_zp", input_zp)
    output_zp = check_int8_param("output_zp", output_zp)
    act_min, act_max = check_int8_param("act_min", act_min), check_int8_param("act_max", act_max)
    if out is not None and (out.dtype != np.int8 or out.shape != x.shape):
        raise InvalidCommand(f"out must be int8 {x.shape}")
    scaled = multiply_by_quantized_multiplier(x.astype(np.int64) - input_zp, multiplier, shift)
    return store_int8(scaled, output_zp, act_min, act_max, out)


def lut_lookup(x: np.ndarray, lut: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``out[i] = lut[uint8(x[i])]`` with a 256-entry int8 table, or, for int16 ``x``,
    ``lut[uint16(x[i])]`` with a 65536-entry int16 one; any shape."""
    dtype: np.dtype = x.dtype
    if dtype == np.int16:
        index, size = x.view(np.uint16), 1 << 16
    else:
        _check_int8("x", x)
        index, size = x.view(np.uint8), 256
    if lut.dtype != dtype or lut.shape != (size,):
        raise InvalidCommand(f"lut must be {dtype} ({size},), got {lut.dtype} {lut.shape}")
    if out is None:
        return lut[index]
    if out.dtype != dtype or out.shape != x.shape:
        raise InvalidCommand(f"out must be {dtype} {x.shape}")
    np.take(lut, index, out=out)
    return out


_ACCUM_INTEGER_BITS = 12
_SOFTMAX_TABLES: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _softmax_tables(beta_multiplier: int, beta_left_shift: int,
                    diff_min: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every int8 distance below the row maximum (0..255): exp(diff) in Q0.31, its
    Q12.19 term of the sum (0 where diff < diff_min) and whether diff >= diff_min (else
    the output is -128). Per-element work depends only on that distance, so it is done
    once per parameter set with the gemmlowp arithmetic itself."""
    key = (beta_multiplier, beta_left_shift, diff_min)
    tables = _SOFTMAX_TABLES.get(key)
    if tables is None:
        diff = -np.arange(256, dtype=np.int64)
        rescaled = saturating_rounding_doubling_high_mul(
            wrap_int32(diff << beta_left_shift), beta_multiplier)
        exp = exp_on_negative_values_q5(rescaled)
        # Rescale<12>: Q0.31 -> Q12.19 is a rounding shift right by 12.
        valid = diff >= diff_min
        terms = np.where(valid, rounding_divide_by_pot(exp, _ACCUM_INTEGER_BITS), 0)
        tables = (exp, terms, valid)
        for t in tables:
            t.flags.writeable = False
        if len(_SOFTMAX_TABLES) >= 256:
            _SOFTMAX_TABLES.clear()
        _SOFTMAX_TABLES[key] = tables
    return tables


caches.register("softmax_tables", "int8 SOFTMAX exp and sum-term tables by (beta multiplier, shift, "
                "diff_min) (contents only: never invalidated)", None, _SOFTMAX_TABLES.clear,
                entries=lambda: len(_SOFTMAX_TABLES))


def softmax(x: np.ndarray, *, input_beta_multiplier: int, input_beta_left_shift: int,
            diff_min: int, out: np.ndarray | None = None) -> np.ndarray:
    """int8 softmax over the last axis; output scale 1/256, zero point -128.

    Parameters come from ``spec.fixedpoint.softmax_params(beta, input_scale)``.
    """
    _check_int8("x", x)
    if x.ndim < 1:
        raise InvalidCommand("softmax needs at least one dimension")
    if not 0 <= input_beta_left_shift <= 31:
        raise InvalidCommand("input_beta_left_shift must be in [0, 31]")
    if out is not None and (out.dtype != np.int8 or out.shape != x.shape):
        raise InvalidCommand(f"out must be int8 {x.shape}")
    exp_t, terms_t, valid_t = _softmax_tables(int(input_beta_multiplier), int(input_beta_left_shift),
                                     int(diff_min))
    # Distance below the row maximum, 0..255: indexes the per-parameter exp tables.
    below = x.max(axis=-1, keepdims=True).astype(np.int16) - x
    exp = exp_t[below]
    sum_of_exps = wrap_int32(terms_t[below].sum(axis=-1, keepdims=True))
    shifted_scale, bits_over_unit = get_reciprocal(sum_of_exps, _ACCUM_INTEGER_BITS)
    exponent = bits_over_unit + 31 - 8
    if np.any((exponent < 0) | (exponent > 31)):
        raise InvalidCommand("softmax reciprocal exponent out of range")
    unsat = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted_scale, exp),
                                   exponent)
    result = np.where(valid_t[below], np.clip(unsat - 128, -128, 127), -128)
    if out is None:
        return result.astype(np.int8)
    np.copyto(out, result, casting="unsafe")
    return out


def softmax_bound(x: np.ndarray, *, input_beta_multiplier: int, input_beta_left_shift: int,
                  diff_min: int, out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`softmax` into ``out``, then a call that reruns it in C on the same arrays with
    the same tables (``npu_softmax_s8``); None without the C kernels or contiguous arrays."""
    softmax(x, input_beta_multiplier=input_beta_multiplier, input_beta_left_shift=input_beta_left_shift,
            diff_min=diff_min, out=out)
    if native.library() is None:
        return None
    exp_t, terms_t, valid_t = _softmax_tables(int(input_beta_multiplier), int(input_beta_left_shift),
                                              int(diff_min))
    return native_calls.bind_softmax(x, out, exp_t, terms_t, valid_t)
