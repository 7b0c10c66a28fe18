"""A bounded pool of inference requests, as FuriosaAI's task model has it.

``pool = model.create_pool(max_batch=4, on_output=..., on_error=..., on_finish=...)``
owns ``max_batch`` requests (their device memory is allocated once).  ``get_task()``
hands out a free one, blocking while all are busy; ``try_get_task()`` returns None
instead.  ``task.run(inputs, context)`` submits it and returns at once; when the job
ends the pool calls ``on_output(task, outputs)`` or ``on_error(task, error)``, then
``on_finish(task)``, and only then is the request free again.  ``all_done()`` says no
task is running; ``wait_all()`` waits for that.

Each request has a worker thread of its own: ``run`` copies the inputs in and wakes it,
and the worker submits the job and waits for it in one round trip to the driver (SUBMIT
with WAIT: half the requests a submit-then-WAIT costs, which shows on a busy 2-vCPU
machine); no thread is started per inference.  Callbacks run in those workers; an
exception a callback raises (``SystemExit`` and ``KeyboardInterrupt`` too) is logged and
the pool carries on.  A callback may take and run tasks, and may close the pool or its
model: ``close`` then waits for the other running tasks, not for the callback's own.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from libnpu.errors import ClosedError
from libnpu.profiling import InferenceProfile, Timing
from libnpu.tensors import Inputs

log = logging.getLogger("libnpu.pool")


class PoolRequest(Protocol):
    """What a pool asks of its requests (``libnpu.inference.InferRequest`` answers). A
    protocol, so that this module imports nothing of the runtime, which imports it."""

    timing: Timing
    profile: InferenceProfile | None

    def set_inputs(self, inputs: Inputs) -> None: ...

    def run_sync(self, started: float) -> None: ...

    def outputs(self, dequantized: bool = False) -> list[np.ndarray]: ...

    def release(self) -> None: ...


class PoolModel(Protocol):
    """What a pool asks of its model (``libnpu.inference.CompiledModel`` answers)."""

    def create_request(self) -> PoolRequest: ...

    def _forget_pool(self, pool: RequestPool) -> None: ...


OutputCallback = Callable[["Task", list[np.ndarray]], None]
ErrorCallback = Callable[["Task", Exception], None]
FinishCallback = Callable[["Task"], None]


class Task:
    """One request of a pool, handed out by ``get_task``: fill it with ``run``."""

    def __init__(self, pool: RequestPool, request_id: int, request: PoolRequest):
        self.pool, self.request_id, self.request = pool, request_id, request
        self.id = 0                     # this run's id, unique in the pool (set by run)
        self.context: Any = None        # what the caller passed to run, for its callbacks
        self.outputs: list[np.ndarray] | None = None
        self.error: Exception | None = None
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._held = False
        self._started_at = 0.0

    @property
    def timing(self) -> Timing:
        """Wall latency and simulated device time of the last run."""
        return self.request.timing

    @property
    def profile(self) -> InferenceProfile | None:
        """The last run's per-layer profile (with PERF_COUNT on), else None."""
        return self.request.profile

    def run(self, inputs: Inputs, context: Any = None) -> int:
        """Start this task; returns its id at once.  The pool's callbacks hear the result
        (``timing.latency_s`` counts from this call)."""
        self.pool._started(self)
        try:
            self.context, self.outputs, self.error = context, None, None
            self.request.set_inputs(inputs)
        except BaseException:
            self.pool._not_started(self)
            raise
        self._started_at = time.perf_counter()
        self._wake.put(True)
        return self.id

    def give_back(self) -> None:
        """Return a task taken with ``get_task`` without running it."""
        self.pool._give_back(self)

    def __repr__(self) -> str:
        return f"<Task {self.id} request {self.request_id}>"


class RequestPool:
    """``max_batch`` requests of one model; see the module doc."""

    def __init__(self, model: PoolModel, max_batch: int, on_output: OutputCallback | None = None,
                 on_error: ErrorCallback | None = None, on_finish: FinishCallback | None = None):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model, self.max_batch = model, max_batch
        self.on_output, self.on_error, self.on_finish = on_output, on_error, on_finish
        self._free: queue.SimpleQueue[Task | None] = queue.SimpleQueue()   # None: closed, wake up
        self._ids = itertools.count(1)
        self._running = 0
        self._idle = threading.Condition()
        self._closed = False
        self.tasks: list[Task] = []
        try:
            for request_id in range(max_batch):
                self.tasks.append(Task(self, request_id, model.create_request()))
        except BaseException:
            for task in self.tasks:
                task.request.release()
            raise
        self._workers = [threading.Thread(target=self._serve, args=(task,), daemon=True,
                                          name=f"npu-pool-{request_id}")
                         for request_id, task in enumerate(self.tasks)]
        for task, worker in zip(self.tasks, self._workers):
            self._free.put(task)
            worker.start()

    # ---- handing out ----
    def get_task(self, timeout: float | None = None) -> Task:
        """A free task; blocks while every request is busy (TimeoutError after ``timeout`` s)."""
        self._check_open()
        try:
            task = self._free.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"all {self.max_batch} requests still busy after {timeout} s") from None
        return self._take(task)

    def try_get_task(self) -> Task | None:
        """A free task, or None when all ``max_batch`` are busy."""
        self._check_open()
        try:
            return self._take(self._free.get_nowait())
        except queue.Empty:
            return None

    def _take(self, task: Task | None) -> Task:
        if task is None or self._closed:    # closed while we waited: nothing runs any more
            self._free.put(task)            # (None wakes the next thread blocked in get_task)
            self._check_open()
        assert task is not None, "None is put only once the pool is closed"
        task._held = True
        return task

    def _give_back(self, task: Task) -> None:
        if task._held:
            task._held = False
            self._free.put(task)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this request pool is closed")

    # ---- running ----
    def _started(self, task: Task) -> None:
        if not task._held:
            raise RuntimeError(f"task {task.request_id} is not held: take it with get_task() first")
        self._check_open()
        task._held = False
        task.id = next(self._ids)
        with self._idle:
            self._running += 1

    def _not_started(self, task: Task) -> None:
        self._finished()
        task._held = True
        self._give_back(task)

    def _finished(self) -> None:
        with self._idle:
            self._running -= 1
            if not self._running:
                self._idle.notify_all()

    def _serve(self, task: Task) -> None:
        """The worker of one request: wait for its job, call back, free it."""
        while task._wake.get():
            try:
                task.request.run_sync(task._started_at)
                task.outputs = task.request.outputs()
            except Exception as exc:  # noqa: BLE001 - a failed job goes to on_error
                task.error = exc
            self._call(self.on_error if task.error else self.on_output, task,
                       *([task.error] if task.error else [task.outputs]))
            self._call(self.on_finish, task)
            task._held = True
            self._give_back(task)
            self._finished()

    @staticmethod
    def _call(callback: Callable[..., None] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except BaseException:  # noqa: BLE001 - a callback's bug (even sys.exit()) must not stop its worker
            log.exception("request pool callback %r failed", callback)

    def all_done(self) -> bool:
        """No task is running (every run's callbacks have returned)."""
        with self._idle:
            return self._running == 0

    def wait_all(self, timeout: float | None = None) -> bool:
        """Block until ``all_done()``; False if ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, timeout)

    def close(self) -> None:
        """Wait for the running tasks, stop the workers and free every request's memory.
        From a callback, it waits for the other running tasks (the callback's own task ends
        when the callback returns)."""
        if self._closed:
            return
        self._closed = True
        self._free.put(None)            # wakes the threads blocked in get_task: ClosedError
        own = 1 if threading.current_thread() in self._workers else 0
        with self._idle:
            self._idle.wait_for(lambda: self._running <= own)
        for task, worker in zip(self.tasks, self._workers):
            task._wake.put(False)
            if worker is not threading.current_thread():
                worker.join()
        for task in self.tasks:
            task.request.release()
        self.model._forget_pool(self)

    def __enter__(self) -> RequestPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
