"""The trace's pictures when one job's layers ran on several cores (a task graph): a track per
core a layer ran on, even a core that ran no job of its own."""
from __future__ import annotations

from libnpu.tools.timeline import chrome_trace, timeline_png

JOB = {"type": "job", "context": 1, "fence": 7, "core": 0, "pid": 42, "comm": "app", "priority": 1, "status": 0,
       "submit_ns": 1_000, "start_ns": 2_000, "end_ns": 9_000, "signal_ns": 9_500, "cycles": 300,
       "device_time_ns": 300, "tasks": 2}


def _layer(index: int, core: int, start: int, end: int) -> dict:
    return {"type": "task", "context": 1, "fence": 7, "core": core, "index": index, "opcode": 0x10,
            "name": "CONV_2D", "start_ns": start, "end_ns": end, "cycles": 150}


def test_a_layer_on_a_core_without_a_job_of_its_own(tmp_path):
    events = [JOB, _layer(0, 0, 2_000, 5_000), _layer(1, 1, 5_000, 8_000)]
    trace = chrome_trace(events)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["pid"] == 1 and "tid" in e}
    assert names[0] == "core 0" and names[1] == "core 1"
    assert {e["tid"] for e in trace if e["ph"] == "X" and e.get("cat") == "layer"} == {0, 1}
    png = timeline_png(events, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
