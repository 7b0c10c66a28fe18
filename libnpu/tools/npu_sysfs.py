"""Reading NPU state the way monitoring tools do: sysfs attributes, client stats, /proc.

Layout read (served by the driver; plain files work the same):

    <sysroot>/class/npu/npu<N>/{dev,model,abi_version,cores,clock_mhz,memory_total_bytes,
        memory_used_bytes,busy_time_us,jobs_completed,jobs_failed,reset_count,uevent}
    <sysroot>/class/npu/npu<N>/clients/<client_id>   DRM usage-stats text with pid/comm

Processes using a device are found like nvtop does: /proc/<pid>/fd links that point
at the device node. `Sampler` takes snapshots and keeps the larger value of counters
that go backwards; `summarize` turns two snapshots into utilization and per-process rows.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kmd_fuse.uapi import DRIVER_GONE
from kmd_fuse.uapi.sysfs_layout import SYSROOT_MARKER, class_dir, default_sysroot  # noqa: F401 (tools import them from here)
from kmd_fuse.uapi.usage_stats import UsageStats, UsageStatsError, parse_usage_stats

INT_ATTRS = ("cores", "clock_mhz", "memory_total_bytes", "memory_used_bytes", "busy_time_us",
             "jobs_completed", "jobs_failed", "reset_count")
STR_ATTRS = ("dev", "model", "abi_version")


class SysfsError(Exception):
    """An attribute tree that is missing, unreadable or malformed."""


@dataclass
class DeviceState:
    """One device's attributes and clients at one moment."""

    name: str
    index: int
    node: str
    attrs: dict[str, Any]
    uevent: dict[str, str]
    clients: dict[int, UsageStats] = field(default_factory=dict)


@dataclass
class ProcInfo:
    """A process holding the device node open."""

    pid: int
    comm: str
    fds: int


@dataclass
class Snapshot:
    """Everything sampled at time `t` (CLOCK_MONOTONIC seconds)."""

    t: float
    devices: list[DeviceState]
    procs: dict[str, dict[int, ProcInfo]]  # device name -> pid -> ProcInfo


def list_devices(sysroot: str) -> list[str]:
    """Device names under <sysroot>/class/npu, by index (npu0, npu1, ..., npu10)."""
    try:
        names = os.listdir(class_dir(sysroot))
    except FileNotFoundError:
        return []
    return sorted((n for n in names if re.fullmatch(r"npu\d+", n)), key=lambda n: int(n[3:]))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        gone = " (the driver that serves it is down: npu-kmd status)" if exc.errno in DRIVER_GONE else ""
        raise SysfsError(f"cannot read {path}: {exc.strerror}{gone}") from None


def read_device(sysroot: str, name: str, devroot: str) -> DeviceState:
    """Read one device's attributes and clients; SysfsError names a bad file."""
    base = os.path.join(class_dir(sysroot), name)
    attrs: dict[str, Any] = {}
    for attr in STR_ATTRS:
        attrs[attr] = _read(os.path.join(base, attr)).strip()
    for attr in INT_ATTRS:
        text = _read(os.path.join(base, attr)).strip()
        if not text.isdigit():
            raise SysfsError(f"{os.path.join(base, attr)}: want an unsigned integer, got {text!r}")
        attrs[attr] = int(text)
    uevent: dict[str, str] = {}
    for line in _read(os.path.join(base, "uevent")).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            uevent[key] = value
    node = os.path.join(devroot, uevent.get("DEVNAME", name).lstrip("/"))
    return DeviceState(name, int(name[3:]), node, attrs, uevent, read_clients(base))


def read_clients(devdir: str) -> dict[int, UsageStats]:
    """The usage stats of every client of a device (clients closing meanwhile are skipped)."""
    cdir = os.path.join(devdir, "clients")
    try:
        entries = os.listdir(cdir)
    except FileNotFoundError:
        return {}
    out: dict[int, UsageStats] = {}
    for entry in entries:
        path = os.path.join(cdir, entry)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (FileNotFoundError, IsADirectoryError):
            continue
        try:
            stats = parse_usage_stats(text)
        except UsageStatsError as exc:
            raise SysfsError(f"{path}: {exc}") from None
        out[stats.client_id] = stats
    return out


def scan_processes(nodes: dict[str, str], procroot: str = "/proc") -> dict[str, dict[int, ProcInfo]]:
    """Processes with an fd on a device node: nodes maps node path -> device name."""
    want: dict[str, str] = {}
    for path, dev in nodes.items():
        want[path] = dev
        want[os.path.realpath(path)] = dev
    found: dict[str, dict[int, ProcInfo]] = {dev: {} for dev in nodes.values()}
    try:
        pids = [p for p in os.listdir(procroot) if p.isdigit()]
    except FileNotFoundError:
        return found
    for pid_s in pids:
        fd_dir = os.path.join(procroot, pid_s, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or another user's process
            continue
        counts: dict[str, int] = {}
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            dev = want.get(target)
            if dev is not None:
                counts[dev] = counts.get(dev, 0) + 1
        if not counts:
            continue
        try:
            with open(os.path.join(procroot, pid_s, "comm"), encoding="utf-8", errors="replace") as f:
                comm = f.read().strip()
        except OSError:
            comm = "?"
        for dev, n in counts.items():
            found[dev][int(pid_s)] = ProcInfo(int(pid_s), comm, n)
    return found


class Sampler:
    """Takes snapshots; counters that went backwards keep their larger earlier value."""

    def __init__(self, sysroot: str, devroot: str = "/dev", procroot: str = "/proc",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sysroot, self.devroot, self.procroot, self.clock = sysroot, devroot, procroot, clock
        self._busy_max: dict[str, int] = {}
        self._engine_max: dict[tuple[str, int, str], int] = {}

    def sample(self, only: set[int] | None = None) -> Snapshot:
        """Read every device (or the indexes in `only`), its clients and its processes."""
        devices = [read_device(self.sysroot, n, self.devroot) for n in list_devices(self.sysroot)
                   if only is None or int(n[3:]) in only]
        t = self.clock()
        for dev in devices:
            busy = max(dev.attrs["busy_time_us"], self._busy_max.get(dev.name, 0))
            dev.attrs["busy_time_us"] = self._busy_max[dev.name] = busy
            for cid, stats in dev.clients.items():
                for eng, ns in stats.engines.items():
                    key = (dev.name, cid, eng)
                    stats.engines[eng] = self._engine_max[key] = max(ns, self._engine_max.get(key, 0))
        procs = scan_processes({d.node: d.name for d in devices}, self.procroot)
        return Snapshot(t, devices, procs)


def _pct(delta: float, span: float) -> float:
    return round(min(100.0, max(0.0, 100.0 * delta / span)), 1) if span > 0 else 0.0


def summarize(prev: Snapshot | None, cur: Snapshot) -> list[dict[str, Any]]:
    """Per-device reports: attributes, utilization over prev->cur, per-process rows.

    Utilization is None without a previous snapshot. busy_time_us is the time the cores
    spent on jobs summed over the cores (what the driver counts), so device utilization
    is its growth over wall time x cores; a process's is the growth of its clients'
    drm-engine ns over wall time x drm-engine-capacity (1 when absent).
    """
    dt = None if prev is None else cur.t - prev.t
    before = {d.name: d for d in prev.devices} if prev else {}
    reports = []
    for dev in cur.devices:
        old = before.get(dev.name)
        util = None
        if dt is not None and old is not None:
            cores = max(1, dev.attrs["cores"])
            util = _pct(dev.attrs["busy_time_us"] - old.attrs["busy_time_us"], dt * 1e6 * cores)
        procs = _process_rows(dev, old, cur.procs.get(dev.name, {}), dt)
        reports.append({"index": dev.index, "name": dev.name, "node": dev.node, **dev.attrs,
                        "utilization_pct": util, "processes": procs})
    return reports


def _process_rows(dev: DeviceState, old: DeviceState | None, procs: dict[int, ProcInfo],
                  dt: float | None) -> list[dict[str, Any]]:
    by_pid: dict[int, list[UsageStats]] = {}
    for stats in dev.clients.values():
        if stats.pid is not None:
            by_pid.setdefault(stats.pid, []).append(stats)
    rows = []
    for pid in sorted(set(by_pid) | set(procs)):
        clients = by_pid.get(pid, [])
        info = procs.get(pid)
        engine_ns: dict[str, int] = {}
        util: dict[str, float] = {}
        for st in clients:
            prior = old.clients.get(st.client_id) if old else None
            for eng, ns in st.engines.items():
                engine_ns[eng] = engine_ns.get(eng, 0) + ns
                if dt is not None:
                    base = prior.engines.get(eng, 0) if prior else 0  # a new client started at 0
                    cap = st.engine_capacity.get(eng, 1)
                    util[eng] = util.get(eng, 0.0) + 100.0 * (ns - base) / (dt * 1e9 * cap)
        rows.append({
            "pid": pid,
            "comm": info.comm if info else (clients[0].comm or "?"),
            "fds": info.fds if info else None,
            "clients": sorted(st.client_id for st in clients),
            "engine_ns": engine_ns,
            "utilization_pct": None if dt is None else
            round(min(100.0, max(0.0, max(util.values(), default=0.0))), 1),
            "memory_bytes": sum(st.memory_bytes("resident") for st in clients),
        })
    return rows
