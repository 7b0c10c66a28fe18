"""Grouping a model's CPU operators into host calls: those the data flow lets run together share one.

Each host call costs a chip partition boundary: the job before it ends, the host runs,
the next job starts. The importers (:mod:`~libnpu.compiler.onnx_import`,
:mod:`~libnpu.compiler.tflite_import`) make one host call per group this module forms,
walking the operators in the order it gives, where every group's members are adjacent.

A CPU operator joins an earlier group unless some path leads from that group to it
through an operator outside the group (the group, run as one call, would then both feed
and wait for that operator: a cycle). So CPU operators that are adjacent in the file, or
only separated by chip operators they do not depend on (parallel branches), share one
call; a CPU operator fed by a chip operator fed by a group starts a new group. The order
is a topological one: the units (groups and single operators) sorted as early as their
dependencies allow, ties broken by their position in the file.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Sequence

__all__ = ["HostGroups", "group_host_ops"]


class HostGroups:
    """The operators in an order where each group's members are adjacent, and each CPU
    operator's group (an int; operators of a group keep their file order)."""

    def __init__(self, order: list[int], group: dict[int, int]) -> None:
        self.order = order
        self.group = group

    def count(self) -> int:
        """How many host calls the groups make."""
        return len(set(self.group.values()))


def group_host_ops(ops: Sequence[tuple[Sequence[Hashable], Sequence[Hashable]]], host: Collection[int],
                   alone: Callable[[int], bool] = lambda i: False) -> HostGroups:
    """Group the CPU operators ``host`` of ``ops`` (each ``(inputs, outputs)`` by tensor
    name or index, in a topological order, as a model file lists them).

    ``alone(i)``: operator ``i`` must be a host call of its own (e.g. a user's Python
    function). Names no operator writes (graph inputs, constants) are ignored.
    """
    producer = {t: k for k, (_, outs) in enumerate(ops) for t in outs}
    preds = [sorted({producer[t] for t in ins if t in producer and producer[t] != k})
             for k, (ins, _) in enumerate(ops)]
    group: dict[int, int] = {}
    reach: list[set[int]] = []      # groups an operator depends on
    around: list[set[int]] = []     # groups reaching it through an operator outside them
    last = -1
    for k in range(len(ops)):
        depends: set[int] = set()
        outside: set[int] = set()
        for p in preds[k]:
            depends |= reach[p]
            outside |= around[p] | {g for g in reach[p] if g != group.get(p)}
            if p in group:
                depends.add(group[p])
        reach.append(depends)
        around.append(outside)
        if k not in host:
            continue
        fed_by = [group[p] for p in preds[k] if p in group and group[p] not in outside]
        choices = [g for g in [*fed_by[::-1], last] if g >= 0 and g not in outside and not alone(k)
                   and not _alone_group(g, group, alone)]
        if choices:
            group[k] = choices[0]
        else:
            last += 1
            group[k] = last
        reach[k].add(group[k])
    return HostGroups(_order(len(ops), preds, group), group)


def _alone_group(g: int, group: dict[int, int], alone: Callable[[int], bool]) -> bool:
    return any(alone(k) for k, h in group.items() if h == g)


def _order(count: int, preds: list[list[int]], group: dict[int, int]) -> list[int]:
    """A topological order of the operators with each group's members adjacent, and as few
    switches between chip operators and host calls as a greedy walk gives: it stays with
    the kind it runs (ties by file position) while one is ready, and starts with the host
    calls ready from the start. Each switch is a chip job ending or starting: a host call
    reading only model inputs (a mask's Not / Cast, an id's lookup) runs before the first
    job instead of splitting the chip's work in two, and the chip runs all it can before a
    host call instead of coming back after it."""
    unit = [("g", group[k]) if k in group else ("op", k) for k in range(count)]
    members: dict[tuple[str, int], list[int]] = {}
    for k in range(count):
        members.setdefault(unit[k], []).append(k)
    needs = {u: {unit[p] for k in ks for p in preds[k]} - {u} for u, ks in members.items()}
    users: dict[tuple[str, int], list[tuple[str, int]]] = {u: [] for u in members}
    for u, ds in needs.items():
        for d in ds:
            users[d].append(u)
    pending = {u: len(ds) for u, ds in needs.items()}
    ready: dict[str, list[tuple[int, tuple[str, int]]]] = {"g": [], "op": []}   # host calls, chip operators
    for u, n in pending.items():
        if n == 0:
            ready[u[0]].append((members[u][0], u))
    for heap in ready.values():
        heapq.heapify(heap)
    order: list[int] = []
    kind = "g"
    while ready["g"] or ready["op"]:
        if not ready[kind]:
            kind = "op" if kind == "g" else "g"
        _, u = heapq.heappop(ready[kind])
        order += members[u]
        for v in users[u]:
            pending[v] -= 1
            if pending[v] == 0:
                heapq.heappush(ready[v[0]], (members[v][0], v))
    assert len(order) == count, "grouping made a cycle"     # excluded by construction (see the docstring)
    return order
