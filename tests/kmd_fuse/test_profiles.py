"""Hardware profiles and pacing: `npu-kmd start --profile NAME [--pacing]` runs the chip's
timing model with that profile's numbers, which GET_PARAM and the attribute tree report;
with pacing a job ends no earlier than its modeled device time."""
import time
import uuid

import pytest

import libnpu
from npu_hw import profiles
from tests.support.device import start_npu, stop_npu
from tests.support.shell import attr_dir, sh


@pytest.fixture(scope="module")
def edge_paced(tmp_path_factory):
    mounted = start_npu(tmp_path_factory.mktemp("edge"), extra=("--profile", "edge", "--pacing"))
    yield mounted
    stop_npu(mounted)


def _attr(npu, name: str) -> str:
    return sh('cat "$D/$F"', D=str(attr_dir(npu)), F=name).stdout.strip()


def _copy_job(dev, nbytes: int):
    src, dst = dev.alloc_mem(nbytes), dev.alloc_mem(nbytes)
    cmds = dev.command_buffer()
    cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=nbytes)
    return cmds, [src, dst]


def test_the_profile_is_reported_by_get_param_and_the_tree(edge_paced):
    edge = profiles.PROFILES["edge"]
    with libnpu.initialize(edge_paced.devroot) as session:
        dev = session.open(0)
        assert dev.param("PROFILE") == edge.id
        assert dev.param("CLOCK_MHZ") == dev.info()["clock_mhz"] == edge.clock_mhz
        assert dev.param("MACS_PER_CYCLE") == edge.macs_per_cycle
        assert dev.param("DMA_BYTES_PER_CYCLE") == edge.dma_bytes_per_cycle
        assert dev.param("SRAM_BYTES") == edge.sram_bytes
        assert dev.param("TASK_OVERHEAD_CYCLES") == edge.task_overhead_cycles
        assert dev.param("PACING") == 1
        raw = dev.param("UUID_LO").to_bytes(8, "little") + dev.param("UUID_HI").to_bytes(8, "little")
    assert _attr(edge_paced, "profile") == "edge"
    assert _attr(edge_paced, "macs_per_cycle") == str(edge.macs_per_cycle)
    assert _attr(edge_paced, "dma_bytes_per_cycle") == str(edge.dma_bytes_per_cycle)
    assert _attr(edge_paced, "sram_bytes") == str(edge.sram_bytes)
    assert _attr(edge_paced, "clock_mhz") == str(edge.clock_mhz)
    assert _attr(edge_paced, "pacing") == "1"
    assert _attr(edge_paced, "uuid") == str(uuid.UUID(bytes=raw))


def test_device_time_follows_the_profile_and_pacing_holds_the_job(edge_paced, npu):
    """The same 1 MiB copy: its modeled time is bytes / (bytes per cycle) at the clock, on
    either profile; on the paced edge device the job's wall time is at least that."""
    nbytes = 1 << 20
    times = {}
    for name, mounted in (("edge", edge_paced), ("standard", npu)):
        spec = profiles.PROFILES[name]
        with libnpu.initialize(mounted.devroot) as session:
            dev = session.open(0)
            cmds, buffers = _copy_job(dev, nbytes)
            started = time.monotonic_ns()
            fence = dev.run(cmds, buffers)
            wall = time.monotonic_ns() - started
        cycles = spec.task_overhead_cycles + -(-2 * nbytes // spec.dma_bytes_per_cycle)   # read + write
        assert fence.device_time_ns == cycles * 1000 // spec.clock_mhz, name
        times[name] = (fence.device_time_ns, wall)
    edge_modeled, edge_wall = times["edge"]
    assert edge_modeled > 1_000_000                  # 0.5 M cycles at 100 MHz: ~5 ms
    assert edge_wall >= edge_modeled                 # paced: never earlier than the model


def test_an_unknown_profile_is_one_line(tmp_path):
    with pytest.raises(RuntimeError) as failure:
        start_npu(tmp_path, extra=("--profile", "nonesuch"))
    assert "invalid choice: 'nonesuch'" in str(failure.value)
