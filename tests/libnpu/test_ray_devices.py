"""libnpu.ray_devices: a task claims a device no other task of the node holds (an flock
per device), NPU_VISIBLE_DEVICES names it for the block (benchmarks/ray_acceptance.py
runs it under a real two-node Ray cluster)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile

import pytest

from libnpu import ray_devices


@pytest.fixture
def devroot(tmp_path, monkeypatch):
    root = tmp_path / "dev"
    root.mkdir()
    for n in (0, 3):                     # the helper only lists the nodes, never opens them
        (root / f"npu{n}").touch()
    monkeypatch.setenv("TMPDIR", str(tmp_path))               # the claims' files, here and in a child
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # (tempfile caches the first answer)
    monkeypatch.delenv("NPU_VISIBLE_DEVICES", raising=False)
    return root


def test_each_claim_gets_a_device_no_other_holds_and_the_variable_names_it(devroot):
    assert ray_devices.node_resources(devroot) == {"npu_emu": 2.0}
    with ray_devices.claimed_device(devroot) as first:
        assert os.environ["NPU_VISIBLE_DEVICES"] == str(first)
        with ray_devices.claimed_device(devroot) as second:
            assert {first, second} == {0, 3}
            with pytest.raises(OSError) as busy, ray_devices.claimed_device(devroot):
                pass
            assert busy.value.errno == errno.EBUSY and "npu_emu" in str(busy.value)
        # another process (another Ray worker) cannot take the one still held
        other = subprocess.run([sys.executable, "-c", "from libnpu import ray_devices\n"
                                f"with ray_devices.claimed_device({str(devroot)!r}) as n: print(n)"],
                               capture_output=True, text=True, timeout=120, env=os.environ)
        assert other.stdout.strip() == str(second)
    assert "NPU_VISIBLE_DEVICES" not in os.environ
