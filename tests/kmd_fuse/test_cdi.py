"""``npu-kmd cdi``: the spec it writes, and a container started by podman + runc from it
that runs ResNet-8 on its device, byte-identical to LiteRT's BUILTIN_REF kernels."""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from kmd_fuse import cli, paths
from tests.support.containers import cdi_kind_installed, podman_missing, podman_run
from tests.support.device import REPO, start_npu, stop_npu
from tests.support.litert import ReferenceModel


@pytest.fixture(scope="module")
def two_npus(tmp_path_factory):
    mounted = start_npu(tmp_path_factory.mktemp("cdi"), devices=2)
    yield mounted
    stop_npu(mounted)


def test_a_device_is_its_node_and_hand_over_socket_as_mounts_never_a_device_node(two_npus, tmp_path):
    two_npus.kmd("cdi", "-o", str(tmp_path / "npu.json"))
    spec = json.loads((tmp_path / "npu.json").read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "npu-emu.io/npu")
    devices = {device["name"]: device["containerEdits"] for device in spec["devices"]}
    assert set(devices) == {"npu0", "npu1", "all"}
    socket = str(paths.handover_socket(two_npus.devroot, 1))
    assert devices["npu1"] == {
        "env": ["NPU_DEVROOT=/dev", "NPU_VISIBLE_DEVICES=1"],
        "mounts": [{"hostPath": str(two_npus.devroot / "npu1"), "containerPath": "/dev/npu1",
                    "options": ["bind", "rw"]},
                   {"hostPath": socket, "containerPath": socket, "options": ["bind", "ro"]}]}
    assert "NPU_VISIBLE_DEVICES=0,1" in devices["all"]["env"] and len(devices["all"]["mounts"]) == 4
    assert not any("deviceNodes" in edits for edits in devices.values())


def test_a_devroot_without_devices_or_a_bad_kind_is_refused(two_npus, tmp_path, capsys):
    assert cli.main(["cdi", "--devroot", str(tmp_path), "-o", "-"]) == 1
    assert "no devices served" in capsys.readouterr().err
    assert cli.main(["cdi", "--devroot", str(two_npus.devroot), "--kind", "npu", "-o", str(tmp_path / "x.json")]) == 2
    assert "not a CDI kind" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_a_podman_container_runs_resnet8_on_the_device_of_its_cdi_spec(two_npus, resnet8_path, resnet8_nlb,
                                                                       tmp_path):
    if why := podman_missing():
        pytest.skip(why)
    data = tmp_path / "data"
    data.mkdir()
    reference = ReferenceModel(resnet8_path)
    x = np.random.default_rng(28).integers(-128, 128, reference.shape, dtype=np.int8)
    np.save(data / "x.npy", x)
    with cdi_kind_installed(two_npus.devroot) as kind:
        started = time.monotonic()
        result = podman_run([f"{kind}=npu1"],
                            [sys.executable, str(REPO / "tests" / "support" / "container_infer.py"),
                             str(resnet8_nlb), "/data/x.npy", "/data/y.npy"],
                            volumes=(f"{data}:/data", f"{resnet8_nlb.parent}:{resnet8_nlb.parent}:ro"))
        took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nodes: npu1\n" in result.stdout            # its own device, and no other
    assert np.array_equal(np.load(data / "y.npy"), reference(x))
    print(f"container from the CDI spec: ResNet-8 on npu1 in {took:.1f} s (start to exit)")
