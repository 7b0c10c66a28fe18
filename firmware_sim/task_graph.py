"""Task graphs: a job's tasks run by their dependencies and placed on the job's cores.

A command buffer that starts with ``TASK_GRAPH`` (``npu_hw.tasks``) is a dependency graph:
each task follows exactly the tasks its ``DEPENDS`` descriptors name. The chip checks the
graph before running anything: every dependency names another task of the job and there
is no cycle, else the job fails with EINVAL naming the task (a client writes these
descriptors). Tasks then run in an order the graph allows (Kahn's, the lowest index first
among the ready ones: the compiler's order when it is one).

Placement is the timing model's: as each task ends, it goes to the core where it can start
earliest, once the tasks it follows have ended and the core is free (list scheduling: NVDLA's
engine scheduler likewise hands a task whose dependencies are met to a free engine). The
job's cycles are the last end over the cores, its critical path, instead of the sum; the
profile records each task on the core it was placed on. A buffer without ``TASK_GRAPH`` runs
in order on one core, as before.

The emulator's core process that took the job executes every task of it, one after another
(the other core serves its own jobs meanwhile): the modeled time and the profile's placement
are the chip's, the wall time is one core's (docs/hardware.md, *Task graphs*).
"""
from __future__ import annotations

import heapq
from collections.abc import Iterator

import numpy as np

from firmware_sim.errors import InvalidCommand
from npu_hw import tasks

__all__ = ["Placement", "schedule"]

DecodedTask = tuple[int, tasks.TaskType, np.void]     # (task index, type, descriptor)


class Placement:
    """Where and when each task runs on the modeled cores (see the module doc)."""

    __slots__ = ("_deps", "_end", "_free", "cycles", "placed", "tiles")

    def __init__(self, cores: int, deps: list[list[int]] | None):
        self._deps = deps                    # None: a job in order on one core
        self._free = [0] * cores             # when each core is next free, in cycles
        self._end = [0] * len(deps) if deps is not None else []
        self.cycles = 0                      # the job's: its last task's end
        self.placed = 0
        self.tiles: dict[int, int] = {}      # task index -> the job's core it went to (0: the one that took it)

    @property
    def parallel_deps(self) -> list[list[int]] | None:
        """Each task's dependencies when the job may use several cores (a replay may then run
        it on two threads: ``job_plans.GraphSteps``), else None."""
        return self._deps if len(self._free) > 1 else None

    def place(self, index: int, cycles: int) -> int:
        """Place task ``index``, which takes ``cycles``: returns the job's core it goes to."""
        self.placed += 1
        if self._deps is None:
            self.cycles += cycles
            return 0
        ready = max((self._end[d] for d in self._deps[index]), default=0)
        free = self._free
        tile = min(range(len(free)), key=lambda c: (max(ready, free[c]), c))
        end = max(ready, free[tile]) + cycles
        free[tile] = self._end[index] = end
        self.cycles = max(self.cycles, end)
        self.tiles[index] = tile
        return tile


def schedule(command_buffer: np.ndarray, chip_cores: int) -> tuple[Iterator[DecodedTask], Placement]:
    """The tasks of a command buffer in the order to run them, and their placement.

    A graph job is decoded and checked whole first (``InvalidCommand`` for a bad graph);
    a job in order is decoded as it runs, as it always was."""
    if (len(command_buffer) < tasks.HEADER.itemsize
            or int.from_bytes(command_buffer[:2].tobytes(), "little") != tasks.OP_TASK_GRAPH):
        return _in_order(command_buffer), Placement(1, None)
    decoded = list(tasks.decode_tasks(command_buffer))
    cores, work, deps = _graph(decoded)
    order = _run_order(deps)
    placement = Placement(min(cores or chip_cores, chip_cores), deps)
    return ((i, *work[i]) for i in order), placement


def _in_order(command_buffer: np.ndarray) -> Iterator[DecodedTask]:
    for index, (_, task, desc) in enumerate(tasks.decode_tasks(command_buffer)):
        if task.opcode in tasks.GRAPH_OPCODES:
            raise InvalidCommand(f"task {index}: {task.name} in a job without TASK_GRAPH first")
        yield index, task, desc


def _graph(decoded: list) -> tuple[int, list[tuple[tasks.TaskType, np.void]], list[list[int]]]:
    """(cores, the tasks, each one's dependencies) of a graph job's descriptors."""
    head = decoded[0][2]
    if int(head["reserved"]):
        raise InvalidCommand("TASK_GRAPH: reserved field is not 0")
    work: list[tuple[tasks.TaskType, np.void]] = []
    deps: list[list[int]] = []
    pending: list[int] = []
    for offset, task, desc in decoded[1:]:
        if task.opcode == tasks.OP_TASK_GRAPH:
            raise InvalidCommand(f"offset {offset}: a second TASK_GRAPH")
        if task.opcode == tasks.OP_DEPENDS:
            count = int(desc["count"])
            if not 1 <= count <= tasks.DEPENDS_PER_DESCRIPTOR:
                raise InvalidCommand(f"task {len(work)}: DEPENDS count {count}, expected 1.."
                                     f"{tasks.DEPENDS_PER_DESCRIPTOR}")
            pending.extend(int(t) for t in desc["tasks"][:count])
            continue
        work.append((task, desc))
        deps.append(pending)
        pending = []
    if pending:
        raise InvalidCommand("DEPENDS at the end of the command buffer: no task follows it")
    for index, task_deps in enumerate(deps):
        for d in task_deps:
            if d == index:
                raise InvalidCommand(f"task {index} depends on itself")
            if d >= len(work):
                raise InvalidCommand(f"task {index} depends on task {d}, which does not exist "
                                     f"(the job has {len(work)} tasks)")
    return int(head["cores"]), work, deps


def _run_order(deps: list[list[int]]) -> list[int]:
    """Kahn's topological order, lowest index first; ``InvalidCommand`` on a cycle."""
    waiting = [0] * len(deps)
    followers: list[list[int]] = [[] for _ in deps]
    for index, task_deps in enumerate(deps):
        for d in set(task_deps):
            waiting[index] += 1
            followers[d].append(index)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for f in followers[index]:
            waiting[f] -= 1
            if waiting[f] == 0:
                heapq.heappush(ready, f)
    if len(order) < len(deps):
        stuck = [i for i, n in enumerate(waiting) if n]
        raise InvalidCommand(f"dependency cycle: tasks {', '.join(map(str, stuck[:8]))}"
                             f"{' ...' if len(stuck) > 8 else ''} wait on each other")
    return order
