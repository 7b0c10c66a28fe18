"""Slurm's generic resource (GRES) ``npu``: the gres.conf lines for a devroot's devices, and
the task prolog that tells a job's tasks which of them Slurm gave the job.

Slurm hands out a GRES by index into the files gres.conf lists; for a GRES it does not
know (anything but ``gpu``), it exports no variable naming them. The task prolog reads
them from ``scontrol show job -d <id>`` (``GRES=npu:2(IDX:0-1)``, ``npu(IDX:3)``) and
prints ``export NPU_VISIBLE_DEVICES=...`` and ``export NPU_DEVROOT=...``, which Slurm
applies to the task's environment (TaskProlog's protocol). gres.conf lists the nodes in
device order, so IDX k is ``npu<k>``; regular files are accepted there (Slurm's cgroup
device rules cover only character and block devices, so they do not restrict them).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

NAME = "npu"
_IDX = re.compile(r"\bGRES=[^\s]*?\b" + NAME + r"\b[^\s(]*\(IDX:([0-9,\-]+)\)")


def gres_conf(devroot: Path, indices: list[int], node_name: str | None = None) -> str:
    """gres.conf's lines for ``npu<i>`` of ``devroot`` (one per device: IDX is then the
    position in ``indices``, which must be sorted), with ``NodeName=`` when given."""
    if indices != sorted(indices):
        raise ValueError("gres_conf: indices must be sorted (Slurm's IDX counts in file order)")
    node = f"NodeName={node_name} " if node_name else ""
    return "".join(f"{node}Name={NAME} File={devroot / f'npu{index}'}\n" for index in indices)


def parse_indices(text: str) -> list[int]:
    """``0-1,3`` -> [0, 1, 3]."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def job_gres_indices(scontrol_show_job: str, job_id: str) -> list[int]:
    """The npu IDX Slurm gave job ``job_id``, from ``scontrol show job -d``'s text (every
    node's line: a job on one node has one); [] when it has none. Only that job's record
    counts: asked for the first task of an array (whose id is the array's), scontrol
    shows every task of the array."""
    records = [r for r in re.split(r"\n\s*\n", scontrol_show_job) if re.match(rf"\s*JobId={job_id}\b", r)]
    return [i for record in records for match in _IDX.finditer(record) for i in parse_indices(match.group(1))]


def task_prolog_lines(job_id: str, devroot: Path, indices: list[int]) -> str:
    """What the task prolog prints for job ``job_id`` whose node's gres.conf lists
    ``npu<i>`` for ``indices`` (in order): the two exports."""
    text = subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True, text=True,
                          check=True, timeout=60).stdout
    given = [indices[k] for k in job_gres_indices(text, job_id) if k < len(indices)]
    return f"export NPU_DEVROOT={devroot}\nexport NPU_VISIBLE_DEVICES={','.join(map(str, given))}\n"
