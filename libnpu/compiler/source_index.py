"""Which operator of the source model each IR op came from, carried to the loadable's tasks.

``npu compile --report`` numbers operators by their index in the source model (the ONNX
node, the TFLite operator); the IR ops an import makes do not carry that index, and
optimization and quantization rebuild them (keeping their names). So the import records
the index of each op's source operator by op name in the graph's metadata
(:data:`SOURCE_OPS`, :func:`record_sources`), the passes carry the metadata along, and
lowering writes it into each task's metadata (``task.meta["source"]``,
:func:`task_source_meta`), where ``npu profile`` finds it: a slow layer in the profile
has the number ``--report`` and the source model give it. An op the compiler added (a
QUANTIZE at an input, a requantization) has none. A host step has its own
(``HostStep.source``).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .ir import Graph, Op, SourceOp

__all__ = ["SOURCE_OPS", "record_sources", "task_source_meta", "op_sources"]

SOURCE_OPS = "source_ops"        # graph metadata: IR op name -> its source operator's index


def record_sources(graph: Graph, sources: Iterable[SourceOp]) -> None:
    """Note in ``graph``'s metadata the source operator of each IR op ``sources`` made
    (an op name two sources share keeps the first)."""
    found: dict[str, int] = {}
    for source in sources:
        for op in source.ir_ops:
            found.setdefault(op.name, source.index)
    graph.metadata[SOURCE_OPS] = found


def task_source_meta(sources: dict[str, int], op: Op) -> dict[str, Any]:
    """The task metadata naming ``op``'s source operator ({} when it has none)."""
    return {"source": sources[op.name]} if op.name in sources else {}


def op_sources(metadata: dict[str, Any]) -> dict[str, int]:
    """The op-name map of a graph's metadata (empty for a graph no import made)."""
    return metadata.get(SOURCE_OPS) or {}
