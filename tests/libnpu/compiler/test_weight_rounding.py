"""GPTQ's bias column: a layer's bias, rounded last and for free, takes up the mean of
the error its weights' rounding leaves."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.weight_rounding import _rows, input_moments, round_layer
from tests.support import model_builders as builders


def _with_ones(rows: np.ndarray) -> np.ndarray:
    return np.concatenate([rows, np.ones((*rows.shape[:-1], 1))], axis=-1)


def _moment(rows: np.ndarray) -> np.ndarray:
    return np.einsum("...ri,...rj->...ij", rows, rows) / rows.shape[-2]


def test_the_bias_takes_up_the_mean_error_of_a_layer_whose_output_cancels() -> None:
    rng = np.random.default_rng(7)
    # Positive inputs (after a ReLU6) and an output much smaller than its terms: the bias
    # cancels what the weights add on average, as batch norm folding leaves it.
    x = np.clip(rng.normal(2.0, 1.0, (3000, 24)), 0, 6)
    w = rng.standard_normal((8, 24)) * 3
    bias = -(w @ x.mean(0))
    scale = np.abs(w).max(axis=1) / 127
    fit, held_out = x[:1500], x[1500:]
    ref = held_out @ w.T + bias

    plain, same_bias = round_layer("FULLY_CONNECTED", w, scale, _moment(fit), bias)
    assert same_bias is bias                                       # no bias column: the bias as it was
    rounded, new_bias = round_layer("FULLY_CONNECTED", w, scale, _moment(_with_ones(fit)), bias)
    assert rounded.dtype == np.int8 and rounded.shape == w.shape and np.abs(rounded.astype(int)).max() <= 127
    assert new_bias is not None and not np.allclose(new_bias, bias)

    def errors(q: np.ndarray, b: np.ndarray) -> tuple[float, float]:
        e = held_out @ (q * scale[:, None]).T + b - ref
        return float(np.abs(e.mean(0)).max()), float(np.square(e).mean())
    plain_mean, plain_mse = errors(plain, bias)
    mean, mse = errors(rounded, new_bias)
    assert mean < plain_mean / 5
    assert mse < 0.8 * plain_mse


def test_depthwise_channels_each_get_their_bias_adjusted() -> None:
    rng = np.random.default_rng(8)
    pics = np.clip(np.cumsum(rng.standard_normal((40, 14, 14, 3)), axis=1) * 0.3 + 2, 0, 6)
    rows = np.stack([np.lib.stride_tricks.sliding_window_view(pics[..., c], (3, 3), axis=(1, 2)).reshape(-1, 9)
                     for c in range(3)])                                        # [C, rows, 9]
    w = (rng.standard_normal((9, 3)) * 20).reshape(1, 3, 3, 3)
    bias = -np.einsum("ci,ic->c", rows.mean(1), w.reshape(9, 3))
    scale = np.abs(w).reshape(9, 3).max(axis=0) / 127
    fit, held_out = rows[:, :3000], rows[:, 3000:]
    plain, _ = round_layer("DEPTHWISE_CONV_2D", w, scale, _moment(fit), bias)
    rounded, new_bias = round_layer("DEPTHWISE_CONV_2D", w, scale, _moment(_with_ones(fit)), bias)
    assert rounded.shape == w.shape and new_bias is not None and new_bias.shape == bias.shape

    def mse(q: np.ndarray, b: np.ndarray) -> float:
        e = np.einsum("cri,ic->cr", held_out, (q * scale - w).reshape(9, 3)) + (b - bias)[:, None]
        return float(np.square(e).mean())
    assert mse(rounded, new_bias) < mse(plain, bias) / 2


def test_input_moments_carry_the_bias_column_for_layers_with_a_bias() -> None:
    g = optimize(import_onnx(builders.small_cnn()))
    rng = np.random.default_rng(9)
    data = [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(2)]
    moments = input_moments(g, data)
    assert moments
    for op in g.ops:
        if op.inputs[1:2] and op.inputs[1] in moments:
            w = g.tensors[op.inputs[1]]
            columns = w.shape[1] * w.shape[2] if op.type == "DEPTHWISE_CONV_2D" else int(np.prod(w.shape[1:]))
            has_bias = len(op.inputs) > 2 and bool(op.inputs[2])
            assert moments[op.inputs[1]].shape[-1] == columns + has_bias
            if has_bias:   # the constant input's own moment is 1
                assert moments[op.inputs[1]][..., -1, -1] == pytest.approx(1.0)

    for op in g.ops:      # the BLAS product computes the second moment as written (einsum)
        if op.inputs[1:2] and op.inputs[1] in moments:
            x = np.concatenate([FloatInterpreter(g).run(d, keep=[op.inputs[0]])[op.inputs[0]] for d in data])
            rows = _rows(op, g, np.asarray(x, np.float32))
            assert rows is not None
            rows = _with_ones(rows.astype(np.float64)) if len(op.inputs) > 2 and op.inputs[2] else rows
            np.testing.assert_allclose(moments[op.inputs[1]], _moment(rows), rtol=1e-9, atol=1e-9)


def test_gptq_changes_the_biases_and_keeps_every_grid() -> None:
    model = import_onnx(builders.small_cnn())
    rng = np.random.default_rng(10)
    feeds = [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(4)]
    plain = quantize_model(model, feeds)
    same_biases = quantize_model(model, feeds, weight_rounding="gptq")
    gptq = quantize_model(model, feeds, weight_rounding="gptq-bias")
    biases = [n for n, t in plain.tensors.items() if t.dtype == "int32" and t.is_constant]
    assert biases and any(not np.array_equal(plain.tensors[n].data, gptq.tensors[n].data) for n in biases)
    assert all(np.array_equal(plain.tensors[n].data, same_biases.tensors[n].data) for n in biases)  # gptq: weights only
    for name, t in plain.tensors.items():
        assert gptq.tensors[name].quant == t.quant                 # same grids, biases included
