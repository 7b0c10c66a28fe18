"""How the compiler reports progress: one callback, ``progress(stage, done, total)``.

The stages are "import", "optimize", "calibrate", "quantize" and "lower" (an int8 model
skips the middle three), and when the quantizer is asked for them "equalize" (before
"calibrate"), "weight rounding" (before "quantize"), "bias correction" and "accuracy"
(after it), and with the default recipe "measure" after each quantization it tries
(:mod:`libnpu.compiler.escalation`; a step that escalates repeats the stages before it, and
each step is a stage too, "step int8", "step int16 activations", ..., around its own).
Each stage is reported
as it starts (``done`` 0) and as it ends (``done == total``); "calibrate" counts
calibration runs and "bias correction" ops, so they are also reported after every step.
A caller that times the calls gets each stage's duration.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Progress", "stage"]

#: ``progress(stage, done, total)``
Progress = Callable[[str, int, int], None]


@contextmanager
def stage(progress: Progress | None, name: str, total: int = 1) -> Iterator[None]:
    """Report ``name`` as started on entry and as done on a normal exit."""
    if progress is not None:
        progress(name, 0, total)
    yield
    if progress is not None:
        progress(name, total, total)
