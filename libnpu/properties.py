"""Properties of a device and of a compiled model, by OpenVINO's NPU names and semantics.

``device.get_property("DEVICE_UUID")``, ``device.set_property({"PERFORMANCE_HINT":
"THROUGHPUT"})``, and the same two methods on a :class:`~libnpu.inference.CompiledModel`.
Keys are OpenVINO's own strings (``ov::hint::performance_mode`` is ``"PERFORMANCE_HINT"``,
``ov::enable_profiling`` is ``"PERF_COUNT"``, ``ov::intel_npu::tiles`` is ``"NPU_TILES"``...);
each also has the lower-case name `npu info --json` and `npu run --json` print it under
(``performance_hint``, ``enable_profiling``, ``tiles``...), which ``get_property`` accepts too.

Device facts come from the driver (GET_INFO and GET_PARAM: cores, clock, the hardware
profile's MACs per cycle, memory, the device's UUID), never from the driver's internals.
Settings (the writable properties) live in the Device object: a model loaded on that
device starts with them, ``libnpu.load(..., config={...})`` overrides them for one
model, and those that only shape how the model runs (the hint, the priority, profiling)
can be changed on the compiled model afterwards.  An unknown name is a ``KeyError`` and
a read-only or load-time property set on a compiled model a ``PropertyError``, each
naming the property; a bad value is a ``ValueError`` naming the accepted ones.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kmd_fuse import uapi
from libnpu.errors import PropertyError
from npu_hw import profiles

HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRIORITIES = {"LOW": uapi.NPU_PRIO_LOW, "MEDIUM": uapi.NPU_PRIO_NORMAL, "HIGH": uapi.NPU_PRIO_HIGH}
LOG_LEVELS = {"LOG_NONE": logging.CRITICAL + 10, "LOG_ERROR": logging.ERROR, "LOG_WARNING": logging.WARNING,
              "LOG_INFO": logging.INFO, "LOG_DEBUG": logging.DEBUG, "LOG_TRACE": logging.DEBUG - 5}
REQUESTS_PER_TILE = 2      # THROUGHPUT: one job running on each core and one queued behind it (benchmarks.hints)
MAX_ASYNC_REQUESTS = 64    # requests one open file may have in flight in the driver (NPU_PARAM_MAX_OUTSTANDING)


class DeviceQueries(Protocol):
    """What the properties ask of a device (``portability.Device`` answers): its node, its
    number, GET_INFO and GET_PARAM.  A protocol, so that this module, which the portability
    layer imports, imports nothing of it."""

    @property
    def path(self) -> Path: ...

    @property
    def instance(self) -> int: ...

    def info(self) -> dict: ...

    def param(self, param: int | str) -> int: ...


# ---- value checks ----
def _choice(name: str, choices) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = str(getattr(value, "name", value)).upper()
        if text not in choices:
            raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return text
    return check


def _flag(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).upper()
        if text in ("YES", "TRUE", "1"):
            return True
        if text in ("NO", "FALSE", "0"):
            return False
        raise ValueError(f"{name}: {value!r} is not a boolean (True/False, YES/NO)")
    return check


def _count(name: str, minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not str(value).lstrip("-").isdigit() or int(value) < minimum:
            raise ValueError(f"{name}: {value!r} is not an integer >= {minimum}")
        return int(value)
    return check


def _tiles(value: Any) -> int:
    if isinstance(value, bool) or not str(value).lstrip("-").isdigit() or int(value) not in (-1, *range(1, 256)):
        raise ValueError(f"NPU_TILES: {value!r} is neither -1 (all the device's cores) nor a core count 1..255")
    return int(value)


def _path(value: Any) -> str:
    return os.fspath(value) if value else ""


@dataclass(frozen=True)
class Property:
    """One property: OpenVINO's key, the JSON name, whether it can be set and where."""

    key: str
    json_name: str
    doc: str
    check: Callable[[Any], Any] | None = None    # None: read-only
    runtime: bool = False                        # settable on a compiled model too (not fixed at load)

    @property
    def mutable(self) -> bool:
        return self.check is not None


PROPERTIES: dict[str, Property] = {p.key: p for p in (
    Property("SUPPORTED_PROPERTIES", "supported_properties", "every property key, with RO/RW"),
    Property("AVAILABLE_DEVICES", "available_devices", "the device numbers present in the devroot"),
    Property("DEVICE_ID", "device_id", "this device's number (npuN)"),
    Property("DEVICE_UUID", "device_uuid", "the device's UUID (32 hex digits), stable across driver restarts"),
    Property("DEVICE_TYPE", "device_type", "INTEGRATED"),
    Property("DEVICE_GOPS", "device_gops", "peak giga-operations per second per precision, all cores"),
    Property("DEVICE_ARCHITECTURE", "device_architecture", "the chip's architecture and hardware profile"),
    Property("FULL_DEVICE_NAME", "full_device_name", "the device's name for people"),
    Property("NPU_DRIVER_VERSION", "driver_version", "the driver's ABI version"),
    Property("NPU_DEVICE_TOTAL_MEM_SIZE", "device_total_mem_size", "device memory, bytes"),
    Property("NPU_DEVICE_ALLOC_MEM_SIZE", "device_alloc_mem_size", "device memory allocated now (all contexts)"),
    Property("NPU_MAX_TILES", "max_tiles", "the chip's cores"),
    Property("NPU_TILES", "tiles", "cores one inference of a model may run on at once, by its tasks' "
             "dependencies (-1: all the device's)", _tiles),
    Property("CACHE_DIR", "cache_dir", "the compile cache's directory ('' = the user's default)", _path),
    Property("CACHING_PROPERTIES", "caching_properties", "the properties a cached compiled model depends on"),
    Property("COMPILATION_NUM_THREADS", "compilation_num_threads",
             "threads the compiler may use (the compiler runs on one)", _count("COMPILATION_NUM_THREADS", 1)),
    Property("PERFORMANCE_HINT", "performance_hint", "LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT",
             _choice("PERFORMANCE_HINT", HINTS), runtime=True),
    Property("PERFORMANCE_HINT_NUM_REQUESTS", "performance_hint_num_requests",
             "the most requests the application will keep in flight (0: no limit)",
             _count("PERFORMANCE_HINT_NUM_REQUESTS", 0), runtime=True),
    Property("OPTIMAL_NUMBER_OF_INFER_REQUESTS", "optimal_number_of_infer_requests",
             "requests to keep in flight: 1 for LATENCY, 2 per tile for THROUGHPUT, capped by the num_requests hint"),
    Property("RANGE_FOR_ASYNC_INFER_REQUESTS", "range_for_async_infer_requests", "(min, max, step) of requests"),
    Property("MODEL_PRIORITY", "model_priority", "LOW, MEDIUM or HIGH: the driver's job priority",
             _choice("MODEL_PRIORITY", tuple(PRIORITIES)), runtime=True),
    Property("PERF_COUNT", "enable_profiling", "record per-layer counters of every inference",
             _flag("PERF_COUNT"), runtime=True),
    Property("LOG_LEVEL", "log_level", "libnpu's log level: " + ", ".join(LOG_LEVELS),
             _choice("LOG_LEVEL", tuple(LOG_LEVELS)), runtime=True),
    Property("NPU_BYPASS_UMD_CACHING", "bypass_umd_caching", "compile without the compile cache",
             _flag("NPU_BYPASS_UMD_CACHING")),
    Property("NPU_DEFER_WEIGHTS_LOAD", "defer_weights_load",
             "load the weights with the first request instead of at load time", _flag("NPU_DEFER_WEIGHTS_LOAD")),
    Property("NPU_HW_PROFILE", "hw_profile", "this emulator's own: the hardware profile the chip runs (its name, "
             "clock, MACs/cycle, memory bandwidth, SRAM) and whether jobs are paced to it"),
)}
BY_JSON_NAME = {p.json_name: p for p in PROPERTIES.values()}
CACHING_PROPERTIES = ["DEVICE_ARCHITECTURE"]


def defaults() -> dict[str, Any]:
    """The settings of a freshly opened device (OpenVINO's NPU defaults)."""
    return {"NPU_TILES": -1, "CACHE_DIR": "", "COMPILATION_NUM_THREADS": os.cpu_count() or 1,
            "PERFORMANCE_HINT": "LATENCY", "PERFORMANCE_HINT_NUM_REQUESTS": 0, "MODEL_PRIORITY": "MEDIUM",
            "PERF_COUNT": False, "LOG_LEVEL": "LOG_ERROR", "NPU_BYPASS_UMD_CACHING": False,
            "NPU_DEFER_WEIGHTS_LOAD": False}


def lookup(name: str) -> Property:
    """The property called ``name`` (OpenVINO key or JSON name); KeyError naming the known keys."""
    prop = PROPERTIES.get(name) or BY_JSON_NAME.get(name)
    if prop is None:
        raise KeyError(f"unknown property {name!r}; supported: {', '.join(PROPERTIES)}")
    return prop


def checked(values: Mapping[str, Any], *, model: bool) -> dict[str, Any]:
    """``values`` validated and keyed by OpenVINO key; nothing applies unless all pass."""
    out = {}
    for name, value in values.items():
        prop = lookup(name)
        if prop.check is None:
            raise PropertyError(f"{prop.key} is read-only")
        if model and not prop.runtime:
            raise PropertyError(f"{prop.key} is fixed once the model is loaded: set it on the device or "
                                f"pass it in load(..., config={{{prop.key!r}: ...}})")
        out[prop.key] = prop.check(value)
    return out


def apply_log_level(settings: Mapping[str, Any]) -> None:
    logging.getLogger("libnpu").setLevel(LOG_LEVELS[settings["LOG_LEVEL"]])


# ---- device facts ----
def device_facts(device: DeviceQueries) -> dict[str, Any]:
    """The read-only facts of a device, from GET_INFO and GET_PARAM."""
    info = device.info()
    param = device.param
    cores, clock, macs = info["num_cores"], info["clock_mhz"], param("MACS_PER_CYCLE")
    profile = profiles.BY_ID.get(param("PROFILE"))
    profile_name = profile.name if profile else f"profile{param('PROFILE')}"
    raw = param("UUID_LO").to_bytes(8, "little") + param("UUID_HI").to_bytes(8, "little")
    int8_gops = round(2 * macs * clock * cores / 1000, 3)
    hw = param("HW_VERSION")
    return {
        "AVAILABLE_DEVICES": available_devices(device.path.parent),
        "DEVICE_ID": str(device.instance),
        "DEVICE_UUID": raw.hex(),
        "DEVICE_TYPE": "INTEGRATED",
        "DEVICE_GOPS": {"int8": int8_gops, "uint8": 0.0, "float16": 0.0, "float32": 0.0},
        "DEVICE_ARCHITECTURE": f"{info['model']}-{hw >> 16}.{hw & 0xFFFF}-{profile_name}",
        "FULL_DEVICE_NAME": f"{info['model']} {profile_name} NPU ({cores} cores at {clock} MHz, "
                            f"{macs} int8 MACs/cycle each)",
        "NPU_DRIVER_VERSION": uapi.abi_string(info["abi_version"]),
        "NPU_DEVICE_TOTAL_MEM_SIZE": info["memory_total"],
        "NPU_DEVICE_ALLOC_MEM_SIZE": info["memory_used"],
        "NPU_MAX_TILES": cores,
        "CACHING_PROPERTIES": list(CACHING_PROPERTIES),
        "RANGE_FOR_ASYNC_INFER_REQUESTS": (1, min(MAX_ASYNC_REQUESTS, param("MAX_OUTSTANDING")), 1),
        "NPU_HW_PROFILE": {"name": profile_name, "clock_mhz": clock, "macs_per_cycle": macs,
                           "dma_bytes_per_cycle": param("DMA_BYTES_PER_CYCLE"),
                           "bandwidth_bytes_per_s": param("DMA_BYTES_PER_CYCLE") * clock * 1_000_000,
                           "sram_bytes": param("SRAM_BYTES"), "task_overhead_cycles": param("TASK_OVERHEAD_CYCLES"),
                           "pacing": bool(param("PACING"))},
    }


def available_devices(devroot: Path) -> list[str]:
    numbers = [p.name[3:] for p in devroot.glob("npu[0-9]*") if p.name[3:].isdigit()]
    return sorted(numbers, key=int)


def optimal_requests(settings: Mapping[str, Any], cores: int) -> int:
    """OPTIMAL_NUMBER_OF_INFER_REQUESTS for these settings on a chip with ``cores`` cores.

    LATENCY: one request, so every job has the chip to itself.  THROUGHPUT (and
    CUMULATIVE_THROUGHPUT, one device being all there is): two per tile, one running and
    one queued so a core never waits for the host to resubmit (measured by
    ``python -m benchmarks.hints``).  PERFORMANCE_HINT_NUM_REQUESTS caps it."""
    if settings["PERFORMANCE_HINT"] == "LATENCY":
        wanted = 1
    else:
        tiles = settings["NPU_TILES"]
        wanted = REQUESTS_PER_TILE * (cores if tiles < 0 else max(1, min(tiles, cores)))
    limit = settings["PERFORMANCE_HINT_NUM_REQUESTS"]
    return min(wanted, limit) if limit else wanted


def job_cores(settings: Mapping[str, Any], cores: int, *, partitioned: bool = False) -> int | None:
    """How a model's command buffer asks for cores (``Loadable.command_buffer``): None (in order,
    one core) when NPU_TILES gives it one core or the device has one, or when the model has host
    steps (its partitions are cut from the in-order buffer); else the count, 0 for all of them.
    ValueError when NPU_TILES asks for more cores than the device has."""
    tiles = settings["NPU_TILES"]
    if tiles > cores:
        raise ValueError(f"NPU_TILES: {tiles} cores asked for, the device has {cores} (NPU_MAX_TILES)")
    if partitioned or cores == 1 or tiles == 1:
        return None
    return 0 if tiles < 0 else tiles


def supported(model: bool) -> dict[str, str]:
    """SUPPORTED_PROPERTIES: every key with "RW" or "RO" (on a model, RW only where it may change)."""
    return {k: "RW" if p.mutable and (p.runtime or not model) else "RO" for k, p in PROPERTIES.items()}


def value(settings: Mapping[str, Any], facts: Callable[[], Mapping[str, Any]], name: str, *, model: bool) -> Any:
    """Property ``name`` from the settings, or from the device's facts (``facts()``, asked only when needed)."""
    key = lookup(name).key
    if key == "SUPPORTED_PROPERTIES":
        return supported(model)
    if key in settings:
        return settings[key]
    known = facts()
    if key == "OPTIMAL_NUMBER_OF_INFER_REQUESTS":
        return optimal_requests(settings, known["NPU_MAX_TILES"])
    return known[key]


def snapshot(settings: Mapping[str, Any], device: DeviceQueries, *, model: bool) -> dict[str, Any]:
    """Every property by JSON name (what `npu info --json` and `npu run --json` print)."""
    facts = device_facts(device)
    out: dict[str, Any] = {}
    for key, prop in PROPERTIES.items():
        got = value(settings, lambda: facts, key, model=model)
        out[prop.json_name] = list(got) if isinstance(got, tuple) else got
    return out
