"""``model.close()`` frees everything the model allocated, the requests made with
``create_request()`` included, and a closed model or request says so when used.

(Finding 14b of issue 11: close() left the requests from create_request() allocated.)
The figures are the driver's own (GET_STATS of the context): live buffers and bytes.
"""
from __future__ import annotations

import errno

import numpy as np
import pytest

import libnpu
from libnpu.compiler.lower import lower
from libnpu.loadable import Loadable
from libnpu.runtime import ClosedError, Runtime
from libnpu.tools.ops_bench import Layer, build_graph
from tests.support.device import held

PAGE = 4096


@pytest.fixture(scope="module")
def fc_model() -> Loadable:
    """One int8 fully connected layer, 64 -> 32, batch 4 (compiled here, no download)."""
    return lower(build_graph(Layer("fc", "fc", 4, 64, 32), np.random.default_rng(0)))


def test_close_frees_requests_from_create_request(npu, fc_model):
    x = np.random.default_rng(1).integers(-128, 128, (4, 64), dtype=np.int8)
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = held(device)
        model = libnpu.load(fc_model, device)
        expected = model.infer([x])[0]                  # a pooled request
        idle, ran, started = model.create_request(), model.create_request(), model.create_request()
        assert np.array_equal(ran.infer([x])[0], expected)
        started.set_inputs([x])
        started.start()
        started.wait(timeout=30)
        assert held(device)[0] > baseline[0]
        model.close()
        assert held(device) == baseline                 # weights, pooled and created requests: all freed
        for request in (idle, ran, started):
            with pytest.raises(ClosedError, match="model was closed"):
                request.infer([x])
            with pytest.raises(ClosedError):
                request.outputs()
            with pytest.raises(ClosedError):
                request.start()
            request.release()                           # releasing again does nothing
        with pytest.raises(ClosedError, match="is closed"):
            model.infer([x])
        with pytest.raises(ClosedError):
            model.create_request()
        model.close()                                   # closing again does nothing
        assert held(device) == baseline


def test_released_request_is_unusable_and_close_still_balances(npu, fc_model):
    x = np.zeros((4, 64), np.int8)
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = held(device)
        model = libnpu.load(fc_model, device)
        with_weights = held(device)
        request = model.create_request()
        request.infer([x])
        request.release()
        assert held(device) == with_weights
        with pytest.raises(ClosedError, match="it was released"):
            request.infer([x])
        model.infer([x])                                # the model itself still works
        model.close()
        assert held(device) == baseline


def test_requests_in_flight_at_close_end_and_free(npu, fc_model):
    """close() with jobs still running: their memory goes once they end; nothing is left."""
    x = np.ones((4, 64), np.int8)
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        baseline = held(device)
        model = libnpu.load(fc_model, device)
        requests = [model.create_request() for _ in range(4)]
        for request in requests:
            request.set_inputs([x])
            request.start()
        fences = [request.fence for request in requests]
        model.close()
        device.wait(fences, timeout=30)
        assert held(device) == baseline


def test_unloaded_runtime_says_so(npu, fc_model):
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        runtime = Runtime(device)
        runtime.load(fc_model)
        runtime.unload()
        with pytest.raises(ClosedError, match="no model is loaded"):
            runtime.submit()
        with pytest.raises(ClosedError):
            runtime.num_input_tensors()


def test_request_that_runs_out_of_memory_frees_what_it_got(npu, fc_model):
    """ENOMEM half way through a request's allocations leaves nothing behind."""
    with libnpu.initialize(npu.devroot) as session:
        device = session.open(0)
        model = libnpu.load(fc_model, device)
        first = next(r for i, r in enumerate(fc_model.regions) if i not in model.runtime.weights)
        info = device.info()
        room = info["memory_total"] - info["memory_used"]
        filler = device.alloc_mem(room - -(-max(first.size, 1) // PAGE) * PAGE)   # room for one region only
        before = held(device)
        with pytest.raises(libnpu.NpuError) as exc:
            model.create_request()
        assert exc.value.errno == errno.ENOMEM
        assert held(device) == before
        device.free_mem(filler)
        model.close()
