"""int16 headroom: how far an int16 grid reaches beyond its tensor's calibrated range, 2x
for every tensor by default, or each tensor's own from held-out calibration samples
(``int16_headroom="held-out"``)."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.mixed_precision import (
    HELD_OUT_MARGIN,
    INT16_HEADROOM,
    MixedPrecisionError,
    held_out_headroom,
    int16_quant,
    promotable,
    quantize_mixed,
)
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from tests.support import model_builders as builders

SHAPE = (1, 3, 16, 16)


@pytest.fixture(scope="module")
def small_cnn():
    return import_onnx(builders.small_cnn())


def _data(count: int, seed: int, loud: float = 1.0) -> list[list[np.ndarray]]:
    """``count`` samples; the first ``loud`` times as strong as the others."""
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(SHAPE) * (loud if i == 0 else 1.0)).astype(np.float32)] for i in range(count)]


def _peaks(graph, data, name: str) -> list[float]:
    run = FloatInterpreter(graph)
    return [float(np.abs(run.run(f, keep=[name])[name]).max()) for f in data]


def test_a_tensor_gets_the_margin_times_what_one_sample_exceeds_the_others_by(small_cnn) -> None:
    g = optimize(small_cnn)
    same = [_data(1, 3)[0]] * 4                    # no sample goes beyond the others: the margin alone
    assert set(held_out_headroom(g, same).values()) == {HELD_OUT_MARGIN}
    data = _data(5, 3, loud=1.3)
    headroom = held_out_headroom(g, data)
    assert set(headroom) == {o for op in g.ops for o in op.outputs}
    first = g.ops[0].outputs[0]
    top = sorted(_peaks(g, data, first))
    assert top[-1] > top[-2]
    assert headroom[first] == pytest.approx(min(INT16_HEADROOM, HELD_OUT_MARGIN * top[-1] / top[-2]))
    assert all(HELD_OUT_MARGIN <= h <= INT16_HEADROOM for h in headroom.values())
    loud = held_out_headroom(g, _data(5, 3, loud=3.0))     # capped at the default
    assert loud[first] == INT16_HEADROOM
    assert held_out_headroom(g, data[:1]) == {}           # one sample: nothing held out


def test_held_out_grids_are_finer_where_the_samples_agree(small_cnn) -> None:
    data = _data(6, 5)
    q8 = quantize_mixed(small_cnn, data, int16="none")
    every = [op.name for op in q8.ops if promotable(op)]
    fixed = quantize_mixed(small_cnn, data, int16=every)
    held = quantize_mixed(small_cnn, data, int16=every, int16_headroom="held-out")
    assert "int16_headroom" not in fixed.metadata           # the default: 2x everywhere, as before
    headroom = held_out_headroom(optimize(small_cnn), data)
    compared = 0
    for op in fixed.ops:
        if op.name not in every or op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "FULLY_CONNECTED"):
            continue     # the others' output scale is fixed (SOFTMAX) or their input's (pooling, layout)
        name = op.outputs[0]
        assert float(fixed.tensors[name].quant.scale[0]) == \
            pytest.approx(float(int16_quant(q8.tensors[name].quant).scale[0]))
        assert float(held.tensors[name].quant.scale[0]) == \
            pytest.approx(float(int16_quant(q8.tensors[name].quant, headroom[name]).scale[0]))
        assert held.tensors[name].quant.scale[0] < fixed.tensors[name].quant.scale[0]
        compared += 1
    assert compared >= 4
    summary = held.metadata["int16_headroom"]
    assert HELD_OUT_MARGIN <= summary["min"] <= summary["median"] <= summary["max"] <= INT16_HEADROOM
    uniform = quantize_mixed(small_cnn, data, int16=every, int16_headroom=1.5)
    assert uniform.metadata["int16_headroom"] == {"min": 1.5, "median": 1.5, "max": 1.5}


def test_bad_headroom_is_refused(small_cnn) -> None:
    data = _data(2, 7)
    for bad in (0.5, "twice", 100.0):
        with pytest.raises(MixedPrecisionError, match="int16 headroom"):
            quantize_mixed(small_cnn, data, int16="auto", int16_headroom=bad)
