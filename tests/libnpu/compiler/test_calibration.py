"""Calibration methods (histogram range choice) and bias correction."""
import numpy as np
import pytest

from libnpu.compiler.calibration import METHODS, Histogram, choose_range
from libnpu.compiler.float_ref import FloatInterpreter
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import Calibrator, QuantizationError, calibrate, quantize_model
from tests.support import model_builders as builders

RNG = np.random.default_rng(0)


def _histogram(values, parts=4):
    h = Histogram()
    for part in np.array_split(values, parts):
        h.add(part)
    return h


def test_histogram_widens_without_losing_counts_or_extremes():
    values = np.concatenate([RNG.uniform(0, 1, 1000), RNG.uniform(-5, 9, 1000)])
    h = _histogram(values, parts=2)   # the second half widens the span
    assert h.total == values.size
    assert (h.min, h.max) == (values.min(), values.max())
    assert h.lo <= 0 <= h.hi and h.lo == values.min() and h.hi == values.max()


def test_percentile_cuts_outliers_minmax_keeps_them():
    values = np.concatenate([RNG.normal(0, 1, 100_000), [50.0, -40.0]])
    h = _histogram(values)
    assert choose_range(h, "minmax") == (-40.0, 50.0)
    lo, hi = choose_range(h, "percentile", 99.9)
    assert -3.6 < lo < -2.8 and 2.8 < hi < 3.6   # N(0, 1): the 0.1% / 99.9% quantiles are -+3.09


def _quantization_mse(values, lo, hi):
    """The real mean squared error of an asymmetric int8 grid over [lo, hi] (zero included)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255
    zp = np.round(-128 - lo / scale)
    q = np.clip(np.round(values / scale) + zp, -128, 127)
    return float(np.mean(((q - zp) * scale - values) ** 2))


def test_mse_range_has_the_smallest_real_error():
    for values in (np.concatenate([RNG.laplace(0, 1, 100_000), RNG.normal(0, 1, 30) * 15]),
                   np.maximum(RNG.standard_t(3, 100_000), 0), RNG.uniform(-1, 3, 100_000)):
        h = _histogram(values)
        best = _quantization_mse(values, *choose_range(h, "mse"))
        for method in ("minmax", "percentile", "entropy"):
            assert best <= _quantization_mse(values, *choose_range(h, method)) * 1.05, method
    lo, hi = choose_range(_histogram(RNG.uniform(-1, 3, 100_000)), "mse")  # nothing to clip
    assert lo == pytest.approx(-1, abs=0.02) and hi == pytest.approx(3, abs=0.05)


def test_entropy_on_a_known_histogram():
    # A bell with two far outliers: the 255 levels go to the bell (N(0, 1): within about +-4).
    values = np.concatenate([RNG.normal(0, 1, 100_000), [20.0, -20.0]])
    lo, hi = choose_range(_histogram(values), "entropy")
    assert -6 < lo < -3 and 3 < hi < 6
    # A flat histogram loses nothing to clipping: the whole range; the zeros of a ReLU
    # output (counted apart) do not pull the range in.
    lo, hi = choose_range(_histogram(RNG.uniform(-1, 3, 100_000)), "entropy")
    assert lo == pytest.approx(-1, abs=0.01) and hi == pytest.approx(3, abs=0.01)
    relu = np.maximum(RNG.uniform(-1, 1, 100_000), 0)
    lo, hi = choose_range(_histogram(relu), "entropy")
    assert lo == 0 and hi > 0.95


def test_every_method_runs_on_a_model_and_ranges_contain_zero():
    g = optimize(import_onnx(builders.small_cnn()))
    data = [[RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(3)]
    for method in METHODS:
        ranges = calibrate(g, data, method=method)
        assert set(ranges) >= set(g.inputs)
        assert all(lo <= hi for lo, hi in ranges.values()), method
    with pytest.raises(QuantizationError, match="unknown calibration method 'kl'.*entropy"):
        Calibrator(g, "kl")
    with pytest.raises(QuantizationError, match="percentile"):
        Calibrator(g, "percentile", percentile=30)


def _mean_errors(g, q, feeds):
    """Per layer with weights: mean over channels of |mean error| of the channel, vs float."""
    f_run, q_run = FloatInterpreter(g), FloatInterpreter(q)
    layers = [op.outputs[0] for op in q.ops if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]
    sums = {n: [] for n in layers}
    for feed in feeds:
        a, b = f_run.run(feed, keep=True), q_run.run(feed, keep=True)
        for n in layers:
            sums[n].append((b[n] - a[n]).reshape(-1, a[n].shape[-1]).mean(axis=0))
    return {n: float(np.abs(np.mean(v, axis=0)).mean()) for n, v in sums.items()}


def test_bias_correction_reduces_the_mean_error():
    model = import_onnx(builders.small_cnn())
    g = optimize(model)
    feeds = [[RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(16)]
    plain = quantize_model(model, feeds)
    corrected = quantize_model(model, feeds, bias_correction=True)
    assert corrected.metadata["calibration"]["bias_correction"] is True
    before, after = _mean_errors(g, plain, feeds), _mean_errors(g, corrected, feeds)
    # The logits (one position per sample: 16 observations) are corrected only as far as
    # their mean error stands out of its noise; the feature maps' means are taken whole.
    assert after["logits"] <= before["logits"]
    maps = [n for n in before if n != "logits"]
    assert sum(after[n] for n in maps) < sum(before[n] for n in maps) / 3
    # Only biases changed: same tensors, same weights and activation grids.
    for name, t in plain.tensors.items():
        u = corrected.tensors[name]
        assert u.quant == t.quant
        if t.dtype == "int8" and t.is_constant:
            np.testing.assert_array_equal(u.data, t.data)


def test_layer_report_lands_in_the_metadata():
    model = import_onnx(builders.small_cnn())
    feeds = [[RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(2)]
    q = quantize_model(model, feeds, layer_report=True)
    rows = q.metadata["layer_errors"]
    assert [r["tensor"] for r in rows][-1] == next(op for op in q.ops if op.type == "SOFTMAX").outputs[0]
    assert all(r["sqnr_db"] is None or r["sqnr_db"] > 10 for r in rows)


def test_gptq_rounds_for_the_inputs_and_keeps_the_grid():
    from libnpu.compiler.weight_rounding import gptq_round
    rng = np.random.default_rng(3)
    # Correlated inputs and an output much smaller than its terms (a regression head).
    basis = rng.standard_normal((8, 64))
    x = np.abs(rng.standard_normal((400, 8)) @ basis)
    w = rng.standard_normal((16, 64)) * 0.3
    w -= (x.mean(0) @ w.T)[:, None] * x.mean(0)[None, :] / (x.mean(0) @ x.mean(0))  # cancel on average
    scale = np.abs(w).max(axis=1) / 127
    nearest = np.clip(np.round(w / scale[:, None]), -127, 127)
    moment = x[:200].T @ x[:200] / 200
    rounded = gptq_round(w.astype(np.float32), scale, moment)
    assert rounded.dtype == np.int8 and np.abs(rounded.astype(int)).max() <= 127
    assert np.abs(rounded - nearest).max() >= 1                 # some weights took the other step
    held_out = x[200:]
    ref = held_out @ w.T

    def err(q):
        return np.square(held_out @ (q * scale[:, None]).T - ref).mean()
    assert err(rounded) < err(nearest) / 4


def test_gptq_option_on_a_model():
    model = import_onnx(builders.small_cnn())
    feeds = [[RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(4)]
    plain = quantize_model(model, feeds)
    gptq = quantize_model(model, feeds, weight_rounding="gptq")
    assert gptq.metadata["calibration"]["weight_rounding"] == "gptq"
    changed = [n for n, t in plain.tensors.items() if t.dtype == "int8" and t.is_constant
               and not np.array_equal(t.data, gptq.tensors[n].data)]
    assert changed                                               # conv / FC weights re-rounded
    assert all(gptq.tensors[n].quant == plain.tensors[n].quant for n in changed)   # same grids
    with pytest.raises(QuantizationError, match="weight_rounding"):
        quantize_model(model, feeds, weight_rounding="adaround")


def test_a_saturating_ops_input_keeps_the_domain_where_its_output_moves():
    model = import_onnx(builders.layout_mix())
    feeds = [[0.01 * RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)] for _ in range(2)]   # tiny logits
    q = quantize_model(model, feeds)
    tanh_in = next(op for op in q.ops if op.type == "TANH").inputs[0]
    qp = q.tensors[tanh_in].quant
    lo, hi = qp.dequantize(np.array([-128, 127]))
    assert lo < -3.1 and hi > 2.5           # tanh reaches its last int8 step near +-3.1 / 2.6
    # A same-scale tensor (average pool -> sigmoid) keeps its calibrated range.
    sig_in = next(op for op in q.ops if op.type == "LOGISTIC").inputs[0]
    lo, hi = q.tensors[sig_in].quant.dequantize(np.array([-128, 127]))
    assert hi - lo < 1


def test_a_hard_sigmoid_gate_keeps_its_whole_domain_and_output():
    """A squeeze-excitation gate calibrated on small logits still opens fully on unseen
    larger ones (rapidocr's classifier: 0.82 -> 0.93 on unseen crops, simulated at int8)."""
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array((RNG.standard_normal((8, 8, 1, 1)) * 0.5).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("HardSigmoid", ["c"], ["g"], alpha=0.2),
         helper.make_node("Mul", ["x", "g"], ["out"])], "se",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [w])
    model = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = [[0.3 * RNG.standard_normal((1, 8, 1, 1)).astype(np.float32)] for _ in range(4)]
    q = quantize_model(model, feeds)
    gate = next(op for op in q.ops if op.type == "HARD_SIGMOID")
    lo, hi = q.tensors[gate.inputs[0]].quant.dequantize(np.array([-128, 127]))
    assert lo <= -2.5 + 0.05 and hi >= 2.5 - 0.05      # [-beta/alpha, (1-beta)/alpha]
    lo, hi = q.tensors[gate.outputs[0]].quant.dequantize(np.array([-128, 127]))
    assert lo <= 0.0 and hi >= 1.0 - 1 / 128


def test_gptq_depthwise_rounds_each_channel_for_its_own_inputs():
    from libnpu.compiler.weight_rounding import gptq_round_depthwise
    rng = np.random.default_rng(4)
    # Smooth (correlated) pictures and channels whose taps nearly cancel, as folded batch norm leaves them.
    pics = np.cumsum(np.cumsum(rng.standard_normal((60, 12, 12, 3)), axis=1), axis=2)
    rows = np.stack([np.lib.stride_tricks.sliding_window_view(pics[..., c], (3, 3), axis=(1, 2))
                     .reshape(-1, 9) for c in range(3)])                         # [C, rows, 9]
    w = rng.standard_normal((9, 3)) * 20
    w -= w.mean(axis=0)                                                          # taps sum to ~0
    w = w.reshape(1, 3, 3, 3)
    scale = np.abs(w).reshape(9, 3).max(axis=0) / 127
    moments = np.einsum("cri,crj->cij", rows[:, :3000], rows[:, :3000]) / 3000
    rounded = gptq_round_depthwise(w.astype(np.float32), scale, moments)
    nearest = np.clip(np.round(w / scale), -127, 127)
    held_out = rows[:, 3000:]

    def err(q):
        return np.square(np.einsum("cri,ic->cr", held_out, (q * scale - w).reshape(9, 3))).mean()
    assert rounded.shape == w.shape and rounded.dtype == np.int8
    assert err(rounded) < err(nearest) / 2


def test_bias_correction_takes_a_well_measured_shift_whole_and_shrinks_noise():
    """A channel's mean error is corrected in full when thousands of observations pin it
    down, and mostly left alone when a few noisy ones do not (a head's single position)."""
    from libnpu.compiler.bias_correction import _significant_shift
    rng = np.random.default_rng(3)
    feature_map = np.stack([0.2 + 0.5 * rng.standard_normal(20000), 0.5 * rng.standard_normal(20000)], axis=1)
    shift = _significant_shift(feature_map)
    assert shift[0] == pytest.approx(0.2, abs=0.02) and abs(shift[1]) < 0.01
    head = 0.05 + rng.standard_normal((10, 1))           # ten pictures, one logit each
    assert abs(float(head.mean())) > 0.3 and float(_significant_shift(head)[0]) == 0.0
    assert _significant_shift(np.full((1, 3), 0.7)).tolist() == [0.0, 0.0, 0.0]  # one observation: unknown
    assert _significant_shift(np.full((5, 2), 0.25)) == pytest.approx([0.25, 0.25])  # no spread: exact


def test_auto_bias_correction_keeps_it_only_where_held_out_data_agree():
    from libnpu.compiler.quantizer import _bias_correction_helps
    model = import_onnx(builders.small_cnn())
    g = optimize(model)
    feeds = [[RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(8)]
    plain = quantize_model(model, feeds)
    helps = _bias_correction_helps(g, plain, feeds)
    auto = quantize_model(model, feeds, bias_correction="auto")
    assert auto.metadata["calibration"]["bias_correction"] is helps
    same = quantize_model(model, feeds, bias_correction=helps)
    for name, t in same.tensors.items():
        if t.is_constant:
            np.testing.assert_array_equal(auto.tensors[name].data, t.data)
    assert _bias_correction_helps(g, plain, feeds[:3]) is False      # too few samples to hold any out
    with pytest.raises(QuantizationError, match="bias_correction must be"):
        quantize_model(model, feeds, bias_correction="sometimes")
