"""Properties by OpenVINO's names on a device and a compiled model: the device's facts
as the driver reports them, the settings and what each one changes, clear errors, and
`npu info --json` / `npu run --json` listing them under the issue's lower-case names."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import libnpu
from libnpu import properties
from libnpu.compiler.lower import compile_model
from libnpu.properties import PropertyError
from libnpu.tools.cli import main
from tests.support.device import start_npu, stop_npu
from tests.support.diamond import diamond_calibration, diamond_model
from tests.support.shell import attr_dir, sh

ISSUE_NAMES = ["supported_properties", "available_devices", "device_id", "device_uuid", "device_type", "device_gops",
               "device_architecture", "full_device_name", "driver_version", "device_total_mem_size",
               "device_alloc_mem_size", "max_tiles", "tiles", "cache_dir", "caching_properties",
               "compilation_num_threads", "performance_hint", "performance_hint_num_requests",
               "optimal_number_of_infer_requests", "range_for_async_infer_requests", "model_priority",
               "enable_profiling", "log_level", "bypass_umd_caching", "defer_weights_load"]



def test_npu_info_json_lists_every_property_with_the_drivers_facts(npu, capsys):
    assert main(["info", "--json", "--devroot", str(npu.devroot)]) == 0
    props = json.loads(capsys.readouterr().out)["devices"][0]["properties"]
    assert list(props) == ISSUE_NAMES + ["hw_profile"]
    with libnpu.initialize(npu.devroot) as session:
        dev = session.open(0)
        info = dev.info()
        assert props["max_tiles"] == info["num_cores"] == dev.param("NUM_CORES")
        assert props["device_total_mem_size"] == info["memory_total"]
        gops = 2 * dev.param("MACS_PER_CYCLE") * info["clock_mhz"] * info["num_cores"] / 1000
    assert props["device_gops"]["int8"] == pytest.approx(gops)
    assert props["available_devices"] == ["0"] and props["device_id"] == "0"
    uuid_attr = sh('cat "$D/uuid"', D=str(attr_dir(npu))).stdout.strip()
    assert props["device_uuid"] == uuid_attr.replace("-", "") and len(props["device_uuid"]) == 32
    assert props["device_type"] == "INTEGRATED"
    assert props["driver_version"] == "2.9"
    assert props["device_architecture"].endswith("-standard")
    assert props["performance_hint"] == "LATENCY" and props["optimal_number_of_infer_requests"] == 1
    assert props["range_for_async_infer_requests"] == [1, 64, 1]
    assert props["hw_profile"] == {"name": "standard", "clock_mhz": 1000, "macs_per_cycle": 512,
                                   "dma_bytes_per_cycle": 64, "bandwidth_bytes_per_s": 64_000_000_000,
                                   "sram_bytes": 2 << 20, "task_overhead_cycles": 32, "pacing": False}
    assert props["supported_properties"]["DEVICE_UUID"] == "RO"
    assert props["supported_properties"]["PERFORMANCE_HINT"] == "RW"


def test_unknown_read_only_and_bad_values_are_refused_and_change_nothing(device):
    before = dict(device.settings)
    with pytest.raises(KeyError, match="unknown property 'NPU_WARP_SPEED'"):
        device.get_property("NPU_WARP_SPEED")
    with pytest.raises(KeyError, match="unknown property"):
        device.set_property({"PERFORMANCE_HINT": "THROUGHPUT", "NPU_WARP_SPEED": 9})
    with pytest.raises(PropertyError, match="DEVICE_UUID is read-only"):
        device.set_property({"DEVICE_UUID": "00"})
    with pytest.raises(PropertyError, match="OPTIMAL_NUMBER_OF_INFER_REQUESTS is read-only"):
        device.set_property({"optimal_number_of_infer_requests": 3})
    with pytest.raises(ValueError, match="'FASTEST' is not one of LATENCY, THROUGHPUT, CUMULATIVE_THROUGHPUT"):
        device.set_property({"PERFORMANCE_HINT": "FASTEST"})
    for tiles in ("two", 0, -2, True):
        with pytest.raises(ValueError, match=f"NPU_TILES: {tiles!r} is neither -1 .all the device's cores. nor"):
            device.set_property({"NPU_TILES": tiles})
    with pytest.raises(ValueError, match="not a boolean"):
        device.set_property({"PERF_COUNT": "maybe"})
    assert device.settings == before           # all or nothing


def test_optimal_requests_follow_the_hint_tiles_and_num_requests(device):
    cores = device.get_property("NPU_MAX_TILES")
    assert device.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == 1          # LATENCY, the default
    device.set_property({"PERFORMANCE_HINT": "THROUGHPUT"})
    assert device.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == properties.REQUESTS_PER_TILE * cores
    device.set_property({"NPU_TILES": 1})
    assert device.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == properties.REQUESTS_PER_TILE
    device.set_property({"NPU_TILES": -1, "PERFORMANCE_HINT_NUM_REQUESTS": 3})
    assert device.get_property("optimal_number_of_infer_requests") == min(3, properties.REQUESTS_PER_TILE * cores)
    device.set_property({"performance_hint": "cumulative_throughput", "PERFORMANCE_HINT_NUM_REQUESTS": 0})
    assert device.get_property("PERFORMANCE_HINT") == "CUMULATIVE_THROUGHPUT"
    assert device.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == properties.REQUESTS_PER_TILE * cores


def test_a_model_starts_with_the_devices_settings_and_its_config(device, resnet8_nlb):
    device.set_property({"PERFORMANCE_HINT": "THROUGHPUT", "MODEL_PRIORITY": "HIGH"})
    with libnpu.load(resnet8_nlb, device, config={"MODEL_PRIORITY": "LOW", "PERF_COUNT": True}) as model:
        assert model.get_property("PERFORMANCE_HINT") == "THROUGHPUT"
        assert model.get_property("MODEL_PRIORITY") == "LOW" and model.priority == libnpu.PRIO_LOW
        assert model.get_property("enable_profiling") is True
        model.set_property({"PERFORMANCE_HINT": "LATENCY", "MODEL_PRIORITY": "HIGH"})
        assert model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == 1
        assert model.priority == libnpu.PRIO_HIGH
        assert device.get_property("PERFORMANCE_HINT") == "THROUGHPUT"     # the device's own are untouched
        with pytest.raises(PropertyError, match="NPU_DEFER_WEIGHTS_LOAD is fixed once the model is loaded"):
            model.set_property({"NPU_DEFER_WEIGHTS_LOAD": True})
        assert model.get_property("SUPPORTED_PROPERTIES")["CACHE_DIR"] == "RO"
        assert model.get_property("SUPPORTED_PROPERTIES")["MODEL_PRIORITY"] == "RW"
        x = np.zeros(model.inputs[0].shape, np.int8)
        assert model.infer([x])[0].shape == model.outputs[0].shape        # runs at the new priority


def test_defer_weights_load_waits_for_the_first_request(device, resnet8_nlb):
    before = device.info()["memory_used"]
    model = libnpu.load(resnet8_nlb, device, config={"NPU_DEFER_WEIGHTS_LOAD": "YES"})
    assert device.info()["memory_used"] == before
    model.infer([np.zeros(model.inputs[0].shape, np.int8)])
    assert device.info()["memory_used"] > before
    model.close()
    assert device.info()["memory_used"] == before


def test_cache_dir_and_bypass_umd_caching_steer_the_compile_cache(device, resnet8_path, tmp_path):
    cache = tmp_path / "cache"
    device.set_property({"CACHE_DIR": cache})
    libnpu.load(resnet8_path, device, config={"NPU_BYPASS_UMD_CACHING": True}).close()
    assert not cache.exists() or not any(cache.rglob("*.nlb"))
    model = libnpu.load(resnet8_path, device)
    assert model.load_info["cache_hit"] is False and any(cache.rglob("*"))
    assert model.get_property("CACHE_DIR") == str(cache)
    model.close()
    assert libnpu.load(resnet8_path, device).load_info["cache_hit"] is True


def test_log_level_sets_libnpus_logger(device):
    logger = logging.getLogger("libnpu")
    old = logger.level
    try:
        device.set_property({"LOG_LEVEL": "LOG_DEBUG"})
        assert logger.getEffectiveLevel() == logging.DEBUG
        device.set_property({"LOG_LEVEL": "LOG_NONE"})
        assert not logger.isEnabledFor(logging.CRITICAL)
    finally:
        logger.setLevel(old)


def test_npu_run_json_shows_the_models_properties(npu, resnet8_nlb, capsys):
    assert main(["run", str(resnet8_nlb), "--json", "--repeat", "1", "--devroot", str(npu.devroot)]) == 0
    props = json.loads(capsys.readouterr().out)["properties"]
    assert list(props) == ISSUE_NAMES + ["hw_profile"]
    assert props["performance_hint"] == "LATENCY" and props["model_priority"] == "MEDIUM"


@pytest.fixture
def paced_edge(tmp_path):
    mounted = start_npu(tmp_path, extra=("--profile", "edge", "--pacing"))
    yield mounted
    stop_npu(mounted)


def test_model_priority_high_overtakes_a_low_priority_flood(paced_edge, resnet8_nlb):
    """800 LOW copy jobs (5 ms each, paced) fill both cores' rings (255 entries each) and
    the driver's queue; a HIGH model's inference from the same context, submitted after
    them, goes ahead of the queued ones: when it is done, LOW jobs are still pending.  At
    the flood's own priority it would queue behind all 800 (one context's jobs run in order)."""
    with libnpu.initialize(paced_edge.devroot) as session:
        flood = session.open(0)
        size = 1 << 20
        src, dst = flood.alloc_mem(size), flood.alloc_mem(size)
        cmds = flood.command_buffer()
        cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=size)
        low = flood.prepare_submit(cmds, [src, dst], priority=libnpu.PRIO_LOW)
        model = libnpu.load(resnet8_nlb, flood, config={"MODEL_PRIORITY": "HIGH"})
        try:
            request = model.create_request()
            fences = [flood.submit_prepared(low) for _ in range(800)]
            request.infer([np.zeros(model.inputs[0].shape, np.int8)])
            done = sum(flood.wait(fences[i:i + 64], timeout=0, raise_on_timeout=False)
                       for i in range(0, len(fences), 64))
            assert done < len(fences), "the HIGH inference waited for the whole LOW flood"
            flood.wait(fences[-64:], timeout=60)
        finally:
            model.close()


def test_the_hints_script_chooses_through_properties_only(npu, resnet8_nlb):
    """benchmarks.hints on this device, briefly: its choices come from the properties (1
    request for LATENCY, 2 per core for THROUGHPUT) and every inference is counted.  The
    figures themselves are the script's to report, not a test's to check."""
    from benchmarks.hints import measure
    lines: list[str] = []
    report = measure(npu.devroot, str(resnet8_nlb), 0.6, False, lines.append, rounds=2)
    cores = report["device"]["NPU_MAX_TILES"]
    assert report["hints"]["LATENCY"].requests == 1
    assert report["hints"]["THROUGHPUT"].requests == properties.REQUESTS_PER_TILE * cores
    for m in report["hints"].values():
        assert m.inferences > 0 and m.p50_ms > 0 and m.device_time_ms > 0
    assert "FULL_DEVICE_NAME" in report["device"] and any("THROUGHPUT" in line for line in lines)


def test_npu_tiles_refuses_what_the_device_cannot_do(npu, device):
    loadable = compile_model(diamond_model(), diamond_calibration(), recipe="fast")
    with pytest.raises(ValueError, match=r"NPU_TILES: 0 is neither -1 \(all the device's cores\) nor a core count"):
        libnpu.load(loadable, devroot=npu.devroot, config={"NPU_TILES": 0})
    with pytest.raises(ValueError, match="NPU_TILES: 3 cores asked for, the device has 2"):
        libnpu.load(loadable, devroot=npu.devroot, config={"NPU_TILES": 3})
