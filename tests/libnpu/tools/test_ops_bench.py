"""``npu bench ops`` (libnpu.tools.ops_bench) on a live device: single layers through the chip,
byte-identical to LiteRT BUILTIN_REF, timed next to LiteRT and onnxruntime (whose output
is within one LSB of BUILTIN_REF's)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from libnpu.tools import ops_bench
from libnpu.tools.cli import main

pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def test_quick_layers_match_litert_and_report_json(npu, capsys):
    assert main(["bench", "ops", "--quick", "--repeat", "2", "--json", "--devroot", str(npu.devroot)]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["layers"]
    assert [r["name"] for r in rows] == [layer.name for layer in ops_bench.QUICK]
    assert {r["kind"] for r in rows} == {"conv", "dw", "fc"}
    assert any(r["kind"] == "dw" and r["stride"] == 2 for r in rows)
    for r, layer in zip(rows, ops_bench.QUICK):
        assert r["matches_builtin_ref"] is True, r["name"]
        assert r["macs"] == layer.macs > 0
        for key in ("npu_ms", "builtin_ref_ms", "xnnpack_ms", "device_time_ms"):
            assert r[key] > 0, (r["name"], key)
        assert r["ref_over_npu"] == pytest.approx(r["builtin_ref_ms"] / r["npu_ms"], rel=1e-2, abs=1e-3)
        # the chip's share of each timed job: measured (busy time), within the end-to-end
        # time (with 2 repeats the median is the mean, so the bound is exact)
        assert 0 < r["chip_ms"] <= r["npu_ms"], r
        assert r["ref_over_chip"] == pytest.approx(r["builtin_ref_ms"] / r["chip_ms"], rel=1e-2, abs=1e-3)
        # onnxruntime rounds its float requantization differently: at most one LSB apart
        assert r["ort_ms"] > 0 and r["ort_max_diff_lsb"] in (0, 1), r
        assert r["ort_over_npu"] == pytest.approx(r["ort_ms"] / r["npu_ms"], rel=1e-2, abs=1e-3)
    assert report["totals"]["macs"] == sum(layer.macs for layer in ops_bench.QUICK)
    assert report["ort_diff_against"] == "builtin_ref" and "ort_skipped" not in report
    assert report["totals"]["ort_max_diff_lsb"] == max(r["ort_max_diff_lsb"] for r in rows)


def test_ort_model_matches_builtin_ref_within_one_lsb(tmp_path):
    """Depthwise (group=C) and conv models at shapes outside QUICK (odd sizes, 5x5/2, batch-3 FC):
    a wrong weight layout, pad order or scale would be off by many LSBs."""
    from libnpu.compiler.tflite_export import export_tflite
    from libnpu.tools.ops_bench_ort import OrtLayer
    rng = np.random.default_rng(7)
    layers = [ops_bench.Layer("dw 13/2 5x5", "dw", 13, 24, 24, 5, 2),
              ops_bench.Layer("conv 11 3x3", "conv", 11, 5, 7, 3, 1),
              ops_bench.Layer("fc 3x70->9", "fc", 3, 70, 9)]
    for layer in layers:
        graph = ops_bench.build_graph(layer, rng)
        x = rng.integers(-128, 128, graph.tensors["x"].shape, dtype=np.int8)
        path = tmp_path / "layer.tflite"
        path.write_bytes(export_tflite(graph))
        ref = ops_bench._litert(path, True)(x)
        outputs = {}
        for activations in ("uint8", "int8"):
            ort = OrtLayer(graph, activations)
            got = ort.as_int8(ort.run(ort.feed(x)))
            assert got.shape == ref.shape and got.dtype == np.int8
            diff = np.abs(got.astype(np.int16) - ref)
            assert diff.max() <= 1, (layer.name, activations)
            assert np.mean(diff) < 0.05, (layer.name, activations)  # rare rounding differences, no bias
            outputs[activations] = got
        # the uint8 model is the int8 one with zero points moved by 128: the same results
        np.testing.assert_array_equal(outputs["uint8"], outputs["int8"])
        assert np.mean((ref > -128) & (ref < 127)) > 0.5, layer.name  # not saturated: a real check


def test_text_report_and_device_only(npu, capsys):
    layers = [ops_bench.Layer("pw 8", "conv", 8, 16, 24), ops_bench.Layer("fc 2x40->7", "fc", 2, 40, 7)]
    report = ops_bench.bench_ops(layers, repeat=1, devroot=npu.devroot, litert=False, ort=False)
    assert "litert_skipped" in report and "builtin_ref_ms" not in report["layers"][0]
    assert report["ort_skipped"] == "--no-ort" and "ort_ms" not in report["layers"][0]
    text = ops_bench.format_report(report)
    assert text.splitlines()[0].split()[:4] == ["layer", "MMACs", "npu", "ms"]
    assert "pw 8" in text and "total" in text and "onnxruntime: skipped (--no-ort)" in text


def test_ort_without_litert_is_compared_with_the_device(npu):
    layers = [ops_bench.Layer("dw 9", "dw", 9, 16, 16, 3, 1), ops_bench.Layer("fc 2x40->7", "fc", 2, 40, 7)]
    report = ops_bench.bench_ops(layers, repeat=1, devroot=npu.devroot, litert=False, ort_activations="int8")
    assert report["ort_diff_against"] == "npu" and report["ort_activations"] == "int8"
    assert [r["ort_max_diff_lsb"] <= 1 for r in report["layers"]] == [True, True]
    text = ops_bench.format_report(report)
    assert text.splitlines()[0].split()[-5:] == ["ort", "ms", "ort/npu", "ort", "LSB"]
    assert "|ort - the device|" in text and "int8 activations" in text and "LiteRT: skipped" in text


def test_layer_graphs_lower_to_one_task_each():
    from libnpu.compiler.lower import lower
    rng = np.random.default_rng(0)
    for layer in ops_bench.QUICK:
        graph = ops_bench.build_graph(layer, rng)
        loadable = lower(graph)
        assert [t.op for t in loadable.tasks] == [graph.ops[0].type]
        assert loadable.tasks[0].macs == layer.macs


def test_bad_arguments(npu, capsys):
    assert main(["bench", "ops", "--repeat", "0", "--devroot", str(npu.devroot)]) == 2
    assert "--repeat must be at least 1" in capsys.readouterr().err
    assert main(["bench", "ops", "--ort-activations", "int4", "--devroot", str(npu.devroot)]) == 2
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="uint8 or int8"):
        ops_bench.bench_ops(ops_bench.QUICK, devroot=npu.devroot, ort_activations="float")
    with pytest.raises(ValueError, match="kind"):
        ops_bench.Layer("x", "pool", 8, 8, 8)
    with pytest.raises(ValueError, match="channel"):
        ops_bench.Layer("x", "dw", 8, 8, 16)


def test_missing_device_is_a_clean_error(tmp_path, capsys):
    assert main(["bench", "ops", "--quick", "--devroot", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("npu bench ops: error: no device ") and f"npu-kmd start --devroot {tmp_path}" in err


def test_ort_model_rejects_what_it_cannot_express():
    from libnpu.compiler.ir import Graph
    from libnpu.tools.ops_bench_ort import OrtLayer, onnx_layer_model
    graph = ops_bench.build_graph(ops_bench.Layer("pw 4", "conv", 4, 8, 8), np.random.default_rng(0))
    with pytest.raises(ValueError, match="uint8 or int8"):
        onnx_layer_model(graph, "int16")
    with pytest.raises(ValueError, match="exactly one op"):
        onnx_layer_model(Graph("empty"))
    graph.ops[0].attrs["activation"] = "RELU"
    with pytest.raises(ValueError, match="fused activation"):
        onnx_layer_model(graph)
    graph.ops[0].attrs["activation"] = "NONE"
    with pytest.raises(TypeError, match="int8"):
        OrtLayer(graph).feed(np.zeros((1, 4, 4, 8), np.float32))
