"""SUM, REDUCE_MAX, REDUCE_MIN over random axes: int8 single-op models imported, lowered
and run on the chip, byte-identical to LiteRT BUILTIN_REF (200 random cases each);
REDUCE_L2 (no LiteRT kernel) pinned to its documented formula, computed here with
Python integers and floats."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tflite

from libnpu.compiler.lower import lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_import import import_tflite
from tests.support.chip_memory import run_loadable
from tests.support.op_check import check_on_chip
from tests.support.quant_utils import random_int8
from tests.support.tflite_builder import TensorSpec, run_reference, single_op_model

OP = tflite.BuiltinOperator
CASES = 200



def _case(rng):
    shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 5))))
    k = int(rng.integers(1, len(shape) + 1))
    axes = [int(a) for a in rng.choice(len(shape), size=k, replace=False)]
    axes = [a - len(shape) if rng.random() < 0.3 else a for a in axes]
    keep = bool(rng.integers(2))
    out = tuple(1 if i in {a % len(shape) for a in axes} else d for i, d in enumerate(shape))
    if not keep:
        out = tuple(d for i, d in enumerate(shape) if i not in {a % len(shape) for a in axes})
    return shape, axes, keep, out


def _reducer_options(keep):
    def write(b):
        tflite.ReducerOptionsStart(b)
        tflite.ReducerOptionsAddKeepDims(b, keep)
        return tflite.ReducerOptionsEnd(b)
    return write


def _sum_model(rng, shape, axes, keep, out, same=False):
    qin = ([float(rng.uniform(0.01, 0.1))], [int(rng.integers(-20, 21))])
    qout = qin if same else ([float(rng.uniform(0.02, 2.0))], [int(rng.integers(-20, 21))])
    tensors = [TensorSpec(shape, np.int8, *qin), TensorSpec((len(axes),), np.int32, data=np.int32(axes)),
               TensorSpec(out, np.int8, *qout)]
    return single_op_model(OP.SUM, tensors, [0, 1], [2], tflite.BuiltinOptions.ReducerOptions,
                           _reducer_options(keep)), qin, qout


def _sum_reference(x, axes, qin, qout) -> np.ndarray:
    """The documented SUM formula with Python integers (TFLite's rounding helpers)."""
    from npu_hw import fixedpoint as fp
    from tests.support.reference import multiply_by_quantized_multiplier
    mult, shift = fp.rescale_multiplier(float(np.float32(qin[0][0])), float(np.float32(qout[0][0])))
    axes = sorted({a % x.ndim for a in axes})
    moved = np.moveaxis(x.astype(np.int64), axes, list(range(-len(axes), 0)))
    rows = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    out = np.empty(rows.shape[:-1], np.int64)
    for idx in np.ndindex(out.shape):
        acc = sum(int(v) - qin[1][0] for v in rows[idx])
        out[idx] = min(max(multiply_by_quantized_multiplier(acc, mult, shift) + qout[1][0], -128), 127)
    return out.astype(np.int8)


def test_sum_formula_and_litert(mem) -> None:
    """Every case equals the formula; LiteRT 2.3 reads int8 SUM operands as uint8 bytes and
    saturates to [0, 255], so its bytes are compared where that cannot show: non-negative
    inputs, and outputs LiteRT did not saturate (bytes 1..127)."""
    rng = np.random.default_rng(600)
    compared = 0
    for case in range(CASES):
        shape, axes, keep, out = _case(rng)
        model, qin, qout = _sum_model(rng, shape, axes, keep, out, same=rng.random() < 0.15)
        x = random_int8(rng, shape)
        if case % 2:
            x = np.abs(x.astype(np.int16)).clip(0, 127).astype(np.int8)
        (got,) = run_loadable(mem, lower(import_tflite(model)), [x])
        expected = _sum_reference(x, axes, qin, qout).reshape(got.shape)
        assert got.tobytes() == expected.tobytes(), f"case {case}: {shape} axes {axes} {qin} -> {qout}"
        if case % 2:
            (ref,) = run_reference(model, x)
            usable = (ref.view(np.uint8) > 0) & (ref.view(np.uint8) < 128)
            assert np.array_equal(got[usable], ref[usable]), f"case {case}: LiteRT"
            compared += int(usable.sum())
    assert compared > 100


@pytest.mark.parametrize("kind", ["REDUCE_MAX", "REDUCE_MIN"])
def test_reduce_matches_litert(mem, kind) -> None:
    rng = np.random.default_rng({"REDUCE_MAX": 601, "REDUCE_MIN": 602}[kind])
    for case in range(CASES):
        shape, axes, keep, out = _case(rng)
        qin = ([float(rng.uniform(0.01, 0.1))], [int(rng.integers(-20, 21))])
        qout = qin
        tensors = [TensorSpec(shape, np.int8, *qin), TensorSpec((len(axes),), np.int32, data=np.int32(axes)),
                   TensorSpec(out, np.int8, *qout)]
        model = single_op_model(getattr(OP, kind), tensors, [0, 1], [2], tflite.BuiltinOptions.ReducerOptions,
                                _reducer_options(keep), version=2)
        check_on_chip(mem, model, [random_int8(rng, shape)], f"case {case}: {shape} axes {axes} keep {keep} "
                      f"{qin} -> {qout}", export=case < 5)


def _l2_reference(x: np.ndarray, axes, zi: int, zo: int, scale: float) -> np.ndarray:
    """The documented formula, element by element with Python numbers."""
    moved = np.moveaxis(x.astype(np.int64), axes, list(range(-len(axes), 0)))
    rows = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    out = np.empty(rows.shape[:-1], np.int64)
    for idx in np.ndindex(out.shape):
        acc = sum((int(v) - zi) ** 2 for v in rows[idx])
        val = math.sqrt(acc) * scale
        r = math.floor(val) + (1 if val - math.floor(val) >= 0.5 else 0)
        out[idx] = min(max(zo + r, -128), 127)
    return out.astype(np.int8)


def test_reduce_l2_formula(mem) -> None:
    from tests.libnpu.compiler.test_onnx_ops import single_node
    rng = np.random.default_rng(603)
    for case in range(CASES):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 5))))
        k = int(rng.integers(1, len(shape) + 1))
        axes = sorted(int(a) for a in rng.choice(len(shape), size=k, replace=False))
        out = tuple(1 if i in axes else d for i, d in enumerate(shape))
        model = single_node("ReduceL2", {"x": shape}, {"y": out}, {"axes": np.int64(axes)}, opset=18)
        q = quantize_model(import_onnx(model), random_count=2, io_dtype="int8", seed=case)
        x = random_int8(rng, shape)
        (got,) = run_loadable(mem, lower(q), [x])
        (si, zi), (so, zo) = [(float(t.quant.scale[0]), int(t.quant.zero_point[0]))
                              for t in (q.tensors[q.inputs[0]], q.tensors[q.outputs[0]])]
        expected = _l2_reference(x, axes, zi, zo, float(np.float64(np.float32(si)) / np.float64(np.float32(so))))
        assert got.tobytes() == expected.reshape(got.shape).tobytes(), f"case {case}: {shape} axes {axes}"
