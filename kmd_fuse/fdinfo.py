"""Per-client statistics in the DRM client usage-stats format.

Linux Documentation/gpu/drm-usage-stats.rst defines the text a DRM driver prints in
/proc/<pid>/fdinfo/<fd>: one `key: value` per line, `drm-` keys standardised,
driver-specific keys prefixed with the driver name. This module renders the subset
the NPU exports and parses it back (strictly: a malformed line is an error naming it):

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
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_KEYSTR = re.compile(r"[A-Za-z0-9_.]+\Z")  # no '-', ':' or whitespace, so keys stay unambiguous
_LINE = re.compile(r"([^\s:]+):\s*(.*)\Z")


class FdinfoError(ValueError):
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


def format_size(nbytes: int) -> str:
    """A byte count in the largest unit (KiB, MiB) that keeps it exact, as the kernel prints."""
    if nbytes < 0:
        raise FdinfoError(f"negative size {nbytes}")
    for unit in ("", " KiB"):
        if nbytes == 0 or nbytes % 1024:
            return f"{nbytes}{unit}"
        nbytes //= 1024
    return f"{nbytes} MiB"


def parse_size(text: str) -> int:
    """'4 KiB' -> 4096; a bare number is bytes."""
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text.strip())
    if not m or m.group(2) not in _UNITS:
        raise FdinfoError(f"bad size {text!r} (want <uint> with optional KiB/MiB)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def _keystr(kind: str, name: str) -> str:
    if not _KEYSTR.match(name):
        raise FdinfoError(f"{kind} name {name!r} may not contain '-', ':' or whitespace")
    return name


def render(stats: ClientStats) -> str:
    """The usage-stats text for one client."""
    if not stats.driver or any(c.isspace() for c in stats.driver):
        raise FdinfoError(f"bad drm-driver {stats.driver!r}")
    if stats.client_id < 0:
        raise FdinfoError("drm-client-id must be unsigned")
    lines: list[str] = []
    if stats.pid is not None:
        lines.append(f"pid:\t{stats.pid}")
    if stats.comm is not None:
        if "\n" in stats.comm:
            raise FdinfoError("comm contains a newline")
        lines.append(f"comm:\t{stats.comm}")
    lines.append(f"drm-driver:\t{stats.driver}")
    lines.append(f"drm-client-id:\t{stats.client_id}")
    if stats.pdev is not None:
        lines.append(f"drm-pdev:\t{stats.pdev}")
    for name, ns in stats.engines.items():
        if ns < 0:
            raise FdinfoError(f"engine {name} busy time is negative")
        lines.append(f"drm-engine-{_keystr('engine', name)}:\t{ns} ns")
    for name, cap in stats.engine_capacity.items():
        if cap <= 0:
            raise FdinfoError(f"engine {name} capacity must be > 0")
        lines.append(f"drm-engine-capacity-{_keystr('engine', name)}:\t{cap}")
    for region, values in stats.memory.items():
        for stat, nbytes in values.items():
            if stat not in MEMORY_STATS:
                raise FdinfoError(f"unknown memory stat {stat!r} (one of {', '.join(MEMORY_STATS)})")
            lines.append(f"drm-{stat}-{_keystr('region', region)}:\t{format_size(nbytes)}")
    for key, value in stats.extra.items():
        if not _LINE.match(f"{key}: {value}") or "\n" in value:
            raise FdinfoError(f"bad extra key/value {key!r}: {value!r}")
        lines.append(f"{key}:\t{value}")
    return "\n".join(lines) + "\n"


def _uint(key: str, text: str, lineno: int) -> int:
    if not text.isdigit():
        raise FdinfoError(f"line {lineno}: {key} wants an unsigned integer, got {text!r}")
    return int(text)


def parse(text: str) -> ClientStats:
    """Parse usage-stats text (from `render`, or a kernel fdinfo file)."""
    fields: dict[str, str] = {}
    field_line: dict[str, int] = {}
    engines: dict[str, int] = {}
    capacity: dict[str, int] = {}
    memory: dict[str, dict[str, int]] = {}
    extra: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise FdinfoError(f"line {lineno}: not 'key: value': {line!r}")
        key, value = m.group(1), m.group(2).strip()
        if key.startswith("drm-engine-capacity-"):
            cap = _uint(key, value, lineno)
            if cap == 0:
                raise FdinfoError(f"line {lineno}: {key} must be > 0")
            capacity[key[len("drm-engine-capacity-"):]] = cap
        elif key.startswith("drm-engine-"):
            num, _, unit = value.partition(" ")
            if unit.strip() != "ns":
                raise FdinfoError(f"line {lineno}: {key} must be '<uint> ns', got {value!r}")
            engines[key[len("drm-engine-"):]] = _uint(key, num, lineno)
        elif key.startswith("drm-") and key.split("-")[1] in MEMORY_STATS and key.count("-") >= 2:
            stat, region = key[4:].split("-", 1)
            try:
                memory.setdefault(region, {})[stat] = parse_size(value)
            except FdinfoError as exc:
                raise FdinfoError(f"line {lineno}: {key}: {exc}") from None
        elif key in ("pid", "comm", "drm-driver", "drm-client-id", "drm-pdev"):
            if key in fields:
                raise FdinfoError(f"line {lineno}: {key} given twice")
            fields[key], field_line[key] = value, lineno
        else:
            extra[key] = value
    if "drm-driver" not in fields:
        raise FdinfoError("missing mandatory drm-driver")
    if "drm-client-id" not in fields:
        raise FdinfoError("missing drm-client-id")
    pid = fields.get("pid")
    return ClientStats(
        driver=fields["drm-driver"],
        client_id=_uint("drm-client-id", fields["drm-client-id"], field_line["drm-client-id"]),
        pid=None if pid is None else _uint("pid", pid, field_line["pid"]),
        comm=fields.get("comm"), pdev=fields.get("drm-pdev"),
        engines=engines, engine_capacity=capacity, memory=memory, extra=extra)
