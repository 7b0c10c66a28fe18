"""The executor classifies a job's failure only by the explicit check that found it:
InvalidCommand -> EINVAL, IommuFault -> EFAULT, BusError -> EIO; any other exception
(a plain ValueError included) is the chip's own fault: EIO with the traceback logged."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim import executor
from firmware_sim.dma import BusError
from firmware_sim.errors import InvalidCommand
from firmware_sim.kernels import activations, native
from firmware_sim.kernels.native import calls
from npu_hw import tasks
from tests.support.chip_memory import encode


def _nop_raising(monkeypatch, exc: BaseException) -> None:
    def handler(desc, dma):
        raise exc
    monkeypatch.setitem(executor.HANDLERS, tasks.OP_NOP, handler)


@pytest.mark.parametrize("exc, status", [
    (InvalidCommand("a descriptor field out of range"), -errno.EINVAL),
    (BusError("bus error"), -errno.EIO),
    (ValueError("an internal invariant broke"), -errno.EIO),     # was EINVAL "malformed command buffer"
    (KeyError("internal"), -errno.EIO),                            # escaped run_job and killed the core
    (ZeroDivisionError("internal"), -errno.EIO),
])
def test_failures_are_classified_by_explicit_checks_only(mem, monkeypatch, capfd, exc, status):
    _nop_raising(monkeypatch, exc)
    monkeypatch.setattr(executor, "_REPORTS", executor.ReportLimit())    # other tests' refusals used the last second's
    result = mem.run(encode("NOP"), encode("NOP"))
    assert (result.status, result.task_index) == (status, 0)
    logged = capfd.readouterr().err
    if isinstance(exc, (InvalidCommand, BusError)):    # the reason, one line, no traceback
        assert logged == f"chip: a job of ASID 1 failed at task 0: {exc}\n"
    else:                                      # the traceback is in the chip's log
        assert "internal error in task 0" in logged and type(exc).__name__ in logged


def test_injected_internal_error_fails_the_job_with_eio(mem, capfd):
    result = executor.run_job(mem.dma, 1, 0, 0, executor.HardwareProfile(), inject_internal_error=True)
    assert result.status == -errno.EIO
    assert "injected internal error" in capfd.readouterr().err
    assert mem.run(encode("NOP")).status == 0     # the same engine serves the next job


def test_kernel_checks_raise_the_explicit_error():
    """The kernels' own operand checks (the C kernels' shift check included) raise
    InvalidCommand, still a ValueError for callers of the kernels as a library."""
    with pytest.raises(InvalidCommand):
        activations.relu_family(np.zeros(8, np.int8), input_zp=0, output_zp=0, multiplier=1 << 30, shift=40,
                                act_min=-128, act_max=127)
    with pytest.raises(InvalidCommand):
        calls.quant_arrays(np.array([1 << 40]), np.array([0]))
    library = native.library()
    if library is not None:
        with pytest.raises(InvalidCommand):
            calls.check_status(library.NPU_KERNEL_BAD_SHIFT)
    assert issubclass(InvalidCommand, ValueError)


def test_refused_jobs_log_at_most_ten_lines_a_second():
    """Any local user can make the chip refuse jobs; its lines reach the tmpfs log without
    the daemon's cap, so they are rate-limited, the dropped ones counted."""
    now = [0.0]
    limit = executor.ReportLimit(per_second=10, clock=lambda: now[0])
    admitted = [limit.admit() for _ in range(1000)]
    assert sum(a is not None for a in admitted) == 10
    now[0] = 1.5
    assert limit.admit() == "chip: 990 more failed jobs not logged\n"
    assert limit.admit() == ""
