"""The corpus benchmark's per-half figures (benchmarks/corpus_bench.summarize): pure logic, no device."""
from __future__ import annotations

from benchmarks.corpus_bench import BenchResult, format_row, format_summary, summarize


def _measured(name: str, half: str, reference: str, npu: float, cpu: float, identical: bool | None = None):
    return BenchResult(name, half, "tflite" if reference == "xnnpack" else "onnx", "int8", reference,
                       npu, cpu, round(npu / cpu, 3), identical)


RESULTS = [
    _measured("a", "held-out", "xnnpack", 300.0, 100.0, True),       # 3x
    _measured("b", "held-out", "xnnpack", 50.0, 10.0, False),        # 5x
    _measured("c", "held-out", "xnnpack", 18.0, 6.0, True),          # 3x, tiny, within 20 us
    _measured("d", "held-out", "onnxruntime", 900.0, 100.0),         # 9x, not in the XNNPACK figures
    _measured("e", "held-out", "xnnpack", 45.0, 9.0),                # 5x, tiny, over 20 us
    BenchResult("f", "held-out", "onnx", reason="compile: unsupported"),
    _measured("w", "work", "xnnpack", 100.0, 100.0),
]


def test_ratios_per_half_exclude_failures_and_onnx_from_the_xnnpack_figure():
    s = summarize(RESULTS, "held-out")
    assert (s["models"], s["measured"], s["failed"]) == (6, 5, 1)
    assert s["xnnpack"] == {"models": 4, "median": 4.0, "worst": 5.0, "worst_model": "b"}
    assert s["all"] == {"models": 5, "median": 5.0, "worst": 9.0, "worst_model": "d"}
    assert s["int8_identical"] == "2/3"
    assert [(t["name"], t["within"]) for t in s["tiny"]] == [("c", True), ("e", False)]
    assert summarize(RESULTS, "work")["xnnpack"]["median"] == 1.0


def test_the_table_names_failures_with_their_reason_and_marks_tiny_models_over_the_bar():
    assert "FAILED  compile: unsupported" in format_row(RESULTS[5])
    assert "NO" in format_row(RESULTS[1]) and "3.00x" in format_row(RESULTS[0])
    text = "\n".join(format_summary(summarize(RESULTS, "held-out")))
    assert "median 4.00x, worst 5.00x (b)" in text and "e 9.0 -> 45.0 us (over)" in text
    empty = summarize([RESULTS[5]], "held-out")
    assert empty["xnnpack"]["median"] is None and "no model measured" in "\n".join(format_summary(empty))


def test_summaries_split_by_corpus_round():
    results = RESULTS + [BenchResult("n", "held-out", "tflite", "int8", "xnnpack", 70.0, 10.0, 7.0, True, round=3)]
    third = summarize(results, "held-out", 3)
    assert third["half"] == "round3 held-out"
    assert third["xnnpack"] == {"models": 1, "median": 7.0, "worst": 7.0, "worst_model": "n"}
    assert summarize(results, "held-out", 2) == {**summarize(RESULTS, "held-out"), "half": "round2 held-out"}
    assert summarize(results, "held-out")["measured"] == 6           # every round
    assert format_row(results[-1]).split()[:3] == ["held-out", "3", "n"]
