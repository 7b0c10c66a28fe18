"""int8 binary elementwise ops (ADD, MUL) with numpy broadcasting, and the type
conversions QUANTIZE (float32 -> int8, int8 -> int8) and DEQUANTIZE (int8 -> float32).

TFLite broadcasts like numpy (up to 6-D), so the arithmetic runs on broadcast int64 views;
ADD and MUL with a repeating parameter set become one 256 x 256 table lookup
(``binary_table``).
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidCommand
from . import binary_table, native
from .fixedpoint import multiply_by_quantized_multiplier, quantize_quotient, wrap_int32
from .native import calls as native_calls
from .native import data_calls
from .output import broadcast_out_shape, check_act_range, check_int8_param, emit, store_int8

__all__ = ["add", "mul", "binary_bound", "quantize", "requantize", "dequantize", "convert_bound"]


def _check_int8(**arrays: np.ndarray) -> None:
    for name, a in arrays.items():
        if a.dtype != np.int8:
            raise TypeError(f"{name} must be int8, got {a.dtype}")


def _binary(key: tuple, compute, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...],
            out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Through the parameter set's 256 x 256 table when it has one (see ``binary_table``);
    returns the result and the table used, if any."""
    table = binary_table.table_for(key, int(np.prod(shape, dtype=np.int64)), compute)
    if table is None:
        return compute(a, b, out), None
    return binary_table.lookup(table, a, b, shape, out), table


def binary_bound(kind: str, a: np.ndarray, b: np.ndarray, *, out: np.ndarray,
                 **params) -> native_calls.BoundCall | None:
    """ADD or MUL (``kind``) into ``out``, then a call that reruns it on the same arrays
    through its table in C; None when that is not possible (no C kernels, no table yet,
    or a non-contiguous operand)."""
    _, table = _BINARY[kind](a, b, out=out, **params)
    if table is None or native.library() is None:
        return None
    if a.shape != b.shape:      # broadcast operands: the strided lookup
        return data_calls.bind_table2_broadcast(a, b, table, out)
    return native_calls.bind_table2(a, b, table, out)


def add(a: np.ndarray, b: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
        left_shift: int, input1_multiplier: int, input1_shift: int,
        input2_multiplier: int, input2_shift: int, output_multiplier: int,
        output_shift: int, act_min: int = -128, act_max: int = 127,
        out: np.ndarray | None = None) -> np.ndarray:
    """int8 ADD (``reference_integer_ops::Add``); parameters from ``spec.fixedpoint.add_params``.

    Each input is shifted left by ``left_shift`` and rescaled to a common scale, summed,
    then rescaled to the output.
    """
    return _add(a, b, input1_zp=input1_zp, input2_zp=input2_zp, output_zp=output_zp,
                left_shift=left_shift, input1_multiplier=input1_multiplier,
                input1_shift=input1_shift, input2_multiplier=input2_multiplier,
                input2_shift=input2_shift, output_multiplier=output_multiplier,
                output_shift=output_shift, act_min=act_min, act_max=act_max, out=out)[0]


def _add(a, b, *, input1_zp, input2_zp, output_zp, left_shift, input1_multiplier, input1_shift,
         input2_multiplier, input2_shift, output_multiplier, output_shift, act_min, act_max,
         out) -> tuple[np.ndarray, np.ndarray | None]:
    _check_int8(a=a, b=b)
    shape = broadcast_out_shape(a, b, out)
    act_min, act_max = check_act_range(act_min, act_max)
    if not 0 <= left_shift <= 30:
        raise InvalidCommand("left_shift must be in [0, 30]")
    if max(input1_shift, input2_shift, output_shift) > 0:
        raise InvalidCommand("ADD shifts must be <= 0 (multipliers below one)")
    zp1, zp2 = check_int8_param("input1_zp", input1_zp), check_int8_param("input2_zp", input2_zp)
    output_zp = check_int8_param("output_zp", output_zp)

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        v1 = wrap_int32((a.astype(np.int64) - zp1) << left_shift)
        v2 = wrap_int32((b.astype(np.int64) - zp2) << left_shift)
        s1 = multiply_by_quantized_multiplier(v1, input1_multiplier, input1_shift)
        s2 = multiply_by_quantized_multiplier(v2, input2_multiplier, input2_shift)
        raw = multiply_by_quantized_multiplier(wrap_int32(s1 + s2), output_multiplier, output_shift)
        return store_int8(raw, output_zp, act_min, act_max, out)

    key = ("add", zp1, zp2, output_zp, int(left_shift), int(input1_multiplier), int(input1_shift),
           int(input2_multiplier), int(input2_shift), int(output_multiplier), int(output_shift),
           act_min, act_max)
    return _binary(key, compute, a, b, shape, out)


def mul(a: np.ndarray, b: np.ndarray, *, input1_zp: int, input2_zp: int, output_zp: int,
        multiplier: int, shift: int, act_min: int = -128, act_max: int = 127,
        out: np.ndarray | None = None) -> np.ndarray:
    """int8 MUL: ``requant((a - zp1) * (b - zp2))``; multiplier from ``mul_multiplier``."""
    return _mul(a, b, input1_zp=input1_zp, input2_zp=input2_zp, output_zp=output_zp,
                multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max, out=out)[0]


def _mul(a, b, *, input1_zp, input2_zp, output_zp, multiplier, shift, act_min, act_max,
         out) -> tuple[np.ndarray, np.ndarray | None]:
    _check_int8(a=a, b=b)
    shape = broadcast_out_shape(a, b, out)
    act_min, act_max = check_act_range(act_min, act_max)
    zp1, zp2 = check_int8_param("input1_zp", input1_zp), check_int8_param("input2_zp", input2_zp)
    output_zp = check_int8_param("output_zp", output_zp)
    if not -31 <= int(shift) <= 30:
        raise InvalidCommand("requantization shift must be in [-31, 30]")

    def compute(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        prod = (a.astype(np.int64) - zp1) * (b.astype(np.int64) - zp2)
        raw = multiply_by_quantized_multiplier(prod, multiplier, shift)
        return store_int8(raw, output_zp, act_min, act_max, out)

    key = ("mul", zp1, zp2, output_zp, int(multiplier), int(shift), act_min, act_max)
    return _binary(key, compute, a, b, shape, out)


_BINARY = {"add": _add, "mul": _mul}


def quantize(x: np.ndarray, *, scale: float, zero_point: int,
             out: np.ndarray | None = None) -> np.ndarray:
    """float32 -> int8: ``clamp(round(x / scale) + zp)`` with the division in float32.

    Values whose quotient does not fit int32 (and NaN) become -128, as x86's conversion
    gives INT32_MIN there.
    """
    if x.dtype != np.float32:
        raise TypeError(f"x must be float32, got {x.dtype}")
    zero_point = check_int8_param("zero_point", zero_point)
    if out is not None and (out.dtype != np.int8 or out.shape != x.shape):
        raise InvalidCommand(f"out must be int8 {x.shape}")
    qi = quantize_quotient(x, scale)
    return store_int8(qi, zero_point, -128, 127, out)


def requantize(x: np.ndarray, *, input_zp: int, output_zp: int, multiplier: int, shift: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 -> int8 QUANTIZE: ``out_zp + requant(x - in_zp)``; ``rescale_multiplier``."""
    _check_int8(x=x)
    if out is not None and (out.dtype != np.int8 or out.shape != x.shape):
        raise InvalidCommand(f"out must be int8 {x.shape}")
    raw = multiply_by_quantized_multiplier(
        x.astype(np.int64) - check_int8_param("input_zp", input_zp), multiplier, shift)
    return store_int8(raw, check_int8_param("output_zp", output_zp), -128, 127, out)


def dequantize(x: np.ndarray, *, scale: float, zero_point: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """int8 -> float32: ``float32(double(scale) * (x - zp))``."""
    _check_int8(x=x)
    zero_point = check_int8_param("zero_point", zero_point)
    res = (np.float64(np.float32(scale)) * (x.astype(np.float64) - zero_point)).astype(np.float32)
    return emit(res, out)


def convert_bound(x: np.ndarray, *, scale: float, zero_point: int,
                  out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`quantize` (float32 ``x``) or :func:`dequantize` (int8 ``x``) into ``out``, then a
    call that reruns it in C on the same arrays; None without the C kernels or when an
    array is not contiguous."""
    convert = quantize if x.dtype == np.float32 else dequantize
    convert(x, scale=scale, zero_point=zero_point, out=out)
    if native.library() is None:
        return None
    return native_calls.bind_convert(x, out, scale, zero_point)
