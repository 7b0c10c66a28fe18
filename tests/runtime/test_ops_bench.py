"""``npu bench ops`` (libnpu.ops_bench) on a live device: single layers through the chip,
byte-identical to LiteRT BUILTIN_REF, timed next to LiteRT."""
from __future__ import annotations

import json

import numpy as np
import pytest

from libnpu import ops_bench

pytest.importorskip("ai_edge_litert.interpreter")


def test_quick_layers_match_litert_and_report_json(npu, capsys):
    assert ops_bench.main(["--quick", "--repeat", "2", "--json", "--devroot", str(npu.devroot)]) == 0
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
    assert report["totals"]["macs"] == sum(layer.macs for layer in ops_bench.QUICK)


def test_text_report_and_device_only(npu, capsys):
    layers = [ops_bench.Layer("pw 8", "conv", 8, 16, 24), ops_bench.Layer("fc 2x40->7", "fc", 2, 40, 7)]
    report = ops_bench.bench_ops(layers, repeat=1, devroot=npu.devroot, litert=False)
    assert "litert_skipped" in report and "builtin_ref_ms" not in report["layers"][0]
    text = ops_bench.format_report(report)
    assert text.splitlines()[0].split()[:4] == ["layer", "MMACs", "npu", "ms"]
    assert "pw 8" in text and "total" in text and "skipped" in text


def test_layer_graphs_lower_to_one_task_each():
    from libnpu.compiler.lower import lower
    rng = np.random.default_rng(0)
    for layer in ops_bench.QUICK:
        graph = ops_bench.build_graph(layer, rng)
        loadable = lower(graph)
        assert [t.op for t in loadable.tasks] == [graph.ops[0].type]
        assert loadable.tasks[0].macs == layer.macs


def test_bad_arguments(npu, capsys):
    with pytest.raises(SystemExit):
        ops_bench.main(["--repeat", "0", "--devroot", str(npu.devroot)])
    assert "--repeat must be at least 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="kind"):
        ops_bench.Layer("x", "pool", 8, 8, 8)
    with pytest.raises(ValueError, match="channel"):
        ops_bench.Layer("x", "dw", 8, 8, 16)


def test_missing_device_is_a_clean_error(tmp_path, capsys):
    assert ops_bench.main(["--quick", "--devroot", str(tmp_path)]) == 1
    assert "npu bench ops: device error" in capsys.readouterr().err
