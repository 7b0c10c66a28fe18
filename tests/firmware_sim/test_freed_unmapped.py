"""A freed buffer is unmapped from every core process.

The chip keeps decoded descriptors and bound C-kernel calls (which hold views of the
buffers they ran on) across jobs. Freeing a buffer makes the driver invalidate the IOTLB
(OP_INVALIDATE on every core's ring); that one path must also drop every cached view,
so the freed memfd (``memfd:npu-bo<id>`` in /proc/<pid>/maps) leaves every core."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

from kmd_fuse import paths
from npu_hw import ops, tasks  # noqa: F401 (ops registers its descriptors)
from tests.support.device import wait_until
from tests.support.quant_utils import random_int8


def _memfd_name(mem) -> str:
    """The name of the memfd backing ``mem`` (``memfd:npu-bo<id>``), from our own maps."""
    start = mem.view.__array_interface__["data"][0]
    for line in Path("/proc/self/maps").read_text().splitlines():
        lo = int(line.split("-", 1)[0], 16)
        if lo == start:
            match = re.search(r"memfd:npu-bo\d+", line)
            assert match, line
            return match.group(0)
    raise AssertionError("the buffer is not mapped here")


def _core_pids(devroot: Path) -> list[int]:
    bus = paths.bus_dir(devroot, 0)
    matched = {int(p) for p in subprocess.run(["pgrep", "-f", f"firmware_sim --bus {bus}"],
                                              capture_output=True, text=True).stdout.split()}
    parents = {p: int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
               for p in matched}
    return sorted(p for p in matched if parents[p] in matched)


def _mapped_in(pid: int, name: str) -> bool:
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    return re.search(re.escape(name) + r"\b(?!\d)", text) is not None


def test_a_freed_buffer_leaves_every_core(npu, device) -> None:
    rng = np.random.default_rng(3)
    x = random_int8(rng, (1, 8, 8, 16))
    w_dw = random_int8(rng, (1, 3, 3, 16))
    w_fc = random_int8(rng, (32, 64))
    fc_x = random_int8(rng, (4, 64))

    def put(array: np.ndarray):
        mem = device.alloc_mem(max(array.nbytes, 64))
        mem.view[:array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return mem

    bufs = dict(x=put(x), w_dw=put(w_dw), w_fc=put(w_fc), fc_x=put(fc_x))
    dw_out, fc_out = device.alloc_mem(8 * 8 * 16), device.alloc_mem(4 * 32)
    cmds = device.command_buffer()
    cmds.add("DEPTHWISE_CONV_2D", input=bufs["x"].address, weights=bufs["w_dw"].address,
             output=dw_out.address, in_shape=(1, 8, 8, 16), out_shape=(1, 8, 8, 16),
             filter_hw=(3, 3), stride=(1, 1), dilation=(1, 1), padding=(1, 1), cin_per_group=1,
             input_zp=0, output_zp=0, multiplier=1 << 30, shift=-6, act_min=-128, act_max=127)
    cmds.add("FULLY_CONNECTED", tasks.FC_DOUBLE_SCALE, input=bufs["fc_x"].address,
             weights=bufs["w_fc"].address, output=fc_out.address, rows=4, in_features=64,
             out_features=32, input_zp=0, output_zp=0, scale=0.001, act_min=-128, act_max=127)
    everything = [*bufs.values(), dw_out, fc_out]
    for _ in range(3):   # more than once: the second run reuses the cached plans
        assert device.run(cmds, everything).status == 0
    names = {key: _memfd_name(mem) for key, mem in bufs.items()}
    cores = _core_pids(npu.devroot)
    assert cores
    ran_on = [pid for pid in cores if _mapped_in(pid, names["w_dw"])]
    assert ran_on, "the job's buffers should be mapped in the core that ran it"
    for mem in [*bufs.values(), dw_out, fc_out]:
        device.free_mem(mem)
    for key, name in names.items():
        assert wait_until(lambda: not any(_mapped_in(pid, name) for pid in cores), timeout=5), \
            f"{key} ({name}) is still mapped in a core after its free"
