"""TFLite models of the activations and elementwise math, end to end on the chip:

* int8 single-op models, imported as they are, compiled and run on a device: byte-identical
  to LiteRT's reference kernels;
* float single-op models, quantized by our quantizer and exported back to TFLite: the chip
  and LiteRT give the same bytes on the quantized model.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import tflite

import libnpu
from libnpu.compiler.ir import IRError
from libnpu.compiler.lower import lower
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import import_tflite
from tests.firmware_sim.test_math_ops import run_builtin
from tests.support.tflite_builder import TensorSpec, named_options, run_reference, single_op_model

OP = tflite.BuiltinOperator
SHAPE = (1, 4, 5, 3)


@dataclass
class Case:
    opcode: int
    version: int = 1
    inputs: int = 1
    options: tuple = (0, None)
    out_q: tuple[float, int] | None = None         # fixed by the int8 spec
    second: np.ndarray | None = None               # a constant second input (PRELU's alpha)
    positive: bool = False                         # defined on positive inputs only
    reference: object = field(default=run_reference)


_ALPHA = np.array([0.25, -0.1, 0.5], np.float32).reshape(1, 1, 3)
CASES = {
    "PRELU": Case(OP.PRELU, inputs=2, second=_ALPHA),
    "HARD_SWISH": Case(OP.HARD_SWISH),
    "LEAKY_RELU": Case(OP.LEAKY_RELU, 2, options=named_options("LeakyReluOptions", Alpha=0.2)),
    "ELU": Case(OP.ELU, reference=run_builtin),
    "GELU": Case(OP.GELU, options=named_options("GeluOptions", Approximate=True)),
    "EXP": Case(OP.EXP, 2),
    "LOG": Case(OP.LOG, 2, positive=True),
    "RSQRT": Case(OP.RSQRT, 2, positive=True),
    "SQRT": Case(OP.SQRT, 2, positive=True),
    "ABS": Case(OP.ABS, 2),
    "SQUARED_DIFFERENCE": Case(OP.SQUARED_DIFFERENCE, 2, inputs=2),
    "SUB": Case(OP.SUB, 2, inputs=2, options=named_options("SubOptions", FusedActivationFunction=1)),
    "MAXIMUM": Case(OP.MAXIMUM, 2, inputs=2),
    "MINIMUM": Case(OP.MINIMUM, 2, inputs=2),
    "L2_NORMALIZATION": Case(OP.L2_NORMALIZATION, 2, out_q=(1 / 128, 0)),
    "LOG_SOFTMAX": Case(OP.LOG_SOFTMAX, 2, out_q=(16 / 256, 127)),
}


def _int8_model(case: Case, rng: np.random.Generator) -> tuple[bytes, list[np.ndarray]]:
    q = [(float(np.float32(rng.uniform(0.01, 0.05))), int(rng.integers(-100, 100))) for _ in range(3)]
    if case.opcode in (OP.MAXIMUM, OP.MINIMUM):
        q = [q[0]] * 3
    if case.positive:
        q[0] = (q[0][0], -128)
    if case.opcode == OP.SQUARED_DIFFERENCE:
        q[2] = (0.5, -100)
    out_q = case.out_q or q[2]
    tensors = [TensorSpec(SHAPE, np.int8, [q[0][0]], [q[0][1]], name="x")]
    if case.inputs == 2:
        data = None
        if case.second is not None:
            data = np.clip(np.round(case.second / q[1][0]) + q[1][1], -128, 127).astype(np.int8)
        tensors.append(TensorSpec(SHAPE if data is None else data.shape, np.int8, [q[1][0]], [q[1][1]],
                                  data=data, name="b"))
    tensors.append(TensorSpec(SHAPE, np.int8, [out_q[0]], [out_q[1]], name="y"))
    model = single_op_model(case.opcode, tensors, list(range(case.inputs)), [case.inputs], *case.options,
                            version=case.version)
    feeds = [rng.integers(-128, 128, SHAPE, dtype=np.int8)]
    if case.inputs == 2 and case.second is None:
        feeds.append(rng.integers(-128, 128, SHAPE, dtype=np.int8))
    return model, feeds


def _float_model(case: Case) -> bytes:
    tensors = [TensorSpec(SHAPE, np.float32, name="x")]
    if case.inputs == 2:
        tensors.append(TensorSpec(SHAPE if case.second is None else case.second.shape, np.float32,
                                  data=case.second, name="b"))
    tensors.append(TensorSpec(SHAPE, np.float32, name="y"))
    return single_op_model(case.opcode, tensors, list(range(case.inputs)), [case.inputs], *case.options,
                           version=case.version)


def _on_chip(npu, graph, feeds: list[np.ndarray]) -> list[np.ndarray]:
    compiled = libnpu.load(lower(graph), devroot=npu.devroot)
    try:
        return [compiled.infer(f) for f in feeds]
    finally:
        compiled.close()


@pytest.mark.parametrize("name", list(CASES))
def test_int8_model_on_the_chip_is_byte_identical_to_litert(name: str, npu) -> None:
    case = CASES[name]
    rng = np.random.default_rng(31)
    model, feeds = _int8_model(case, rng)
    if case.positive:
        feeds = [np.abs(feeds[0]).astype(np.int8)]
    batches = [feeds] + [[rng.integers(-128, 128, f.shape, dtype=np.int8) if not case.positive
                          else rng.integers(-128, 128, f.shape).clip(0).astype(np.int8) for f in feeds]
                         for _ in range(2)]
    graph = import_tflite(model, name)
    assert [op.type for op in graph.ops] == [name]
    for got, batch in zip(_on_chip(npu, graph, batches), batches):
        (expected,) = case.reference(model, *batch)
        np.testing.assert_array_equal(got[0], expected)


@pytest.mark.parametrize("name", list(CASES))
def test_quantized_float_model_is_byte_identical_to_its_export(name: str, npu) -> None:
    case = CASES[name]
    rng = np.random.default_rng(32)
    low = 0.05 if case.positive else -1.0

    def feed() -> list[np.ndarray]:
        xs = [rng.uniform(low, 1.0, SHAPE).astype(np.float32)]
        if case.inputs == 2 and case.second is None:
            xs.append(rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32))
        return xs

    q = quantize_model(import_tflite(_float_model(case), name), [feed() for _ in range(8)], io_dtype="int8")
    assert name in [op.type for op in q.ops]
    exported = export_tflite(q)
    batches = [[np.clip(np.round(x / q.tensors[n].quant.scale[0]) + q.tensors[n].quant.zero_point[0],
                        -128, 127).astype(np.int8) for x, n in zip(feed(), q.inputs)] for _ in range(3)]
    for got, batch in zip(_on_chip(npu, q, batches), batches):
        np.testing.assert_array_equal(got[0], case.reference(exported, *batch)[0])


def test_neg_int8_negates_the_bytes(npu) -> None:
    tensors = [TensorSpec(SHAPE, np.int8, [0.02], [5], name="x"), TensorSpec(SHAPE, np.int8, [0.02], [-5], name="y")]
    model = single_op_model(OP.NEG, tensors, [0], [1])
    x = np.arange(-128, 128, dtype=np.int8)[:60].reshape(SHAPE)
    (got,) = _on_chip(npu, import_tflite(model, "neg"), [[x]])
    np.testing.assert_array_equal(got[0], run_reference(model, x)[0])


def test_neg_of_a_float_model_is_quantized_as_mul_by_minus_one(npu, litert) -> None:
    rng = np.random.default_rng(1)
    q = quantize_model(import_tflite(_float_model(Case(OP.NEG)), "neg"),
                       [[rng.uniform(-1, 0.5, SHAPE).astype(np.float32)] for _ in range(4)])
    assert q.op_counts() == {"QUANTIZE": 1, "MUL": 1, "DEQUANTIZE": 1}
    x = rng.uniform(-1, 0.5, SHAPE).astype(np.float32)
    (got,) = _on_chip(npu, q, [[x]])
    np.testing.assert_array_equal(got[0], litert(export_tflite(q), [x])[0])
    np.testing.assert_allclose(got[0], -x, atol=0.01)


def test_neg_needs_a_negated_zero_point() -> None:
    tensors = [TensorSpec(SHAPE, np.int8, [0.02], [5], name="x"), TensorSpec(SHAPE, np.int8, [0.02], [3], name="y")]
    with pytest.raises(IRError, match="negated zero point"):
        lower(import_tflite(single_op_model(OP.NEG, tensors, [0], [1]), "neg"))


@pytest.mark.parametrize("opcode,inputs,message", [(OP.HARD_SWISH, 1, "HARD_SWISH: output scale"),
                                                   (OP.SQUARED_DIFFERENCE, 2, "SQUARED_DIFFERENCE: output scale")])
def test_scales_litert_cannot_run_are_one_clear_error(opcode: int, inputs: int, message: str) -> None:
    tensors = [TensorSpec(SHAPE, np.int8, [0.5], [0], name=f"in{i}") for i in range(inputs)]
    tensors.append(TensorSpec(SHAPE, np.int8, [1e-6], [0], name="y"))
    with pytest.raises(IRError, match=message):
        lower(import_tflite(single_op_model(opcode, tensors, list(range(inputs)), [inputs]), "bad"))
