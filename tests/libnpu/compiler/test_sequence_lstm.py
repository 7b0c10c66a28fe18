"""int8 TFLite UNIDIRECTIONAL_SEQUENCE_LSTM (the 8x8->16 integer cell) on the chip: imported,
lowered to its one descriptor, run by the chip's executor, byte-identical to LiteRT's
BUILTIN_REF kernel; its states carried between calls as LiteRT carries its variable
tensors; the cells the chip does not run go to the CPU with their reason."""
from __future__ import annotations

import numpy as np
import pytest
import tflite

import libnpu
from libnpu.compiler.lower import lower
from libnpu.compiler.placement import CPU, NPU, plan_placement
from libnpu.compiler.tflite_import import import_tflite
from npu_hw import tasks
from tests.support.chip_memory import ChipMemory, run_loadable
from tests.support.lstm_models import LstmSpec, lstm_model
from tests.support.tflite_builder import OpSpec, ReferenceRunner, TensorSpec, build_model, run_reference


def random_spec(rng: np.random.Generator, seed: int) -> LstmSpec:
    return LstmSpec(steps=int(rng.integers(1, 7)), batch=int(rng.integers(1, 4)), n_input=int(rng.integers(1, 9)),
                    n_cell=int(rng.integers(1, 13)), time_major=bool(rng.integers(2)),
                    cell_shift=int(rng.integers(-15, -8)),
                    cell_clip=float(rng.choice([0.0, rng.uniform(0.05, 4.0)])), seed=seed)


def sequence(rng: np.random.Generator, model: bytes) -> np.ndarray:
    shape = import_tflite(model).tensors["input"].shape
    return rng.integers(-128, 128, shape).astype(np.int8)


def test_lstm_matches_litert_on_200_random_cells(mem: ChipMemory, kernel_backend) -> None:
    """Random sizes, grids (cell state 2**-15 .. 2**-9), cell clips, time- or batch-major;
    the C kernel and the numpy one (the reference) alike."""
    rng = np.random.default_rng(2611)
    for case in range(200):
        spec = random_spec(rng, case)
        model = lstm_model(spec)
        x = sequence(rng, model)
        graph = import_tflite(model)
        (got,) = run_loadable(mem, lower(graph), [x])
        (expected,) = run_reference(model, x)
        assert got.tobytes() == expected.tobytes(), f"case {case}: {spec}"


def test_one_descriptor_per_layer() -> None:
    ld = lower(import_tflite(lstm_model(LstmSpec(4, 1, 3, 5))))
    names = [tasks.TASK_TYPES[t.opcode].name for t in ld.tasks]
    assert names.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1, names


def test_states_carry_between_calls_as_litert_keeps_its_variables(npu, tmp_path) -> None:
    """Five calls in a row on the device: each starts from the state the last one left (the
    output and cell states are variable tensors in LiteRT, states of the loadable here);
    after ``reset_state`` both start again from their reset values."""
    model = lstm_model(LstmSpec(3, 2, 4, 6, time_major=False, seed=9))
    assert [p.device for p in plan_placement(model).placements] == [NPU]
    rng = np.random.default_rng(3)
    calls = [sequence(rng, model) for _ in range(5)]
    reference = ReferenceRunner(model)
    compiled = libnpu.load(model, devroot=npu.devroot, cache_dir=tmp_path / "cache")
    try:
        request = compiled.create_request()    # a request keeps its states (OpenVINO's model)
        for k, x in enumerate(calls):
            (got,) = request.infer([x])
            assert got.tobytes() == reference(x)[0].tobytes(), f"call {k}"
        request.reset_state()
        fresh = ReferenceRunner(model)
        assert request.infer([calls[0]])[0].tobytes() == fresh(calls[0])[0].tobytes()
    finally:
        compiled.close()


def test_an_lstm_on_the_cpu_keeps_its_state_too(npu, tmp_path) -> None:
    """Kept off the chip (an allow-list without it), the cell runs in LiteRT on the host: its
    cut keeps the variable tensors inside and the intermediates its Prepare reads (a cut
    dropped both: "input 'output_state' used before it is produced")."""
    model = lstm_model(LstmSpec(3, 1, 2, 4, seed=4))
    rng = np.random.default_rng(4)
    reference = ReferenceRunner(model)
    compiled = libnpu.load(model, devroot=npu.devroot, cache_dir=tmp_path / "cache", ops=["ADD"])
    try:
        assert compiled.loadable.host_steps
        request = compiled.create_request()
        for k in range(3):
            x = sequence(rng, model)
            assert request.infer([x])[0].tobytes() == reference(x)[0].tobytes(), f"call {k}"
    finally:
        compiled.close()


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
