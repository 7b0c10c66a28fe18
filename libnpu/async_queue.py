"""OpenVINO's ``AsyncInferQueue``: a fixed set of requests kept busy, one callback for all.

``queue = AsyncInferQueue(model, jobs=4)`` creates ``jobs`` requests of ``model`` (0: the
model's OPTIMAL_NUMBER_OF_INFER_REQUESTS).  ``queue.set_callback(cb)``; then
``queue.start_async(inputs, userdata)`` waits for an idle request, starts it and returns.
When its job ends ``cb(request, userdata)`` runs in a helper thread (after a failed job
too: ``wait_all`` raises its error) and the request is idle again.  ``wait_all()`` waits
until every request is idle and raises the first job error since the last call.
``queue[i]`` is request ``i``; ``is_ready()`` says one is idle, ``get_idle_request_id()``
waits for one.  The pool of :mod:`libnpu.pool` is the same idea in FuriosaAI's shape.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from libnpu.tensors import Inputs

log = logging.getLogger("libnpu.async_queue")

__all__ = ["AsyncInferQueue"]


class QueueRequest(Protocol):
    """What the queue asks of a request (``libnpu.inference.InferRequest`` answers)."""

    def set_inputs(self, inputs: Inputs) -> None: ...

    def start(self, callback: Callable[[Any, Exception | None], None] | None = None) -> None: ...

    def wait(self, timeout: float | None = None) -> None: ...

    def release(self) -> None: ...


class QueueModel(Protocol):
    """What the queue asks of a model (``libnpu.inference.CompiledModel`` answers)."""

    def create_request(self) -> QueueRequest: ...

    def get_property(self, name: str) -> Any: ...


class AsyncInferQueue:
    """``jobs`` requests of one model, started as they come idle; see the module doc."""

    def __init__(self, model: QueueModel, jobs: int = 0):
        if jobs < 0:
            raise ValueError(f"jobs must be >= 0 (0: the model's optimal number), got {jobs}")
        count = jobs or int(model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self._cond = threading.Condition()
        self._callback: Callable[[QueueRequest, Any], None] | None = None
        self._errors: list[Exception] = []
        self._requests: list[QueueRequest] = []
        try:
            for _ in range(count):
                self._requests.append(model.create_request())
        except BaseException:
            for request in self._requests:       # e.g. ENOMEM half way: give back what was made
                request.release()
            raise
        self._idle = list(range(count))
        self.userdata: list[Any] = [None] * count

    def __len__(self) -> int:
        return len(self._requests)

    def __getitem__(self, index: int) -> QueueRequest:
        return self._requests[index]

    def __iter__(self) -> Iterator[QueueRequest]:
        return iter(self._requests)

    def set_callback(self, callback: Callable[[QueueRequest, Any], None] | None) -> None:
        """``callback(request, userdata)`` after each job (None: no callback)."""
        self._callback = callback

    def is_ready(self) -> bool:
        """A request is idle: ``start_async`` would not wait."""
        with self._cond:
            return bool(self._idle)

    def get_idle_request_id(self, timeout: float | None = None) -> int:
        """The index of an idle request, waiting for one (TimeoutError after ``timeout`` s)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._idle, timeout):
                raise TimeoutError(f"all {len(self)} requests still busy after {timeout} s")
            return self._idle[-1]

    def start_async(self, inputs: Inputs | None = None, userdata: Any = None) -> int:
        """Start an idle request (waiting for one) on ``inputs``; returns its index."""
        if not self._requests:
            raise RuntimeError("this queue has no requests (closed)")
        with self._cond:
            self._cond.wait_for(lambda: self._idle)
            index = self._idle.pop()
        request = self._requests[index]
        self.userdata[index] = userdata
        try:
            if inputs is not None:
                request.set_inputs(inputs)
            request.start(lambda req, error: self._done(index, req, error))
        except BaseException:
            self._give_back(index)
            raise
        return index

    def _done(self, index: int, request: QueueRequest, error: Exception | None) -> None:
        try:
            if error is not None:           # for wait_all(); the callback still runs, as OpenVINO's
                with self._cond:
                    self._errors.append(error)
            if self._callback is not None:
                self._callback(request, self.userdata[index])
        except Exception:  # noqa: BLE001 - one callback's exception must not stall the queue
            log.exception("AsyncInferQueue callback failed (request %d)", index)
        finally:
            self._give_back(index)

    def _give_back(self, index: int) -> None:
        with self._cond:
            self._idle.append(index)
            self._cond.notify_all()

    def wait_all(self, timeout: float | None = None) -> None:
        """Wait until every request is idle; raise the first job error since the last call."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._idle) == len(self._requests), timeout):
                raise TimeoutError(f"requests still running after {timeout} s")
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Wait for the running jobs, then free every request's memory."""
        if self._requests and len(self._idle) != len(self._requests):
            self.wait_all()
        requests, self._requests = self._requests, []
        for request in requests:
            request.release()

    def __enter__(self) -> AsyncInferQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
