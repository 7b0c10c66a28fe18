"""OpenVINO's names for an inference request: ``start_async``, ``set_callback``, ``get_profiling_info``.

Programs written for OpenVINO's ``InferRequest`` use these; :class:`libnpu.inference.InferRequest`
takes them from this mixin, over its own ``set_inputs`` / ``start`` / ``wait`` / ``profile``.
As in OpenVINO, the callback gets the ``userdata`` it was set with, and a job that failed
raises its error from the next ``wait()``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from libnpu.profiling import InferenceProfile, ProfilingInfo
from libnpu.tensors import Inputs

__all__ = ["OpenVinoRequestNames"]


class OpenVinoRequestNames:
    """Mixin of OpenVINO's request names; the host class provides ``set_inputs``, ``start``
    (with a ``callback(request, error)``) and ``profile``, and reads ``_error`` /
    ``_raise_on_wait`` in ``wait()``."""
    profile: InferenceProfile | None
    _error: Exception | None
    _raise_on_wait: bool
    _openvino_callback: tuple[Callable[[Any], None], Any] | None = None

    if TYPE_CHECKING:          # provided by the host class
        def set_inputs(self, inputs: Inputs) -> None: ...

        def start(self, callback: Callable[[Any, Exception | None], None] | None = None) -> None: ...

    def set_callback(self, callback: Callable[[Any], None] | None, userdata: Any = None) -> None:
        """OpenVINO's ``set_callback``: ``callback(userdata)`` runs, in a helper thread, when
        each ``start_async`` inference ends (a failure is raised by ``wait()``); None removes it."""
        self._openvino_callback = None if callback is None else (callback, userdata)

    def start_async(self, inputs: Inputs | None = None, userdata: Any = None) -> None:
        """OpenVINO's ``start_async``: set ``inputs`` (when given) and start; returns at once.
        The callback of ``set_callback`` gets ``userdata`` when given here, else its own."""
        if inputs is not None:
            self.set_inputs(inputs)
        self._error, self._raise_on_wait = None, False      # an earlier start's failure was reported then
        if self._openvino_callback is None:
            self.start()
            return
        callback, data = self._openvino_callback
        if userdata is not None:
            data = userdata

        def done(request: OpenVinoRequestNames, error: Exception | None) -> None:
            request._error, request._raise_on_wait = error, error is not None    # for wait(), as OpenVINO
            callback(data)
        self.start(done)

    def get_profiling_info(self) -> list[ProfilingInfo]:
        """OpenVINO's ``get_profiling_info``: the last inference's layers (PERF_COUNT on; empty
        otherwise), each with its name, operator, where it ran and its measured time."""
        return [] if self.profile is None else self.profile.profiling_info()
