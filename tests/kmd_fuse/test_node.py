"""The node as a user sees it: stat, open/close, GET_INFO, contexts."""
import os
import stat

import libnpu


def test_node_is_served_and_stat_shows_it(npu):
    st = os.stat(npu.node)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert any(line.split()[1] == str(npu.node) for line in open("/proc/self/mounts"))
    assert "pid" in npu.kmd("status").stdout


def test_info_describes_the_device(device):
    info = device.info()
    assert info["abi_version"] == 0x00020009
    assert info["num_cores"] == 2
    assert info["ring_entries"] == 256
    assert info["page_size"] == 4096
    assert info["memory_total"] == 1 << 30
    assert info["model"] == "npu-emu"


def test_each_open_is_a_context(npu):
    with libnpu.initialize(npu.devroot) as session:
        first = session.open(0)
        base = first.info()["num_contexts"]
        second = session.open(0)
        assert second.info()["num_contexts"] == base + 1
        assert second.info()["context_id"] != first.info()["context_id"]
        session.close(second)
        assert first.info()["num_contexts"] == base


def test_open_close_many_times(npu):
    for _ in range(50):
        fd = os.open(npu.node, os.O_RDWR)
        os.close(fd)
    with libnpu.initialize(npu.devroot) as session:
        assert session.open(0).info()["num_contexts"] == 1


def test_several_devices_are_served_side_by_side(tmp_path):
    import json
    import subprocess
    import sys

    from tests.support.device import start_npu, stop_npu
    npu = start_npu(tmp_path, devices=2)
    try:
        out = subprocess.run([sys.executable, "-m", "libnpu.tools", "info", "--json", "--devroot", str(npu.devroot)],
                             capture_output=True, text=True, check=True).stdout
        devices = json.loads(out)["devices"]
        assert [d["device"] for d in devices] == ["npu0", "npu1"]
        assert all(d["memory_total_bytes"] == 1 << 30 and d["contexts"] == 0 for d in devices)
        with libnpu.initialize(npu.devroot) as session:
            first, second = session.open(0), session.open(1)
            mem = first.alloc_mem(1 << 20)
            assert second.info()["memory_used"] == 0          # devices are independent
            assert first.info()["device_id"] == 0 and second.info()["device_id"] == 1
            second.run(None)
            first.free_mem(mem)
    finally:
        stop_npu(npu)
