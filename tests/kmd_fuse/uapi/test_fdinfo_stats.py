"""DRM usage-stats (kmd_fuse.uapi.usage_stats): the driver renders, the strict parser and
the monitors' tolerant reader read the same text."""
from __future__ import annotations

import pytest

from kmd_fuse.uapi.usage_stats import (
    ClientStats,
    UsageStatsError,
    format_size,
    parse,
    parse_size,
    parse_usage_stats,
    render,
)


def full_stats() -> ClientStats:
    return ClientStats(driver="npu_emu", client_id=17, pid=4242, comm="python3 infer.py",
                       pdev="platform:npu-emu.0", engines={"npu": 1_234_567_890},
                       engine_capacity={"npu": 4},
                       memory={"npu": {"total": 3 << 20, "shared": 0, "resident": 3 << 20, "active": 1536}},
                       extra={"npu_emu-jobs-completed": "12"})


def test_render_layout_matches_the_document() -> None:
    assert render(full_stats()).splitlines() == [
        "pid:\t4242", "comm:\tpython3 infer.py", "drm-driver:\tnpu_emu", "drm-client-id:\t17",
        "drm-pdev:\tplatform:npu-emu.0", "drm-engine-npu:\t1234567890 ns", "drm-engine-capacity-npu:\t4",
        "drm-total-npu:\t3 MiB", "drm-shared-npu:\t0", "drm-resident-npu:\t3 MiB",
        "drm-active-npu:\t1536", "npu_emu-jobs-completed:\t12"]


def test_round_trip() -> None:
    stats = full_stats()
    assert parse(render(stats)) == stats
    minimal = ClientStats("npu_emu", 0)
    assert render(minimal) == "drm-driver:\tnpu_emu\ndrm-client-id:\t0\n"
    assert parse(render(minimal)) == minimal


@pytest.mark.parametrize("nbytes, text", [
    (0, "0"), (1, "1"), (1023, "1023"), (1024, "1 KiB"), (1536, "1536"), (4096, "4 KiB"),
    (1 << 20, "1 MiB"), (5 << 30, "5120 MiB"), ((1 << 20) + 1024, "1025 KiB"),
])
def test_sizes_use_the_largest_exact_unit(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text, nbytes", [("64K", 64 << 10), ("4kb", 4096), ("512m", 512 << 20), ("1.5G", 3 << 29),
                                          ("2 GiB", 2 << 30), ("100b", 100)])
def test_the_one_size_parser_reads_what_people_type(text: str, nbytes: int) -> None:
    """The daemon's --memory, npu-kmd's checks and the usage stats share this parser."""
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["1.5", "-1", "1e3", "G", "4 KX", ""])
def test_a_size_without_meaning_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="bad size"):
        parse_size(text)


def test_parser_accepts_kernel_style_whitespace_and_other_keys() -> None:
    text = ("pos:    0\nflags:  02100002\nmnt_id: 24\ndrm-driver:  i915\ndrm-client-id:   7\n"
            "drm-engine-render: 25662044495 ns\ndrm-engine-copy:   0 ns\ndrm-total-system0:  5 MiB\n"
            "drm-memory-vram:  3 KiB\ndrm-cycles-render: 100\n")
    stats = parse(text)
    assert stats.driver == "i915" and stats.client_id == 7 and stats.pid is None
    assert stats.engines == {"render": 25662044495, "copy": 0}
    assert stats.memory == {"system0": {"total": 5 << 20}}
    assert stats.extra["drm-memory-vram"] == "3 KiB" and stats.extra["pos"] == "0"


@pytest.mark.parametrize("text, message", [
    ("drm-client-id: 1\n", "missing mandatory drm-driver"),
    ("drm-driver: x\n", "missing drm-client-id"),
    ("drm-driver: x\ndrm-client-id: -1\n", "line 2: drm-client-id wants an unsigned integer"),
    ("drm-driver: x\ndrm-client-id: 1\npid: abc\n", "line 3: pid wants an unsigned integer"),
    ("drm-driver: x\ndrm-client-id: 1\ndrm-engine-npu: 5 us\n", "line 3: drm-engine-npu must be '<uint> ns'"),
    ("drm-driver: x\ndrm-client-id: 1\ndrm-engine-npu: 5\n", "must be '<uint> ns'"),
    ("drm-driver: x\ndrm-client-id: 1\ndrm-engine-capacity-npu: 0\n", "line 3: drm-engine-capacity-npu must be > 0"),
    ("drm-driver: x\ndrm-client-id: 1\ndrm-total-npu: 4 kiloB\n", "line 3: drm-total-npu: bad size"),
    ("drm-driver: x\nno colon here\n", "line 2: not 'key: value'"),
    ("drm-driver: x\ndrm-driver: y\ndrm-client-id: 1\n", "line 2: drm-driver given twice"),
])
def test_parse_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(UsageStatsError, match=message.replace("(", r"\(")):
        parse(text)


@pytest.mark.parametrize("stats, message", [
    (ClientStats("npu emu", 1), "bad drm-driver"),
    (ClientStats("npu", -1), "unsigned"),
    (ClientStats("npu", 1, engines={"np-u": 1}), "may not contain '-'"),
    (ClientStats("npu", 1, engines={"npu": -5}), "negative"),
    (ClientStats("npu", 1, engine_capacity={"npu": 0}), "capacity must be > 0"),
    (ClientStats("npu", 1, memory={"npu": {"used": 1}}), "unknown memory stat 'used'"),
    (ClientStats("npu", 1, memory={"n pu": {"total": 1}}), "region name"),
    (ClientStats("npu", 1, memory={"npu": {"total": -1}}), "negative size"),
    (ClientStats("npu", 1, comm="a\nb"), "comm contains a newline"),
    (ClientStats("npu", 1, extra={"bad key": "v"}), "bad extra key"),
])
def test_render_refuses_what_cannot_be_parsed_back(stats: ClientStats, message: str) -> None:
    with pytest.raises(UsageStatsError, match=message):
        render(stats)


def test_libnpu_reader_reads_what_the_driver_renders() -> None:
    stats = full_stats()
    read = parse_usage_stats(render(stats))
    assert (read.driver, read.client_id, read.pid, read.comm) == ("npu_emu", 17, 4242, "python3 infer.py")
    assert read.engines == stats.engines and read.engine_capacity == stats.engine_capacity
    assert read.memory == stats.memory
    assert read.memory_bytes("resident") == 3 << 20
    only_total = parse_usage_stats(render(ClientStats("npu_emu", 2, memory={"a": {"total": 2048}, "b": {"total": 1}})))
    assert only_total.memory_bytes("resident") == 2049  # falls back to total per region


@pytest.mark.parametrize("text", [
    "drm-client-id: 1\n", "drm-driver: x\ndrm-client-id: one\n",
    "drm-driver: x\ndrm-client-id: 1\ndrm-engine-npu: 3 ms\n",
    "drm-driver: x\ndrm-client-id: 1\ndrm-resident-npu: lots\n",
])
def test_libnpu_reader_rejects_unusable_text(text: str) -> None:
    with pytest.raises(UsageStatsError):
        parse_usage_stats(text)
