"""One BLAS thread while the compiler runs: its numpy linear algebra is many small problems
(GPTQ's inverse and Cholesky factor of each layer's ``[K, K]`` input moments, a convolution's
GEMM on one picture), where a BLAS thread pool costs more than it gains, and on a busy
machine far more: with OpenBLAS's two threads on the 2-CPU development machine at load
~15, ``inv`` + ``cholesky`` of a 129 x 129 matrix took 176 ms of wall time against 0.5 ms
on one thread, 513 x 513 1.7 s against 0.16 s (the threads wait on each other for a CPU).
An unrolled recurrent model has one GPTQ layer per time step and gate (ddddocr's
recognizer: 256 layers of 513 columns, twice), so its default compile did not finish in
15 minutes. One thread also makes the float results independent of the machine's CPU count.

:func:`one_blas_thread` is a context manager and a decorator (``threadpoolctl``: it limits
the BLAS libraries numpy has loaded, and restores their thread counts after)."""
from __future__ import annotations

from contextlib import ContextDecorator
from typing import Any

from threadpoolctl import threadpool_limits

__all__ = ["one_blas_thread"]


class one_blas_thread(ContextDecorator):  # noqa: N801 - read as a function: ``with one_blas_thread():``
    """Limit numpy's BLAS to one thread inside the block (or the decorated function)."""

    def __enter__(self) -> one_blas_thread:
        self._limits = threadpool_limits(limits=1, user_api="blas")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._limits.restore_original_limits()
