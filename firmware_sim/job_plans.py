"""Job plans: a command buffer decoded once per (DMA engine, ASID, address, size), then replayed.

A model's job is the same command buffer, at the same device address, for every
inference. The first run decodes each descriptor, translates every operand through the
IOMMU and checks every field; the plan keeps what that run produced: per task either the
handler's *rerun* (a C kernel call bound to the operand views, see ``units.common``) or,
for a task without one, its handler and descriptor; and the job's cycle count, which
depends only on the descriptors. A replay calls the reruns in order: no parsing, no view
building, no translation, no weight handling.

When a plan is valid: its views are the IOMMU translations of the first run, which only
an invalidation can change (``OP_INVALIDATE``, sent whenever the KMD unmaps pages); the
plans of an ASID are dropped by that one path (``firmware_sim.caches``), with everything
else that holds views of its memory. The command buffer's bytes are compared with the
plan's copy on every run (a client may rewrite a command buffer in place; comparing
a few KB costs about a microsecond), and fault injection always takes the full path.
A task whose operands were gathered from several buffer objects gets no rerun (its
data is copied per access): the plan runs its handler, as a first run does.

When every step is a bound C call (``native.calls.BoundCall``), the plan also holds them
as one C array (:class:`NativeSteps`) and an unprofiled replay is a single call into C
(``npu_steps_run``), which runs the same prepared structs as the per-step reruns and stops
at the first failing step. A plan with a Python step replays its runs of C calls as one
call each, the Python steps between them (:class:`MixedSteps`); a profiled replay goes
step by step, timing every task. A graph job on several cores replays on one or two threads
(:class:`GraphSteps`); once it settles on one (``graph_threads``), the plan holds its steps,
bands joined, as a :class:`NativeSteps` and replays exactly as a one-core job's.

Measured (2026-11-24, 2-vCPU VM): a 256-NOP job's chip time per task 7.7 -> 0.1 us.
One C call for the whole job: ResNet-8 / VWW / KWS chip CPU per job 5-9% less than per step.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from firmware_sim import caches, graph_threads
from firmware_sim.kernels import native
from firmware_sim.kernels.native.calls import BoundCall

__all__ = ["JobPlan", "TimedStep", "HandlerStep", "NativeSteps", "GraphSteps", "MixedSteps", "lookup", "store",
           "held_bytes", "replayable", "GENERATION", "PLAN_JOBS", "PLAN_BYTES"]

PLAN_JOBS = 256          # plans kept per core; a full table is simply emptied
# What a core's plans may hold, estimated (``JobPlan.cost``): a client's huge command buffers
# (a million NOPs is a 122 MB plan) must not take the memory other contexts' jobs run in.
# The oldest plans go first; a job whose plan alone is larger is decoded on every run.
PLAN_BYTES = 48 << 20
TASK_BYTES = 128         # a task's timed step (measured: 114 bytes a NOP)
STEP_BYTES = 384         # a task's rerun (measured: 200 bytes a CONV_2D, 370 a DMA_COPY)
DEP_BYTES = 40           # a graph job's dependency kept for its two-thread replay (an int in a list)
# Replays that look for an all-C plan: a HandlerStep may get its C call only on its second run.
NATIVE_TRIES = 2


# (task index, opcode, cycles, rerun or None for a task with no effect, the job's core it was
# placed on): what a profiled replay needs to report each task as a first run does.
TimedStep = tuple[int, int, int, "Callable[[], None] | None", int]


@dataclass
class JobPlan:
    """A decoded job: ``steps`` run in order (each a task's rerun; tasks with no effect
    left out), ``tasks`` its task count, ``cycles`` its simulated duration;
    ``timed_steps`` every task with its opcode and cycles, for profiled replays."""
    command: bytes
    steps: list[tuple[int, Callable[[], None]]]     # (task index, rerun)
    tasks: int
    cycles: int
    timed_steps: list[TimedStep]
    native: NativeSteps | GraphSteps | None = None
    native_tries: int = 0
    mixed: MixedSteps | None = None
    deps: list[list[int]] | None = None      # a graph job on several cores: each task's dependencies
    one_thread: list[tuple[int, Callable[[], None]]] | None = None   # its steps with bands joined (band_joins)

    @property
    def cost(self) -> int:
        """The memory the plan holds, estimated: its copy of the command buffer, its tasks and a
        graph job's dependencies (a buffer of DEPENDS alone holds 7 in 40 bytes)."""
        deps = sum(map(len, self.deps)) if self.deps is not None else 0
        joined = len(self.one_thread) if self.one_thread is not None else 0
        return (len(self.command) + TASK_BYTES * self.tasks + STEP_BYTES * (len(self.steps) + joined)
                + DEP_BYTES * deps)

    def native_steps(self) -> NativeSteps | GraphSteps | None:
        """The steps as one C call, when every one of them is a C kernel call (on two threads
        for a graph job on several cores); otherwise ``mixed`` holds them as runs of C calls
        and Python steps, if any step is a C call."""
        native = self.native
        if native is None and self.native_tries < NATIVE_TRIES:
            self.native_tries += 1
            graph = (GraphSteps.of(self.steps, self.deps, self.cycles, sum(s[2] for s in self.timed_steps),
                                   self.one_thread)
                     if self.deps is not None else None)
            self.native = native = graph or NativeSteps.of(self.steps)
            self.mixed = None if native is not None else MixedSteps.of(self.steps)
        elif type(native) is GraphSteps and native.settled is not None:
            self.native = native = native.settled     # one thread for good: replayed as a one-core job
        return native


def _bound_calls(steps: list[tuple[int, Callable[[], None]]]) -> list[BoundCall] | None:
    """Each step's C kernel call (a handler's rerun), or None if one of them has none."""
    calls = []
    for _, step in steps:
        call = step.rerun if isinstance(step, HandlerStep) else step
        if not isinstance(call, BoundCall):
            return None
        calls.append(call)
    return calls


class NativeSteps:
    """A plan's steps as an array of ``struct npu_step`` run by one ``npu_steps_run`` call.
    It points into the steps' own prepared structs, which the plan keeps alive."""

    __slots__ = ("_array", "_count", "_done", "_indices", "_run")

    def __init__(self, calls: list[BoundCall], indices: list[int]):
        self._array = native.ffi.new("struct npu_step[]", len(calls))
        for slot, call in zip(self._array, calls):
            slot.kind, slot.call = call.step.kind, call.step.call
        self._count, self._indices = len(calls), indices
        self._done = native.ffi.new("int32_t *")
        self._run = native.library().npu_steps_run

    @classmethod
    def of(cls, steps: list[tuple[int, Callable[[], None]]]) -> NativeSteps | None:
        """``steps`` as one C call, or None if one of them is not (yet) a C kernel call."""
        calls = _bound_calls(steps) if steps and native.library() is not None else None
        if calls is None:
            return None
        return cls(calls, [index for index, _ in steps])

    def __len__(self) -> int:
        """How many C calls a run makes."""
        return self._count

    def run(self) -> tuple[int, int]:
        """Runs every step; returns (0, 0), or the first failing step's status and task index."""
        status = self._run(self._array, self._count, self._done)
        return (status, self._indices[self._done[0]]) if status else (0, 0)

    @property
    def array(self):
        """The ``struct npu_step[]`` and its length (for the C service loop, ``queue_service``)."""
        return self._array, self._count

    def task_index(self, step: int) -> int:
        """The task index of the step at position ``step``."""
        return self._indices[step]


class GraphSteps:
    """A graph job's steps (every task a C kernel call) run either by ``npu_graph_run`` on this
    thread and a helper thread, each taking a step whose dependencies are done
    (``graph_steps.c``), or on this thread in the run order, with a layer's bands joined back
    into one step where they can be (``band_joins``), as ``choice`` (``graph_threads``) says
    for each replay. Once the choice is one thread for good, ``settled`` is the one-thread
    steps as one C call, which the plan then replays as it would a one-core job's. The arrays
    point into the steps' own prepared structs."""

    __slots__ = ("_bands", "_deps", "_done", "_failed", "_graph", "_indices", "_one", "_one_tries", "_run",
                 "_starts", "_steps", "choice")

    def __init__(self, calls: list[BoundCall], indices: list[int], deps: list[list[int]],
                 choice: graph_threads.ThreadChoice, one_thread: list[tuple[int, Callable[[], None]]] | None = None):
        position = {task: p for p, task in enumerate(indices)}
        flat = [position[d] for task in indices for d in deps[task]]
        starts = [0]
        for task in indices:
            starts.append(starts[-1] + len(deps[task]))
        self._steps = native.ffi.new("struct npu_step[]", len(calls))
        for slot, call in zip(self._steps, calls):
            slot.kind, slot.call = call.step.kind, call.step.call
        self._starts = native.ffi.new("int32_t[]", starts)
        self._deps = native.ffi.new("int32_t[]", flat or [0])
        self._done = native.ffi.new("int32_t[]", len(calls))
        self._graph = native.ffi.new("struct npu_graph *", {
            "steps": self._steps, "count": len(calls), "dep_start": self._starts, "deps": self._deps,
            "done": self._done})
        self._failed = native.ffi.new("int32_t *")
        self._indices = indices
        self._run = native.library().npu_graph_run
        self._bands = NativeSteps(calls, indices)     # one thread, the bands themselves
        self.choice = choice
        # One thread: the joined steps, from Python until each has its C call, then as one C
        # call (or the bands', when a joined step gets none).
        self._one: NativeSteps | list[tuple[int, Callable[[], None]]] = one_thread or self._bands
        self._one_tries = 0

    @classmethod
    def of(cls, steps: list[tuple[int, Callable[[], None]]], deps: list[list[int]], critical_cycles: int,
           serial_cycles: int, one_thread: list[tuple[int, Callable[[], None]]] | None = None) -> GraphSteps | None:
        """``steps`` as one graph call, or None unless every task of the job is a C kernel call
        (a task without a step, a NOP, would hide the dependencies through it); its cycles on
        the cores and in order and its graph's levels weigh the choice of threads;
        ``one_thread``: the steps with bands joined, for a replay on one thread."""
        calls = _bound_calls(steps) if len(steps) == len(deps) and native.library() is not None else None
        if calls is None:
            return None
        indices = [index for index, _ in steps]
        levels = graph_threads.graph_levels(deps, indices)
        return cls(calls, indices, deps, graph_threads.ThreadChoice(critical_cycles, serial_cycles, levels),
                   one_thread)

    def run(self) -> tuple[int, int]:
        """Runs every step; returns (0, 0), or a failing step's status and task index."""
        two = self.choice.two_threads()
        started = time.monotonic_ns()
        if two:
            status = self._run(self._graph, self._failed)
            result = (status, self._indices[self._failed[0]]) if status else (0, 0)
        else:
            result = self._run_one()
        self.choice.record(two, time.monotonic_ns() - started)
        return result

    @property
    def settled(self) -> NativeSteps | None:
        """The one-thread steps as one C call, once the choice is one thread for good."""
        one = self._one
        return one if self.choice.settled and isinstance(one, NativeSteps) else None

    @property
    def one_thread_steps(self) -> int:
        """How many C calls a one-thread replay makes now (fewer than the tasks once bands are joined)."""
        return len(self._one) if isinstance(self._one, NativeSteps) else len(self._indices)

    def _run_one(self) -> tuple[int, int]:
        one = self._one
        if isinstance(one, NativeSteps):
            return one.run()
        for _, step in one:
            step()
        self._one_tries += 1
        native_one = NativeSteps.of(one)
        if native_one is not None:
            self._one = native_one
        elif self._one_tries >= NATIVE_TRIES:
            self._one = self._bands     # a joined step without a C call: the bands' own from now on
        return 0, 0


class MixedSteps:
    """A plan whose tasks are not all C kernel calls (a GATHER, an int16 layer, a DMA copy):
    each run of consecutive C calls is one ``npu_steps_run`` call (:class:`NativeSteps`),
    the other tasks' steps are called from Python between them. ``segments``: (the first
    task index, a NativeSteps or the step) in order."""

    __slots__ = ("segments",)

    def __init__(self, segments: list[tuple[int, NativeSteps | Callable[[], None]]]):
        self.segments = segments

    @classmethod
    def of(cls, steps: list[tuple[int, Callable[[], None]]]) -> MixedSteps | None:
        """``steps`` in segments, or None when none of them is a C kernel call."""
        if native.library() is None:
            return None
        segments: list[tuple[int, NativeSteps | Callable[[], None]]] = []
        run: list[tuple[int, BoundCall]] = []
        for index, step in [*steps, (-1, None)]:      # (-1, None) ends the last run
            call = step.rerun if isinstance(step, HandlerStep) else step
            if isinstance(call, BoundCall):
                run.append((index, call))
                continue
            if run:
                segments.append((run[0][0], NativeSteps([c for _, c in run], [i for i, _ in run])))
                run = []
            if step is not None:
                segments.append((index, step))
        if not any(isinstance(segment, NativeSteps) for _, segment in segments):
            return None
        return cls(segments)


# Keyed by the DMA engine too: a core has one, but a process may run several chips (tests).
_PLANS: dict[tuple[object, int, int, int], JobPlan] = {}   # oldest first
_held = 0                                                   # their JobPlan.cost, summed
# Moves whenever a plan is dropped, read by the C service loop (``queue_service``), which
# replays only plans it took while this held the same value.
GENERATION = native.ffi.new("uint64_t *")


def lookup(dma, asid: int, cmd_iova: int, command: np.ndarray) -> JobPlan | None:
    """The plan of this command buffer on ``dma``, if it was decoded since the last
    invalidation of ``asid`` and its bytes did not change."""
    found = _PLANS.get((dma, asid, cmd_iova, len(command)))
    if found is not None and found.command == command.tobytes():
        return found
    return None


def store(dma, asid: int, cmd_iova: int, plan: JobPlan) -> None:
    global _held
    cost = plan.cost
    if cost > PLAN_BYTES:
        return
    if len(_PLANS) >= PLAN_JOBS:
        _clear()
    key = (dma, asid, cmd_iova, len(plan.command))
    _forget(key)
    while _held + cost > PLAN_BYTES:
        _forget(next(iter(_PLANS)))
    _PLANS[key] = plan
    _held += cost


def held_bytes() -> int:
    """The estimated memory the plans hold now (at most PLAN_BYTES)."""
    return _held


def _forget(key) -> None:
    global _held
    plan = _PLANS.pop(key, None)
    if plan is not None:
        _held -= plan.cost
        GENERATION[0] += 1


def _clear() -> None:
    global _held
    _PLANS.clear()
    _held = 0
    GENERATION[0] += 1


def replayable(dma, asid: int, cmd_iova: int, cmd_size: int):
    """(the plan stored for this command buffer, its steps as one C array and its length, what
    gives a failing step's task index) when a replay of it is that one C call (a graph job's
    too, once its choice of threads settled on one thread) or nothing (no step: NOPs); else
    None. For the C service loop, which compares the bytes itself on every run."""
    plan = _PLANS.get((dma, asid, cmd_iova, cmd_size))
    if plan is None:
        return None
    if not plan.steps:
        return plan, native.ffi.NULL, 0, None
    steps = plan.native
    if isinstance(steps, NativeSteps):
        return (plan, *steps.array, steps)
    return None


class HandlerStep:
    """A task without a rerun yet: its handler on its descriptor, then the DMA commit.
    When a later run of the handler does return a rerun (a kernel that binds only from
    its second call, e.g. ADD once its table exists), the step keeps and uses it."""

    __slots__ = ("handler", "desc", "dma", "rerun")

    def __init__(self, handler: Callable, desc: np.void, dma):
        self.handler, self.dma, self.rerun = handler, dma, None
        self.desc = desc.copy()       # the plan outlives the command buffer it was read from

    def __call__(self) -> None:
        if self.rerun is not None:
            self.rerun()
            return
        dma = self.dma
        copies = dma.copies
        rerun = self.handler(self.desc, dma)
        dma.commit()
        if callable(rerun) and dma.copies == copies:
            self.rerun = rerun


def _drop(asid: int, bo_id: int, released) -> None:
    # Any unmapping in the ASID may concern a plan's operands: drop all of its plans.
    for key in [k for k in _PLANS if k[1] == asid]:
        _forget(key)


caches.register("job_plans", "decoded command buffers by (ASID, address, size) with a copy of "
                "their bytes, holding the tasks' bound C calls (views of the operands), at most "
                f"{PLAN_JOBS} and about {PLAN_BYTES >> 20} MB of them: an ASID's "
                "plans are dropped on any invalidation of it", _drop, _clear,
                entries=lambda: len(_PLANS))
