"""Put an ONNX graph's nodes in topological order, as onnxruntime does before it runs one.

ONNX requires a graph's nodes to be listed producers first, but tools break the rule and
onnxruntime sorts a graph itself, so such files run there: an fp16 conversion that keeps
float32 inputs and outputs appends its input and output ``Cast`` nodes last, after the
nodes reading them. The importer walks nodes in list order, so :func:`sort_nodes` sorts
them first (the bodies of If / Loop / Scan too). The sort is stable: a node keeps its
place in the file unless a value it reads is made later. The importer keeps numbering
each node by its place in the file (placement, ``--report``), through the order returned.
A real cycle (a node that needs, through others, its own output) is refused.
"""
from __future__ import annotations

import onnx

from .ir import IRError, stable_order
from .onnx_host import reads

__all__ = ["NodeCycleError", "sort_nodes"]


class NodeCycleError(IRError):
    """The graph's nodes read each other's outputs in a circle: no order computes them."""


def sort_nodes(graph: onnx.GraphProto, where: str = "model") -> list[int] | None:
    """Sort ``graph``'s nodes (in place) and those of its subgraphs at any depth into
    topological order, stably. Returns, for each node of the sorted top-level graph, its
    index in the file; None when the top-level nodes were in order already."""
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                sort_nodes(body, f"{where}: {node.op_type} {node.name or node.output[0]!r} body {body.name!r}")
    order = _topological_order(graph, where)
    if order == list(range(len(graph.node))):
        return None
    nodes = [graph.node[k] for k in order]
    del graph.node[:]
    graph.node.extend(nodes)
    return order


def _topological_order(graph: onnx.GraphProto, where: str) -> list[int]:
    """The nodes' indices, each after the producers of what it reads (the file's order
    among nodes free to go: Kahn's algorithm taking the lowest index ready). A name no
    node of this graph makes (an input, an initializer, an outer scope's value, or a
    missing one the importer names) waits for nothing."""
    producer: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer.setdefault(out, k)
    order, waits, readers = stable_order([{producer[n] for n in reads(node) if n in producer}
                                          for node in graph.node])
    if len(order) < len(graph.node):
        stuck = {k for k, w in enumerate(waits) if w}
        while True:     # less what merely waits behind a cycle: a stuck node no stuck node reads
            behind = {k for k in stuck if not stuck.intersection(readers[k])}
            if not behind:
                break
            stuck -= behind
        cycle = sorted(stuck)
        named = ", ".join(f"{graph.node[k].op_type} node {k} ({graph.node[k].name or graph.node[k].output[0]!r})"
                          for k in cycle[:4]) + (f" and {len(cycle) - 4} more" if len(cycle) > 4 else "")
        raise NodeCycleError(f"{where}: the nodes form a cycle (each needs another's output, so none can run "
                             f"first): {named}")
    return order
