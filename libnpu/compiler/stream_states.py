"""A stateful graph's samples as the calls of one stream: each sample with the state the
float graph carries into it.

A stateful graph (``Graph.states``: ``--state`` caches, TFLite variables) is calibrated
on its samples as one stream, each run starting from the state the run before left
(:class:`libnpu.compiler.quantizer.Calibrator`). Its held-out samples (the stream's tail,
:func:`libnpu.compiler.held_out.split_held_out`) were measured each from the state's
initial value, zeros: a cache the model never reads after its first call, on which a
cache's grid makes no error at all (zeros are exact on any grid), so the escalation judged
a streaming model on cold starts only. :func:`with_stream_states` gives every sample the
float state it starts from in the stream; the float and the quantized graph then both start
there (the quantized one from that state on its own grid:
:func:`libnpu.compiler.accuracy.quantized_feed`), as a package's wrapper feeds a model its
caches, and as the corpus judges such models.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .float_ref import FloatInterpreter, to_real
from .ir import Graph

__all__ = ["with_stream_states"]

Feed = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def with_stream_states(graph: Graph, data: Sequence[Feed]) -> list[Feed]:
    """``data`` (the calls of one stream, in order) each with the state the float ``graph``
    carries into it from the states' initial values, by state input name (real values);
    ``data`` as it is for a graph without states."""
    if not graph.states:
        return list(data)
    step = graph.stateless()      # the states as plain inputs and outputs: one call is one step
    run = FloatInterpreter(step)
    state = {s.input: to_real(graph.tensors[s.input], s.initial) for s in graph.states}
    result: list[Feed] = []
    for feed in data:
        named = dict(feed) if isinstance(feed, Mapping) else dict(zip(graph.inputs, feed, strict=True))
        result.append({**named, **state})
        out = run.run({**named, **state})
        state = {s.input: np.asarray(out[s.output], np.float32) for s in graph.states}
    return result
