"""How a job fails: the chip classifies a failure only by an explicit check.

A check that finds a descriptor, or the data it points to, unusable raises
``InvalidCommand`` (the job fails with EINVAL); the DMA engine raises ``IommuFault``
(EFAULT) and ``BusError`` (EIO).  Any other exception inside a job is a fault of the
chip itself: the executor fails the job with EIO, writes the traceback to the chip's
log and the core carries on (``executor.run_job``)."""
from __future__ import annotations

import errno


class JobFailure(Exception):
    """A job failure found by an explicit check; the job ends with ``-errno``."""

    errno: int = errno.EIO


class InvalidCommand(JobFailure, ValueError):
    """A descriptor or operand the chip cannot execute (EINVAL).

    Also a ValueError, so the kernels keep their library contract for callers outside
    the chip (tests, benchmarks)."""

    errno = errno.EINVAL
