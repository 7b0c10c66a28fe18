"""Choosing a device the way users do (issue 28): NPU_VISIBLE_DEVICES renumbers the
nodes a program sees from 0, NPU_DEVICE and ``--device`` index that list, ``--device``
winning (``libnpu.visible_devices``); ``npu --device`` once ran on npu0 whatever it said."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from libnpu.delegate.plugin import DelegateOptions, _SharedDevice
from libnpu.portability import Session
from libnpu.tools.c_runtime import CApiError, Status, _device_index
from libnpu.visible_devices import DeviceChoiceError, node_number, visible_devices
from tests.support.device import REPO, start_npu, stop_npu
from tests.support.shell import attr_dir


@pytest.mark.parametrize("visible, default, index, number", [
    (None, None, None, 0), (None, "3", None, 3), (None, "3", 1, 1),
    ("2,5", None, None, 2), ("2,5", None, 1, 5), (" 5 , 2 ", "1", None, 2),
])
def test_an_index_counts_in_the_visible_list(monkeypatch, visible, default, index, number):
    for name, value in (("NPU_VISIBLE_DEVICES", visible), ("NPU_DEVICE", default)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert node_number(index) == number


@pytest.mark.parametrize("visible, default, index, message", [
    ("2,5", None, 2, "device 2 is not visible: NPU_VISIBLE_DEVICES='2,5' shows devices 0-1"),
    ("", None, None, "device 0 is not visible: NPU_VISIBLE_DEVICES='' shows no device"),
    ("1,x", None, 0, "NPU_VISIBLE_DEVICES='1,x': expected a device number (0, 1, ...), not 'x'"),
    ("1,1", None, 0, "NPU_VISIBLE_DEVICES='1,1': a device listed twice"),
    (None, "-1", None, "NPU_DEVICE='-1': expected a device number (0, 1, ...), not '-1'"),
    (None, None, -1, "device -1: expected a device number (0, 1, ...)"),
])
def test_a_choice_that_names_no_visible_device_says_why(monkeypatch, visible, default, index, message):
    for name, value in (("NPU_VISIBLE_DEVICES", visible), ("NPU_DEVICE", default)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(DeviceChoiceError) as caught:
        node_number(index)
    assert str(caught.value) == message


def test_the_c_api_refuses_a_device_it_cannot_see(monkeypatch):
    monkeypatch.setenv("NPU_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("NPU_DEVICE", "1")
    with pytest.raises(CApiError) as caught:
        _device_index()
    assert caught.value.status == Status.INVALID_ARGUMENT and "device 1 is not visible" in str(caught.value)
    assert visible_devices() == [3]


@pytest.fixture(scope="module")
def two_npus(tmp_path_factory):
    mounted = start_npu(tmp_path_factory.mktemp("two"), devices=2)
    yield mounted
    stop_npu(mounted)


def _jobs(npu, index: int) -> int:
    return int((attr_dir(npu, index) / "jobs_completed").read_text())


def _npu(npu, *argv: str, **environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_DEVICE", "NPU_VISIBLE_DEVICES", "NPU_DEBUG")}
    return subprocess.run([sys.executable, "-m", "libnpu.tools", *argv, "--devroot", str(npu.devroot)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env={**env, **environment})


def test_npu_commands_run_on_the_device_chosen(two_npus):
    """--device over NPU_DEVICE, both indexing NPU_VISIBLE_DEVICES' list."""
    npu = two_npus
    for environment, argv, node in (({"NPU_DEVICE": "1"}, (), 1), ({"NPU_DEVICE": "1"}, ("--device", "0"), 0)):
        before = [_jobs(npu, 0), _jobs(npu, 1)]
        result = _npu(npu, "bench", "nop", "-n", "8", "--path", "ioctl", "--json", *argv, **environment)
        assert result.returncode == 0, result.stderr
        grew = [_jobs(npu, i) > before[i] for i in (0, 1)]
        assert grew == [node == 0, node == 1], (environment, argv)
    refused = _npu(npu, "bench", "nop", "-n", "8", "--device", "1", NPU_VISIBLE_DEVICES="1")
    assert refused.returncode == 1
    assert refused.stderr == ("npu bench nop: error: device 1 is not visible: NPU_VISIBLE_DEVICES='1' "
                              "shows devices 0-0\n")


def test_libnpu_and_the_delegate_see_only_the_visible_devices(two_npus, monkeypatch):
    monkeypatch.setenv("NPU_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("NPU_DEVICE", raising=False)
    with Session(two_npus.devroot) as session:
        assert session.device_count() == 1
        assert session.open().path == two_npus.devroot / "npu1"
        with pytest.raises(DeviceChoiceError):
            session.open(1)
    shared = _SharedDevice(DelegateOptions(devroot=str(two_npus.devroot)))
    try:
        assert shared.device.path == two_npus.devroot / "npu1"
        assert shared.device.info()["num_contexts"] >= 1
    finally:
        shared.session.destroy()
