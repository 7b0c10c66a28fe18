"""Per-client statistics in the DRM client usage-stats format, for both sides.

Linux Documentation/gpu/drm-usage-stats.rst defines the text a DRM driver prints in
/proc/<pid>/fdinfo/<fd>: one `key: value` per line, `drm-` keys standardised,
driver-specific keys prefixed with the driver name.  The driver renders the subset
the NPU exports (``render``, into <sysroot>/class/npu/npuN/clients/<id>); monitors
read it back the way nvtop or intel-npu-smi read fdinfo (``parse_usage_stats``:
tolerant of keys and lines it does not know, strict about the values it uses);
``parse`` is the strict reader (a malformed line is an error naming it):

    pid:                     <pid of the process that opened the context>
    comm:                    <its command name>
    drm-driver:              <valstr>
    drm-client-id:           <uint>           unique per open file
    drm-pdev:                <valstr>         the parent device (optional)
    drm-engine-<name>:       <uint> ns        busy time; may go backwards (readers keep the max)
    drm-engine-capacity-<name>: <uint>        identical engines in the group (optional, > 0)
    drm-<stat>-<region>:     <uint>[ KiB| MiB]  stat in total/shared/resident/purgeable/active
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MEMORY_STATS = ("total", "shared", "resident", "purgeable", "active")
_MULTIPLIER = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
# a decimal point only with a unit (group 2 set, group 3 the unit letter): "1.5G", not "1.5"
_SIZE = re.compile(r"(\d+(\.\d+)?)\s*(?:([kKmMgG])(?:i?[bB])?|[bB])?")
_KEYSTR = re.compile(r"[A-Za-z0-9_.]+\Z")  # no '-', ':' or whitespace, so keys stay unambiguous
_LINE = re.compile(r"([^\s:]+):\s*(.*)\Z")
_FIELDS = ("pid", "comm", "drm-driver", "drm-client-id", "drm-pdev")


class UsageStatsError(ValueError):
    """Text that is not valid usage-stats, or stats that cannot be rendered."""


@dataclass
class ClientStats:
    """One client's (one open file's) statistics."""

    driver: str
    client_id: int
    pid: int | None = None
    comm: str | None = None
    pdev: str | None = None
    engines: dict[str, int] = field(default_factory=dict)          # engine -> busy ns
    engine_capacity: dict[str, int] = field(default_factory=dict)  # engine -> count
    memory: dict[str, dict[str, int]] = field(default_factory=dict)  # region -> stat -> bytes
    extra: dict[str, str] = field(default_factory=dict)  # other keys, verbatim

    def memory_bytes(self, stat: str = "resident") -> int:
        """Sum of one memory stat over all regions (falls back to total when absent)."""
        return sum(values.get(stat, values.get("total", 0)) for values in self.memory.values())


UsageStats = ClientStats     # the name monitors use


def format_size(nbytes: int) -> str:
    """A byte count in the largest unit (KiB, MiB) that keeps it exact, as the kernel prints."""
    if nbytes < 0:
        raise UsageStatsError(f"negative size {nbytes}")
    for unit in ("", " KiB"):
        if nbytes == 0 or nbytes % 1024:
            return f"{nbytes}{unit}"
        nbytes //= 1024
    return f"{nbytes} MiB"


def parse_size(text: str) -> int:
    """Bytes from a size as the usage stats print it ('4 KiB') or as people type it on a
    command line ('4K', '512m', '1.5G', '1 GiB'); units are binary, a bare number is bytes."""
    m = _SIZE.fullmatch(text.strip())
    if not m or (m.group(2) and not m.group(3)):
        raise UsageStatsError(f"bad size {text!r} (want a byte count with an optional unit: 4096, 64K, 4 KiB, 1.5G)")
    return int(float(m.group(1)) * _MULTIPLIER[(m.group(3) or "").lower()])


def _keystr(kind: str, name: str) -> str:
    if not _KEYSTR.match(name):
        raise UsageStatsError(f"{kind} name {name!r} may not contain '-', ':' or whitespace")
    return name


def render(stats: ClientStats) -> str:
    """The usage-stats text for one client."""
    if not stats.driver or any(c.isspace() for c in stats.driver):
        raise UsageStatsError(f"bad drm-driver {stats.driver!r}")
    if stats.client_id < 0:
        raise UsageStatsError("drm-client-id must be unsigned")
    lines: list[str] = []
    if stats.pid is not None:
        lines.append(f"pid:\t{stats.pid}")
    if stats.comm is not None:
        if "\n" in stats.comm:
            raise UsageStatsError("comm contains a newline")
        lines.append(f"comm:\t{stats.comm}")
    lines.append(f"drm-driver:\t{stats.driver}")
    lines.append(f"drm-client-id:\t{stats.client_id}")
    if stats.pdev is not None:
        lines.append(f"drm-pdev:\t{stats.pdev}")
    for name, ns in stats.engines.items():
        if ns < 0:
            raise UsageStatsError(f"engine {name} busy time is negative")
        lines.append(f"drm-engine-{_keystr('engine', name)}:\t{ns} ns")
    for name, cap in stats.engine_capacity.items():
        if cap <= 0:
            raise UsageStatsError(f"engine {name} capacity must be > 0")
        lines.append(f"drm-engine-capacity-{_keystr('engine', name)}:\t{cap}")
    for region, values in stats.memory.items():
        for stat, nbytes in values.items():
            if stat not in MEMORY_STATS:
                raise UsageStatsError(f"unknown memory stat {stat!r} (one of {', '.join(MEMORY_STATS)})")
            lines.append(f"drm-{stat}-{_keystr('region', region)}:\t{format_size(nbytes)}")
    for key, value in stats.extra.items():
        if not _LINE.match(f"{key}: {value}") or "\n" in value:
            raise UsageStatsError(f"bad extra key/value {key!r}: {value!r}")
        lines.append(f"{key}:\t{value}")
    return "\n".join(lines) + "\n"


def _uint(key: str, text: str, lineno: int) -> int:
    if not text.isdigit():
        raise UsageStatsError(f"line {lineno}: {key} wants an unsigned integer, got {text!r}")
    return int(text)


def parse(text: str, *, strict: bool = True) -> ClientStats:
    """Parse usage-stats text (from ``render``, or a kernel fdinfo file).

    Strict, every line must be `key: value` and every known key well formed. Not
    strict (``parse_usage_stats``), lines that are not `key: value`, bad engine
    capacities and repeated fields are passed over, and a non-numeric pid reads as
    None; engine times, sizes and the client id must still be right."""
    fields: dict[str, str] = {}
    field_line: dict[str, int] = {}
    stats = ClientStats("", 0)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line.strip() if not strict else line)
        if not m:
            if strict:
                raise UsageStatsError(f"line {lineno}: not 'key: value': {line!r}")
            continue
        key, value = m.group(1), m.group(2).strip()
        if key.startswith("drm-engine-capacity-"):
            if not (value.isdigit() and int(value) > 0):
                if strict:
                    _uint(key, value, lineno)
                    raise UsageStatsError(f"line {lineno}: {key} must be > 0")
                continue
            stats.engine_capacity[key[len("drm-engine-capacity-"):]] = int(value)
        elif key.startswith("drm-engine-"):
            num, _, unit = value.partition(" ")
            if unit.strip() != "ns":
                raise UsageStatsError(f"line {lineno}: {key} must be '<uint> ns', got {value!r}")
            stats.engines[key[len("drm-engine-"):]] = _uint(key, num, lineno)
        elif key.startswith("drm-") and key.count("-") >= 2 and key.split("-")[1] in MEMORY_STATS:
            stat, region = key[4:].split("-", 1)
            try:
                stats.memory.setdefault(region, {})[stat] = parse_size(value)
            except UsageStatsError as exc:
                raise UsageStatsError(f"line {lineno}: {key}: {exc}") from None
        elif key in _FIELDS:
            if key in fields and strict:
                raise UsageStatsError(f"line {lineno}: {key} given twice")
            fields[key], field_line[key] = value, lineno
        else:
            stats.extra[key] = value
    if "drm-driver" not in fields:
        raise UsageStatsError("not DRM usage-stats: missing mandatory drm-driver")
    if "drm-client-id" not in fields:
        raise UsageStatsError("not DRM usage-stats: missing drm-client-id")
    stats.driver = fields["drm-driver"]
    stats.client_id = _uint("drm-client-id", fields["drm-client-id"], field_line["drm-client-id"])
    pid = fields.get("pid")
    if pid is not None and (strict or pid.isdigit()):
        stats.pid = _uint("pid", pid, field_line["pid"])
    stats.comm, stats.pdev = fields.get("comm"), fields.get("drm-pdev")
    return stats


def parse_usage_stats(text: str) -> ClientStats:
    """A monitor's reading of one client's stats: unknown keys and lines are passed over."""
    return parse(text, strict=False)
