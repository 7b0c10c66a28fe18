"""The compiler runs numpy's BLAS on one thread (``libnpu.compiler.blas_threads``): its small
inverses and GEMMs (GPTQ's, once per unrolled LSTM step and gate) took hundreds of times
their single-thread time when a busy machine starved the BLAS threads of CPUs."""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from libnpu.compiler.lower import compile_model
from tests.support.rnn_models import feeds_for, rnn_model


def _blas_threads() -> set[int]:
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_compile_runs_blas_on_one_thread_and_gives_the_threads_back() -> None:
    model = rnn_model("LSTM", steps=3, hidden=8, direction="bidirectional", outputs=("Y",))
    rng = np.random.default_rng(0)
    data = [feeds_for(model, rng) for _ in range(6)]
    seen: set[int] = set()
    with threadpool_limits(limits=2, user_api="blas"):      # a pool, as on any multi-CPU machine
        assert _blas_threads() == {2}
        compile_model(model.SerializeToString(), data, kind="onnx",
                      progress=lambda *_: seen.update(_blas_threads()))
        assert _blas_threads() == {2}
    assert seen == {1}
