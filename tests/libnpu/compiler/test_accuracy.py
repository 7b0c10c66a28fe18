import math

import numpy as np

from libnpu.compiler.accuracy import errors_from_json, errors_to_json, format_layer_errors, layer_errors, worst_layers
from libnpu.compiler.ir import QuantParams
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.optimize import optimize
from libnpu.compiler.quantizer import calibrate, quantize
from tests.support import model_builders as builders


def _feeds(n, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, 3, 16, 16)).astype(np.float32)] for _ in range(n)]


def _small_cnn():
    g = optimize(import_onnx(builders.small_cnn()))
    q = quantize(g, calibrate(g, _feeds(8)))
    return g, q


def test_every_op_output_is_measured_in_graph_order():
    g, q = _small_cnn()
    errors = layer_errors(g, q, _feeds(3, seed=1))
    produced = [op.outputs[0] for op in q.ops if op.type not in ("QUANTIZE", "DEQUANTIZE")]
    assert list(errors) == produced
    for e in errors.values():
        assert e.op in {op.type for op in q.ops}
        assert 0.9 < e.cosine <= 1.0 + 1e-9          # int8 of a small CNN: close to float
        assert 15 < e.sqnr_db < 60 and e.local_sqnr_db > 15
        assert e.float_range[0] <= e.float_range[1]
    # The last layer carries the error of every layer before it: its own error is smaller.
    last = errors[produced[-1]]
    assert last.local_sqnr_db >= last.sqnr_db - 0.5


def test_a_coarse_layer_is_the_worst_and_the_report_names_it():
    g, q = _small_cnn()
    conv = next(op for op in q.ops if op.type == "CONV_2D" and op.attrs["activation"] == "NONE")
    out = q.tensors[conv.outputs[0]]
    out.quant = QuantParams(out.quant.scale * 16, out.quant.zero_point)  # 4 bits fewer on that tensor
    errors = layer_errors(g, q, _feeds(2, seed=1))
    assert worst_layers(errors, 1)[0].tensor == conv.outputs[0]
    text = format_layer_errors(errors, worst=3)
    assert "the 3 worst of" in text and conv.outputs[0][-40:] in text.splitlines()[2]
    assert len(format_layer_errors(errors, worst=None).splitlines()) == len(errors) + 2


def test_json_round_trip_keeps_infinite_sqnr():
    g, q = _small_cnn()
    errors = layer_errors(g, q, _feeds(1))
    rows = errors_to_json(errors)
    back = errors_from_json(rows)
    assert list(back) == list(errors)
    for name, e in errors.items():
        b = back[name]
        assert (b.sqnr_db == e.sqnr_db) or (math.isclose(b.sqnr_db, e.sqnr_db))
        assert b.float_range == e.float_range


def test_tensors_only_the_quantized_graph_has_are_followed():
    """A precision change the float graph lacks (here a requantizing QUANTIZE) does not stop the report."""
    from libnpu.compiler.ir import Op, Tensor
    g, q = _small_cnn()
    pool = next(op for op in q.ops if op.type == "MAX_POOL_2D")
    src = q.tensors[pool.inputs[0]]
    q.tensors["moved"] = Tensor("moved", src.shape, "int8", src.quant)
    q.ops.insert(q.ops.index(pool), Op("QUANTIZE", [src.name], ["moved"], name="moved"))
    pool.inputs[0] = "moved"
    errors = layer_errors(g, q, _feeds(1))
    assert "moved" not in errors and errors[pool.outputs[0]].local_sqnr_db > 20
