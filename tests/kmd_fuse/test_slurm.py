"""Slurm's GRES glue: gres.conf lines in device order, and the devices a job was given as
``scontrol show job -d`` says them (the end-to-end run: benchmarks/slurm_acceptance.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kmd_fuse import slurm


def test_gres_conf_lists_the_nodes_in_device_order():
    assert slurm.gres_conf(Path("/d"), [0, 2], "n1") == "NodeName=n1 Name=npu File=/d/npu0\n" \
                                                      "NodeName=n1 Name=npu File=/d/npu2\n"
    with pytest.raises(ValueError):
        slurm.gres_conf(Path("/d"), [2, 0])


@pytest.mark.parametrize("line, indices", [
    ("   Nodes=h CPU_IDs=0 Mem=0 GRES=npu:1(IDX:2)", [2]),
    ("   Nodes=h CPU_IDs=0-1 Mem=0 GRES=npu:3(IDX:0-1,3)", [0, 1, 3]),
    ("   Nodes=h CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0),npu(IDX:5)", [5]),
    ("   Nodes=h CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)", []),
    ("   TresPerNode=gres:npu:1", []),
])
def test_the_job_s_devices_are_read_from_scontrol(line, indices):
    assert slurm.job_gres_indices(f"JobId=7 JobName=x\n{line}\n", "7") == indices


def test_only_the_job_s_own_record_counts():
    """scontrol shows every task of an array when asked for its first task (array id == its id)."""
    text = "".join(f"JobId={job} ArrayJobId=5 ArrayTaskId={job - 5}\n"
                   f"   Nodes=h CPU_IDs=0 Mem=0 GRES=npu:1(IDX:{job - 5})\n\n" for job in (5, 6, 7))
    assert slurm.job_gres_indices(text, "5") == [0]
    assert slurm.job_gres_indices(text, "7") == [2]
