"""A model's job asks for the timeout of its predicted work (libnpu.job_timeouts), within the
device's cap: a large model no longer fails with ETIMEDOUT at the device's default because the
emulated chip is slow, and a job really stuck still times out.

The device here has a default of DEFAULT_MS and a cap of CAP_MS; the model's convolution is
predicted (at regs.WORK_MACS_PER_MS / WORK_BYTES_PER_MS) to need more than the default, and
an unrolled GRU's hundreds of small tasks (at regs.WORK_TASK_US each) too. The
chip writes the timeout of the job it runs in the core's JOB_TIMEOUT_MS register, which the
tests read after the job (one core: its last job)."""
from __future__ import annotations

import errno

import numpy as np
import pytest

import libnpu
from libnpu.compiler.lower import compile_model
from libnpu.job_timeouts import job_timeout_ms
from npu_hw import regs
from tests.support.device import core_registers, set_fault_injection, start_npu, stop_npu, wait_for
from tests.support.model_builders import _Builder
from tests.support.rnn_models import feeds_for, rnn_model

DEFAULT_MS, CAP_MS = 50, 1000


def _conv_model(host_op: str | None = None):
    """Conv 32 -> 32 (3x3) over 80x80: 59 M MACs, predicted above DEFAULT_MS; ``host_op``
    after it runs on the CPU (the chip's work one partition)."""
    b = _Builder(21)
    b.node("Conv", ["x", b.weight("w", 32, 32, 3, 3), b.weight("b", 32, scale=.1)], "c", pads=[1, 1, 1, 1])
    out = b.node("Relu", ["c"], "r" if host_op else "y")
    if host_op:
        b.node(host_op, [out], "y")
    return b.model("long_conv", {"x": [1, 32, 80, 80]}, {"y": [1, 32, 80, 80]})


@pytest.fixture(scope="module")
def slow_default_npu(tmp_path_factory):
    """One core whose default job timeout is DEFAULT_MS and cap CAP_MS."""
    mounted = start_npu(tmp_path_factory.mktemp("timeouts"), extra=(
        "--cores", "1", "--watchdog-ms", str(DEFAULT_MS), "--max-job-timeout", str(CAP_MS / 1000)))
    yield mounted
    stop_npu(mounted)


@pytest.fixture(scope="module")
def conv_loadable():
    return compile_model(_conv_model().SerializeToString(), recipe="fast")


def _expected(loadable, tasks: range | None = None) -> int:
    chosen = loadable.tasks if tasks is None else loadable.tasks[tasks.start:tasks.stop]
    return regs.work_timeout_ms(sum(t.macs for t in chosen), sum(t.bytes_moved for t in chosen), len(chosen),
                                DEFAULT_MS, CAP_MS)


def test_the_work_rule_asks_the_default_below_it_and_the_cap_above(conv_loadable) -> None:
    per_ms, task_ms = regs.WORK_MACS_PER_MS, regs.WORK_TASK_US / 1000
    assert regs.work_timeout_ms(per_ms * 40, 0, 0, DEFAULT_MS, CAP_MS) == 0            # the default covers it
    assert regs.work_timeout_ms(per_ms * 400, 0, 0, DEFAULT_MS, CAP_MS) == 400
    assert regs.work_timeout_ms(per_ms * 400, regs.WORK_BYTES_PER_MS * 100, 0, DEFAULT_MS, CAP_MS) == 500
    assert regs.work_timeout_ms(per_ms * 400, 0, 200, DEFAULT_MS, CAP_MS) == 400 + 200 * task_ms
    assert regs.work_timeout_ms(0, 0, 200, DEFAULT_MS, CAP_MS) == 200 * task_ms       # tasks alone
    assert regs.work_timeout_ms(per_ms * 10 ** 6, 0, 0, DEFAULT_MS, CAP_MS) == CAP_MS  # never past the cap
    assert regs.work_timeout_ms(per_ms * 10 ** 6, 0, 0, DEFAULT_MS, DEFAULT_MS) == 0   # a cap at the default
    assert DEFAULT_MS < _expected(conv_loadable) < CAP_MS


@pytest.mark.parametrize("queues", [True, False], ids=["user-queue", "submit"])
def test_a_models_job_asks_for_the_timeout_of_its_predicted_work(slow_default_npu, conv_loadable,
                                                                  queues: bool) -> None:
    """Failed before: every model job asked 0, the device's DEFAULT_MS."""
    model = libnpu.load(conv_loadable, devroot=slow_default_npu.devroot)
    try:
        model.device.use_queues = queues
        x = np.random.default_rng(0).standard_normal((1, 32, 80, 80)).astype(np.float32)
        model.create_request().infer([x])
        assert core_registers(slow_default_npu.devroot, regs.JOB_TIMEOUT_MS) == [_expected(conv_loadable)]
        assert model.job_timeout_ms == job_timeout_ms(conv_loadable, None, model.timeout_limits)
    finally:
        model.close()


def test_each_partition_asks_for_its_own_work(slow_default_npu) -> None:
    loadable = compile_model(_conv_model("Sin").SerializeToString(), recipe="fast")
    (chip, steps), *rest = loadable.partitions()
    assert steps and chip and not any(tasks for tasks, _ in rest)      # the convolution, then Sin on the CPU
    model = libnpu.load(loadable, devroot=slow_default_npu.devroot)
    try:
        model.create_request().infer([np.ones((1, 32, 80, 80), np.float32)])
        assert core_registers(slow_default_npu.devroot, regs.JOB_TIMEOUT_MS) == [_expected(loadable, chip)] \
            != [DEFAULT_MS]
    finally:
        model.close()


def test_a_job_of_many_small_tasks_asks_for_their_first_run(slow_default_npu) -> None:
    """An unrolled GRU: 636 tasks of 40 K MACs and 137 KB in all, which MACs and bytes predict
    at 4 ms, but whose first run decodes, translates and binds each task (~0.2 ms of CPU a
    task). Failed before (a job asked for its MACs and bytes alone: 0, the default): the
    first inference failed with ETIMEDOUT at DEFAULT_MS."""
    source = rnn_model("GRU", steps=40, hidden=16, outputs=("Y",))
    loadable = compile_model(source.SerializeToString(), recipe="fast")
    macs, moved = sum(t.macs for t in loadable.tasks), sum(t.bytes_moved for t in loadable.tasks)
    assert regs.work_timeout_ms(macs, moved, 0, DEFAULT_MS, CAP_MS) == 0        # their work alone: the default
    model = libnpu.load(loadable, devroot=slow_default_npu.devroot)
    try:
        assert model.job_timeout_ms == _expected(loadable) >= len(loadable.tasks) * regs.WORK_TASK_US // 1000
        model.create_request().infer(feeds_for(source, np.random.default_rng(0)))     # its first run
        assert core_registers(slow_default_npu.devroot, regs.JOB_TIMEOUT_MS) == [model.job_timeout_ms]
    finally:
        model.close()


@pytest.mark.recovery
def test_a_stuck_model_job_still_times_out_at_its_timeout(slow_default_npu, conv_loadable) -> None:
    model = libnpu.load(conv_loadable, devroot=slow_default_npu.devroot)
    try:
        request = model.create_request()
        set_fault_injection(slow_default_npu.devroot, regs.FAULT_HANG)
        try:
            with pytest.raises(libnpu.JobError) as failed:
                request.infer([np.zeros((1, 32, 80, 80), np.float32)])
        finally:
            set_fault_injection(slow_default_npu.devroot, 0)
        assert failed.value.errno == errno.ETIMEDOUT
        wait_for(lambda: core_registers(slow_default_npu.devroot, regs.CORE_STATE) == [regs.CORE_IDLE],
                 "the core restarted")
        request.infer([np.zeros((1, 32, 80, 80), np.float32)])        # and it serves again
    finally:
        model.close()
