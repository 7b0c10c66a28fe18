"""Scratch buffers the float reference's convolutions reuse within one compile, instead of
a fresh array per call.

A convolution's patch matrix at full resolution is large (U2-Net-p at 320 x 320: 236 MB),
and a fresh one per call costs more in the kernel's page faults than the copy into it costs
(0.16-0.22 s of system time against 0.13 s of user time per such call on the 2-CPU
development machine), a quarter of a default compile's CPU time. Inside
:func:`reusing_scratch` (what each :meth:`libnpu.compiler.float_ref.FloatInterpreter.run`
opens, and :func:`libnpu.compiler.escalation.quantize_to_target` around all its steps)
:func:`scratch` hands out views of one buffer per dtype, grown as needed and dropped when
the outermost scope ends; outside it, a fresh array, as before. The values computed are
the same either way: the buffer is only ever written in full before it is read.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["reusing_scratch", "scratch"]

_BUFFERS: ContextVar[dict[np.dtype, np.ndarray] | None] = ContextVar("npu_scratch", default=None)


@contextmanager
def reusing_scratch() -> Iterator[None]:
    """A scope in which :func:`scratch` reuses its buffers (a nested scope shares the outer one's)."""
    if _BUFFERS.get() is not None:
        yield
        return
    token = _BUFFERS.set({})
    try:
        yield
    finally:
        _BUFFERS.reset(token)


def scratch(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialized C-ordered array of ``shape``: inside :func:`reusing_scratch` a view of
    the scope's buffer for ``dtype``, valid until the next call (the caller reads it before
    asking again), else a fresh array."""
    buffers = _BUFFERS.get()
    if buffers is None:
        return np.empty(shape, dtype)
    kind = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    buffer = buffers.get(kind)
    if buffer is None or buffer.size < size:
        buffer = buffers[kind] = np.empty(size, kind)
    return buffer[:size].reshape(shape)
