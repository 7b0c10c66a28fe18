"""TFLite resource variables in the compiler: import as IR states, memory plan, lowering,
the loadable's STATE regions; refusals by name (no device needed)."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.ir import IRError
from libnpu.compiler.lower import compile_model
from libnpu.compiler.ops.variables import VariableError
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import UnsupportedOpError, import_tflite
from libnpu.loadable import FormatError, Loadable, RegionKind, TensorFlags
from tests.support.stateful_models import EMA_INITIAL, delay_model, streaming_model
from tests.support.tflite_builder import ReferenceRunner


def test_variables_become_states_with_their_initial_values():
    g = import_tflite(streaming_model(), "stream")
    assert g.inputs == ["x"] and g.outputs == ["ema_plus_x", "total_new"]
    (ema, total) = g.states
    assert (ema.name, ema.input, ema.output) == ("ema", "ema_previous", "ema_new")
    assert (total.name, total.input, total.output) == ("total", "total_previous", "total_new")
    assert np.array_equal(ema.initial, EMA_INITIAL) and not total.initial.any()
    # the read after the assignment is the assigned tensor itself: no op, no copy
    (add,) = [op for op in g.ops if op.outputs == ["ema_plus_x"]]
    assert add.inputs == ["ema_new", "x"]
    assert not {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} & set(g.op_counts())


def test_a_variable_read_straight_to_an_output_gets_its_own_bytes():
    g = import_tflite(delay_model(), "delay")
    (state,) = g.states
    assert state.input != "y" and state.output == "x"
    (copy,) = g.ops
    assert copy.type == "RESHAPE" and copy.inputs == [state.input] and copy.outputs == ["y"]
    assert np.array_equal(state.initial.reshape(-1), np.arange(8))


def test_loadable_has_a_state_region_per_variable_and_write_backs_last():
    ld = Loadable.from_bytes(compile_model(streaming_model()).to_bytes())
    states = ld.states()
    assert [ld.regions[t.region].name for t in states] == ["state:ema", "state:total"]
    for t in states:
        region = ld.regions[t.region]
        assert region.kind == RegionKind.STATE and t.flags == TensorFlags.STATE and t.offset == 0
        assert region.content is not None and len(region.content) == t.nbytes
    assert bytes(ld.regions[states[0].region].content) == EMA_INITIAL.tobytes()
    assert [t.name for t in ld.inputs()] == ["x"] and len(ld.outputs()) == 2
    assert [t.op for t in ld.tasks[-2:]] == ["ASSIGN_VARIABLE"] * 2
    readers = [i for i, t in enumerate(ld.tasks[:-2]) if ld.tensors.index(states[0]) in t.tensors]
    follows: list[set[int]] = []        # each task's ancestors (its dependencies name only the direct ones)
    for t in ld.tasks:
        follows.append(set(t.deps).union(*(follows[d] for d in t.deps)))
    assert readers and set(readers) <= follows[-2]      # the old value is read before it is replaced
    assert "state  ema [1, 8] int8" in ld.summary()


def test_delay_line_copies_out_before_the_write_back():
    ld = compile_model(delay_model())
    copy, write_back = ld.tasks
    assert (copy.op, write_back.op) == ("RESHAPE", "ASSIGN_VARIABLE") and write_back.deps == [0]


def test_a_state_tensor_outside_a_state_region_is_a_format_error():
    ld = compile_model(streaming_model())
    ld.tensors[ld.tensors.index(ld.states()[0])].region = 1
    with pytest.raises(FormatError, match="own STATE region"):
        ld.validate()


def test_float_reference_carries_state_when_fed():
    g = import_tflite(streaming_model(), "stream")
    run = FloatInterpreter(g)
    x = np.zeros((1, 8), np.int8)
    first = run.run([x], keep=["total_new"])
    fed = run.run({"x": x, "total_previous": np.full((1, 8), 10, np.int8)})
    assert not np.array_equal(first["total_new"], fed["total_new"])


@pytest.mark.parametrize("model, message", [
    (lambda: delay_model(with_init=False), "read before any value is assigned"),
    (lambda: delay_model(init_op=True), "only constant assignments"),
    (lambda: delay_model(read_back_scale=0.3), "other quantization"),
])
def test_refused_by_name(model, message):
    with pytest.raises(VariableError, match=message) as refused:
        import_tflite(model(), "bad")
    assert not isinstance(refused.value, UnsupportedOpError)     # never an operator for another runtime


def test_export_writes_resource_variables_litert_carries():
    g = import_tflite(streaming_model(), "stream")
    exported = export_tflite(g)
    original, again = ReferenceRunner(streaming_model()), ReferenceRunner(exported)
    rng = np.random.default_rng(3)
    for i in range(10):
        x = rng.integers(-128, 128, (1, 8), dtype=np.int8)
        for p, q in zip(original(x), again(x), strict=True):
            assert np.array_equal(p, q), f"call {i}"
    back = import_tflite(exported, "again")
    assert [(s.name, s.input, s.output) for s in back.states] == [(s.name, s.input, s.output) for s in g.states]


def test_stateless_copy_makes_states_inputs_and_outputs_again():
    g = import_tflite(streaming_model(), "stream")
    plain = g.stateless()
    assert plain.inputs == ["x", "ema_previous", "total_previous"]
    assert plain.outputs == ["ema_plus_x", "total_new", "ema_new"] and not plain.states
    with pytest.raises(IRError, match="not a graph input"):
        g.copy().make_stateful({"nope": "total_new"})


def test_a_state_that_is_also_an_output_is_copied_out_under_the_output_name():
    """An ONNX pair whose input is also returned: the output is read after the job, when
    the state already holds the new value, so it gets bytes of its own."""
    g = import_tflite(delay_model(), "delay").stateless()   # x, previous -> y (a copy), x
    g.make_stateful({g.inputs[1]: "x"})
    g.outputs.append(g.states[0].input)                      # return the old value directly too
    ld = compile_model(g)
    out = [t for t in ld.outputs() if t.name == g.states[0].input]
    assert out and ld.regions[out[0].region].kind == RegionKind.OUTPUT
    assert [t.op for t in ld.tasks][-1] == "ASSIGN_VARIABLE"
    (state,) = ld.states()
    assert state.name != out[0].name and ld.regions[state.region].kind == RegionKind.STATE
