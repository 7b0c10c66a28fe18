"""The Kubernetes device plugin on the kubelet's v1beta1 API, driven from the kubelet's
side by a real gRPC client (no kubelet runs here): registration, ListAndWatch updates
when a device's daemon stops, Allocate with CDI names, mounts and variables, sharing,
registering again after a kubelet restart."""
from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys

import grpc
import pytest

from kmd_fuse import cli, paths, pidfile
from kmd_fuse.device_plugin import deviceplugin_pb2 as api
from tests.support.device import REPO, start_npu, stop_npu
from tests.support.kubelet import KubeletSide, PluginClient, start_plugin, stop_plugin


@pytest.fixture
def two_npus(tmp_path):
    mounted = start_npu(tmp_path, devices=2)
    yield mounted
    stop_npu(mounted)


def test_registers_lists_allocates_and_a_stopped_device_turns_unhealthy(two_npus, tmp_path):
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    with KubeletSide(plugin_dir) as kubelet:
        proc = start_plugin(two_npus.devroot, plugin_dir, "--shared-dev-num", "2", "--poll-interval", "0.2")
        client = None
        try:
            request = kubelet.registered()
            assert (request.version, request.endpoint, request.resource_name) == \
                ("v1beta1", "npu-emu.sock", "npu-emu.io/npu")
            assert request.options.get_preferred_allocation_available
            client = PluginClient(plugin_dir)
            ids = {"npu0-0", "npu0-1", "npu1-0", "npu1-1"}
            client.wait_for_list(lambda devices: devices == dict.fromkeys(ids, "Healthy"))

            # Allocate: two IDs of one shared device give one device, by CDI name and by mounts + env
            (answer,) = client.stub.Allocate(api.AllocateRequest(container_requests=[
                api.ContainerAllocateRequest(devices_ids=["npu1-0", "npu1-1"])])).container_responses
            assert [d.name for d in answer.cdi_devices] == ["npu-emu.io/npu=npu1"]
            assert dict(answer.envs) == {"NPU_DEVROOT": "/dev", "NPU_VISIBLE_DEVICES": "1"}
            socket = paths.handover_socket(two_npus.devroot, 1)
            assert {(m.host_path, m.container_path, m.read_only) for m in answer.mounts} == \
                {(str(two_npus.devroot / "npu1"), "/dev/npu1", False), (str(socket), str(socket), True)}
            (both,) = client.stub.Allocate(api.AllocateRequest(container_requests=[
                api.ContainerAllocateRequest(devices_ids=["npu1-1", "npu0-0"])])).container_responses
            assert both.envs["NPU_VISIBLE_DEVICES"] == "0,1"
            with pytest.raises(grpc.RpcError) as refused:
                client.stub.Allocate(api.AllocateRequest(container_requests=[
                    api.ContainerAllocateRequest(devices_ids=["npu7-0"])]))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "npu7-0" in refused.value.details()

            # preferred: distinct devices first
            (preferred,) = client.stub.GetPreferredAllocation(api.PreferredAllocationRequest(container_requests=[
                api.ContainerPreferredAllocationRequest(available_deviceIDs=sorted(ids), allocation_size=2)
            ])).container_responses
            assert sorted(d[:4] for d in preferred.deviceIDs) == ["npu0", "npu1"]

            # npu1's daemon stops: its IDs turn Unhealthy, npu0's stay Healthy
            os.kill(pidfile.running_pid(paths.pid_file(two_npus.devroot, 1)), signal.SIGTERM)
            client.wait_for_list(lambda devices: devices == {"npu0-0": "Healthy", "npu0-1": "Healthy",
                                                             "npu1-0": "Unhealthy", "npu1-1": "Unhealthy"})

            # a restarting kubelet removes every socket in the directory: the plugin serves and registers again
            (plugin_dir / "npu-emu.sock").unlink()
            assert kubelet.registered().resource_name == "npu-emu.io/npu"
        finally:
            if client is not None:
                client.close()
            out = stop_plugin(proc)
    assert proc.returncode == 0, out
    assert "npu1: Unhealthy" in out
    assert not (plugin_dir / "npu-emu.sock").exists()


def test_a_plugin_directory_that_does_not_exist_is_refused(tmp_path, capsys):
    assert cli.main(["device-plugin", "--devroot", str(tmp_path), "--plugin-dir", str(tmp_path / "missing")]) == 1
    assert "missing: no such directory" in capsys.readouterr().err


def test_the_committed_stubs_are_what_the_proto_generates(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run([str(REPO / "scripts" / "gen-device-plugin-api"), str(tmp_path)], check=True,
                   env={**os.environ, "PYTHON": sys.executable})
    names = ["deviceplugin_pb2.py", "deviceplugin_pb2.pyi", "deviceplugin_pb2_grpc.py"]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "kmd_fuse" / "device_plugin",
                                               REPO / "kmd_fuse" / "device_plugin", names, shallow=False)
    assert not mismatch and not errors, f"stale: run scripts/gen-device-plugin-api ({mismatch or errors})"
