"""A job the chip refuses names the task it refused: the raw job's index on a user queue
(the header's failed_task, ABI 2.9), and through the runtime the loadable's task, operator
and layer (libnpu.job_faults); a later job of the queue and another queue are not affected."""
from __future__ import annotations

import errno
import re

import numpy as np
import pytest

import libnpu
from kmd_fuse import paths
from libnpu.errors import JobError
from libnpu.job_faults import name_failed_task
from libnpu.loadable import Loadable
from npu_hw import tasks
from tests.support.device import wait_until

pytestmark = pytest.mark.recovery     # queues (benchmarks/flake_hunt.py -m recovery)


def _refused_at(device, count: int, bad: int):
    """``count`` NOPs but the one at ``bad``: a LOG_SOFTMAX the chip refuses (rows x depth past its limit)."""
    data = device.alloc_mem(4096)
    cmds = device.command_buffer()
    for i in range(count):
        if i == bad:
            cmds.add("LOG_SOFTMAX", input=data.address, output=data.address, rows=1 << 16, depth=1 << 16)
        else:
            cmds.add("NOP")
    return cmds


def test_a_refused_task_is_named_by_its_index_on_the_queue(device):
    queue, other = device.create_queue(), device.create_queue()
    for bad in (5, 2):
        with pytest.raises(libnpu.JobError) as caught:
            device.queue_submit(queue, _refused_at(device, 8, bad)).wait(30)
        assert caught.value.errno == errno.EINVAL and caught.value.task_index == bad
        assert f"failed at task {bad}" in str(caught.value)
    nop = device.command_buffer()
    nop.add("NOP")
    assert device.queue_submit(queue, nop).wait(30).status == 0      # the queue serves on
    assert device.queue_submit(other, nop).wait(30).status == 0      # another queue knows nothing of it


def test_the_runtime_names_the_layer_of_the_refused_task(session, resnet8_nlb, tmp_path):
    device = session.open(0)
    loadable = Loadable.load(resnet8_nlb, use_mmap=False)
    bad = len(loadable.tasks) // 2
    task = loadable.tasks[bad]
    # The chip checks a descriptor as it reaches it: rows x depth past its limit (no address read).
    task.payload, task.relocs = tasks.encode_task("LOG_SOFTMAX", rows=1 << 16, depth=1 << 16), []
    path = tmp_path / "refused.nlb"
    loadable.save(path)
    model = libnpu.load(path, device)
    try:
        request = model.create_request()
        inputs = [np.zeros(d.shape, d.dtype) for d in model.inputs]
        with pytest.raises(libnpu.JobError) as caught:
            request.infer(inputs)
        assert caught.value.errno == errno.EINVAL and caught.value.task_index == bad
        assert f"job failed at task {bad} ({task.op} {task.name!r})" in str(caught.value)
        request.start()                           # submitted, then waited for: the same
        with pytest.raises(libnpu.JobError) as caught:
            request.wait(30)
        assert caught.value.task_index == bad and caught.value.task_name == f"{task.op} {task.name!r}"
    finally:
        model.close()
    # A partition's job counts its tasks from its own first: the loadable's index adds it.
    named = name_failed_task(JobError(errno.EINVAL, "job", "queue 0 job 1 failed", task_index=2), loadable, bad - 2)
    assert (named.task_index, named.task_name) == (bad, f"{task.op} {task.name!r}")


def test_a_submitted_jobs_refused_task_and_reason_are_in_the_log(npu, device):
    """SUBMIT's fence has no room for the index: the driver logs it, the chip the reason."""
    with pytest.raises(libnpu.JobError) as caught:
        device.run(_refused_at(device, 6, 3), [])
    assert caught.value.errno == errno.EINVAL
    log = paths.log_file(npu.devroot, 0)
    # both lines are written before the reply, but the file is other processes': wait on it
    wait_until(lambda: log.read_text().count("failed at task 3") >= 2)
    text = log.read_text()
    assert re.search(r"chip: a job of ASID \d+ failed at task 3: .*rows/depth", text), text[-2000:]
    assert re.search(r"WARNING job \d+ of context \d+ \(fence \d+\) failed at task 3: EINVAL", text), text[-2000:]
