"""int8 TFLite UNIDIRECTIONAL_SEQUENCE_LSTM (the 8x8->16 integer cell) on the chip: imported,
lowered to its one descriptor, run by the chip's executor, byte-identical to LiteRT's
BUILTIN_REF kernel; the cells the chip does not run go to the CPU with their reason. Calls
in a row on a device (the states): test_rnn_device.py."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

from firmware_sim.kernels import native
from libnpu.compiler.lower import lower
from libnpu.compiler.placement import CPU, plan_placement
from libnpu.compiler.tflite_import import import_tflite
from npu_hw import tasks
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.rnn_models import LstmSpec, lstm_model
from tests.support.tflite_builder import OpSpec, TensorSpec, build_model, run_reference


def random_spec(rng: np.random.Generator, seed: int) -> LstmSpec:
    return LstmSpec(steps=int(rng.integers(1, 7)), batch=int(rng.integers(1, 4)), n_input=int(rng.integers(1, 9)),
                    n_cell=int(rng.integers(1, 13)), time_major=bool(rng.integers(2)),
                    cell_shift=int(rng.integers(-15, -8)),
                    cell_clip=float(rng.choice([0.0, rng.uniform(0.05, 4.0)])), seed=seed)


def sequence(rng: np.random.Generator, spec: LstmSpec) -> np.ndarray:
    lead = (spec.steps, spec.batch) if spec.time_major else (spec.batch, spec.steps)
    return rng.integers(-128, 128, (*lead, spec.n_input)).astype(np.int8)


def test_lstm_matches_litert_on_200_random_cells(mem: ChipMemory) -> None:
    """Random sizes, grids (cell state 2**-15 .. 2**-9), cell clips, time- or batch-major;
    the C kernel and the numpy one (the reference) alike."""
    assert native.library() is not None, "the C kernels did not build"
    rng = np.random.default_rng(2611)
    for case in range(200):
        spec = random_spec(rng, case)
        model = lstm_model(spec)
        x = sequence(rng, spec)
        loadable = lower(import_tflite(model))
        (expected,) = run_reference(model, x)
        (got,) = run_loadable(mem, loadable, [x])
        assert got.tobytes() == expected.tobytes(), f"case {case} (C kernel): {spec}"
        with native.enabled(False):
            (got,) = run_loadable(mem, loadable, [x])
        assert got.tobytes() == expected.tobytes(), f"case {case} (numpy kernel): {spec}"


def test_one_descriptor_per_layer() -> None:
    ld = lower(import_tflite(lstm_model(LstmSpec(4, 1, 3, 5))))
    names = [tasks.TASK_TYPES[t.opcode].name for t in ld.tasks]
    assert names.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1, names


@pytest.mark.parametrize("change,reason", [
    ("peephole", "peepholes"), ("cifg", "CIFG"), ("float", "float32 input")])
def test_cells_the_chip_does_not_run_go_to_the_cpu(change, reason) -> None:
    model = _variant(change)
    (placement,) = plan_placement(model).placements
    assert placement.device == CPU and reason in placement.reason, placement


def _variant(change: str) -> bytes:
    """A cell the chip refuses, written by editing the test model's flatbuffer as little as
    the change needs."""
    spec = LstmSpec(3, 1, 2, 3)
    n_cell, n_in = spec.n_cell, spec.n_input
    float_cell = change == "float"
    dtype = np.float32 if float_cell else np.int8
    q = (None, None) if float_cell else ([0.02], [0])
    rng = np.random.default_rng(0)
    tensors = [TensorSpec([3, 1, n_in], dtype, *q, name="input")]

    def const(shape, name):
        data = rng.uniform(-1, 1, shape).astype(np.float32) if float_cell else \
            rng.integers(-127, 128, shape).astype(np.int8)
        tensors.append(TensorSpec(shape, dtype, *q, data=data, name=name))
        return len(tensors) - 1
    w = [const([n_cell, n_in], f"w{k}") for k in range(4)]
    r = [const([n_cell, n_cell], f"r{k}") for k in range(4)]
    bias_type = np.float32 if float_cell else np.int32
    biases = []
    for k in range(4):
        tensors.append(TensorSpec([n_cell], bias_type, None if float_cell else [0.0004], None if float_cell else [0],
                                  data=np.zeros(n_cell, bias_type), name=f"b{k}"))
        biases.append(len(tensors) - 1)
    peephole = [const([n_cell], f"p{k}") for k in range(3)] if change == "peephole" else [-1, -1, -1]
    tensors.append(TensorSpec([1, n_cell], dtype, *q, name="h", is_variable=True))
    tensors.append(TensorSpec([1, n_cell], np.float32 if float_cell else np.int16,
                              None if float_cell else [2.0 ** -11], None if float_cell else [0], name="c",
                              is_variable=True))
    tensors.append(TensorSpec([3, 1, n_cell], dtype, *q, name="output"))
    h, c, out = len(tensors) - 3, len(tensors) - 2, len(tensors) - 1
    if change == "cifg":
        w[0] = r[0] = biases[0] = -1
    ins = [0, *w, *r, *peephole, *biases, -1, -1, h, c, -1, -1, -1, -1]

    def options(b):
        tflite.UnidirectionalSequenceLSTMOptionsStart(b)
        tflite.UnidirectionalSequenceLSTMOptionsAddFusedActivationFunction(b, tflite.ActivationFunctionType.TANH)
        tflite.UnidirectionalSequenceLSTMOptionsAddTimeMajor(b, True)
        return tflite.UnidirectionalSequenceLSTMOptionsEnd(b)
    op = OpSpec(tflite.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [out],
                tflite.BuiltinOptions.UnidirectionalSequenceLSTMOptions, options, version=3)
    return build_model(tensors, [op], [0], [out])
