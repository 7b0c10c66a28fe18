"""Reader of DRM client usage-stats text (Documentation/gpu/drm-usage-stats.rst).

The monitoring side (npu smi/top) reads what the driver renders, the way nvtop or
intel-npu-smi read /proc/<pid>/fdinfo: tolerant of keys it does not know, strict
about the values it uses. It lives in libnpu because libnpu may not import the
driver; tests check that it reads exactly what kmd_fuse.fdinfo writes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_MEMORY_STATS = ("total", "shared", "resident", "purgeable", "active")


class UsageStatsError(ValueError):
    """The text is not usable DRM usage-stats."""


@dataclass
class UsageStats:
    """What a monitor needs from one client's stats."""

    driver: str
    client_id: int
    pid: int | None = None
    comm: str | None = None
    engines: dict[str, int] = field(default_factory=dict)          # busy ns
    engine_capacity: dict[str, int] = field(default_factory=dict)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)  # region -> stat -> bytes

    def memory_bytes(self, stat: str = "resident") -> int:
        """Sum of one memory stat over all regions (falls back to total when absent)."""
        total = 0
        for values in self.memory.values():
            total += values.get(stat, values.get("total", 0))
        return total


def _size(text: str, key: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text)
    if not m or m.group(2) not in _UNITS:
        raise UsageStatsError(f"{key}: bad size {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_usage_stats(text: str) -> UsageStats:
    """Parse one client's usage-stats text; unknown keys are ignored."""
    values: dict[str, str] = {}
    engines: dict[str, int] = {}
    capacity: dict[str, int] = {}
    memory: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if key.startswith("drm-engine-capacity-"):
            if value.isdigit() and int(value) > 0:
                capacity[key[20:]] = int(value)
        elif key.startswith("drm-engine-"):
            num, _, unit = value.partition(" ")
            if not num.isdigit() or unit.strip() != "ns":
                raise UsageStatsError(f"{key}: want '<uint> ns', got {value!r}")
            engines[key[11:]] = int(num)
        elif key.startswith("drm-") and key.count("-") >= 2 and key.split("-")[1] in _MEMORY_STATS:
            stat, region = key[4:].split("-", 1)
            memory.setdefault(region, {})[stat] = _size(value, key)
        else:
            values[key] = value
    if "drm-driver" not in values or not values.get("drm-client-id", "").isdigit():
        raise UsageStatsError("not DRM usage-stats: drm-driver or drm-client-id missing")
    pid = values.get("pid", "")
    return UsageStats(values["drm-driver"], int(values["drm-client-id"]),
                      int(pid) if pid.isdigit() else None, values.get("comm"),
                      engines, capacity, memory)
