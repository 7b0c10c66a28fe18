"""Keep numpy's BLAS single-threaded in the chip.

Each simulated core is its own process doing many small GEMMs. OpenBLAS's default thread
pool wakes a second thread per call; on a loaded 2-core machine that costs more than the
GEMM itself (measured: MobileNet pointwise layers 20-40x slower). The kernels call
:func:`limit_blas_threads` once on import. Nothing happens if the BLAS is not OpenBLAS.
"""
from __future__ import annotations

import ctypes

__all__ = ["limit_blas_threads"]

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


def _loaded_openblas() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
    except OSError:
        return []
    return sorted(p for p in paths if "openblas" in p.lower() and ".so" in p)


def limit_blas_threads(n: int = 1) -> bool:
    """Set OpenBLAS's thread count in this process; True if a library took it."""
    import numpy  # noqa: F401  (make sure numpy's BLAS is loaded)

    done = False
    for path in _loaded_openblas():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(int(n))
                done = True
                break
    return done
