"""What one BLAS thread saves the compiler (``libnpu/compiler/blas_threads.py``): GPTQ's
rounding of one unrolled LSTM gate (``weight_rounding.round_layer``, its inverse and
Cholesky factor of the ``[K + 1, K + 1]`` input moments) timed with numpy's BLAS at its
default thread count and on one thread, alternately in one run, with the load average.
Run from the repository root::

    python -m benchmarks.blas_threads                 # hidden 128 and 512, 5 rounds each
    python -m benchmarks.blas_threads --hidden 512 --rounds 9

Measured 2026-11-29 on the 2-CPU machine shared with other sessions (OpenBLAS, 2 threads by
default), load average 7.1-7.2, median seconds per layer over 5 rounds:

====== ================ ============ =====
hidden default threads  one thread   ratio
====== ================ ============ =====
128    0.0148           0.0122       1.2x
512    1.4181           0.2199       6.4x
====== ================ ============ =====

ddddocr's recognizer (bidirectional LSTM, hidden 512, 32 steps) has 256 such layers per
GPTQ pass. Its default compile (``python -m benchmarks.escalation_cost --models
ddddocr-rec``, branch ddddocr, load 8.6-13.6) took 154 s (``--recipe fast``: 59 s), choosing
int16 activations (int8 step 8.9 s, worst held-out 0.9834; int16 activations 94.6 s, 0.9997);
before it (the last session's run on main, load ~20) it did not finish within the corpus's 900 s.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from libnpu.compiler.weight_rounding import round_layer


def _layer(hidden: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One gate's recurrent FC: weights [hidden, hidden], bias, per-row scales, and the
    input moments of random hidden states (with the bias's column)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1, 1, (hidden, hidden)) / np.sqrt(hidden)
    bias = rng.uniform(-0.1, 0.1, hidden)
    x = np.tanh(rng.standard_normal((4 * hidden, hidden)))
    x = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    scale = np.abs(w).max(axis=1) / 127
    return w, bias, scale, x.T @ x / len(x)


def _seconds(layer: tuple[np.ndarray, ...]) -> float:
    w, bias, scale, moment = layer
    started = time.perf_counter()
    round_layer("FULLY_CONNECTED", w, scale, moment, bias)
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    threads = {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    print(f"BLAS threads by default: {sorted(threads)}; load average {os.getloadavg()}")
    for hidden in args.hidden:
        layer = _layer(hidden)
        pooled, single = [], []
        for _ in range(args.rounds):        # alternately: the load moves both alike
            pooled.append(_seconds(layer))
            with threadpool_limits(limits=1, user_api="blas"):
                single.append(_seconds(layer))
        p, s = statistics.median(pooled), statistics.median(single)
        print(f"hidden {hidden}: default threads {p:.4f} s, one thread {s:.4f} s per layer ({p / s:.1f}x)")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
