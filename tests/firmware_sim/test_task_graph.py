"""A graph job (TASK_GRAPH + DEPENDS, firmware_sim.task_graph): tasks placed on the job's cores by
their dependencies, the critical path as the job's cycles, the same bytes as in order, and a
client's bad graph refused before anything runs."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim import graph_threads, job_plans
from firmware_sim.executor import run_job
from firmware_sim.kernels import native
from firmware_sim.timing import HardwareProfile
from npu_hw import tasks
from npu_hw.iommu import IOVA_BASE
from tests.support.chip_memory import ASID, ChipMemory

N = 1 << 14


@pytest.fixture
def mem(tmp_path):
    return ChipMemory(tmp_path, size=1 << 20)


def _copies(mem: ChipMemory) -> tuple[list[bytes], int]:
    """A diamond's four DMA copies: x -> a; a -> b and a -> c; b -> d. Returns them and d."""
    x = mem.put(np.arange(N, dtype=np.uint8) * 7)
    a, b, c, d = (mem.alloc(N) for _ in range(4))
    copy = [tasks.encode_task("DMA_COPY", src=s, dst=t, length=N) for s, t in ((x, a), (a, b), (a, c), (b, d))]
    return copy, d


def _run(mem: ChipMemory, descriptors: list[bytes], cores: int = 2):
    command = b"".join(descriptors)
    at = mem.put(np.frombuffer(command, np.uint8))
    seen: list[tuple] = []
    result = run_job(mem.dma, ASID, at, len(command), HardwareProfile(), cores=cores,
                     on_task=lambda *task: seen.append(task))
    return result, seen


def test_diamond_branches_go_to_both_cores_and_the_bytes_match_in_order(mem):
    copy, d = _copies(mem)
    in_order, seen_in_order = _run(mem, copy)
    assert in_order.status == 0 and {task[5] for task in seen_in_order} == {0}
    expected = mem.get(d, np.uint8, (N,))
    mem.bytes[d - 0x0100_0000:d - 0x0100_0000 + N] = 0
    for replay in (False, True):          # the first run, then its plan's profiled replay
        graph, seen = _run(mem, tasks.encode_graph([[], [0], [0], [1, 2]], copy))
        assert graph.status == 0 and graph.task_index == 4, (replay, graph)
        tile = {task[0]: task[5] for task in seen}
        assert tile[1] != tile[2]                          # the two branches on different cores
        cycles = {task[0]: task[4] for task in seen}
        assert graph.cycles == cycles[0] + max(cycles[1], cycles[2]) + cycles[3] < in_order.cycles
        assert np.array_equal(mem.get(d, np.uint8, (N,)), expected)


def test_one_core_graph_costs_the_sum(mem):
    copy, _ = _copies(mem)
    in_order, _ = _run(mem, copy)
    graph, seen = _run(mem, tasks.encode_graph([[], [0], [0], [1, 2]], copy, cores=1))
    assert graph.cycles == in_order.cycles and {task[5] for task in seen} == {0}


@pytest.mark.parametrize("deps, message", [
    ([[], [0], [7], [1, 2]], "does not exist"),
    ([[], [2], [1], [1, 2]], "cycle"),
    ([[], [1], [0], [1, 2]], "cycle"),
    ([[0], [0], [0], [1, 2]], "itself"),
])
def test_bad_graph_is_refused_before_any_task_runs(mem, deps, message, capfd):
    copy, d = _copies(mem)
    result, seen = _run(mem, tasks.encode_graph(deps, copy))
    assert result.status == -errno.EINVAL and not seen
    assert not mem.get(d, np.uint8, (N,)).any()


def test_graph_descriptors_outside_a_graph_job_are_refused(mem):
    copy, _ = _copies(mem)
    depends = tasks.encode_graph([[0]], [b""])[1]
    result, seen = _run(mem, [copy[0], depends, copy[1]])
    assert result.status == -errno.EINVAL and result.task_index == 1 and len(seen) == 1


def test_depends_with_a_bad_count_or_nothing_after_it_is_refused(mem):
    copy, _ = _copies(mem)
    head = tasks.encode_task("TASK_GRAPH")
    for bad in ([head, copy[0], tasks.encode_task("DEPENDS", count=0), copy[1]],
                [head, copy[0], tasks.encode_task("DEPENDS", count=tasks.DEPENDS_PER_DESCRIPTOR + 1), copy[1]],
                [head, copy[0], tasks.encode_task("DEPENDS", count=1)],
                [head, tasks.encode_task("TASK_GRAPH"), copy[0]],
                [tasks.encode_task("TASK_GRAPH", reserved=1), copy[0]]):
        result, seen = _run(mem, bad)
        assert result.status == -errno.EINVAL and not seen


def _loaded(mem: ChipMemory, loadable, calibration) -> tuple[list[int], np.ndarray]:
    """``loadable``'s regions in ``mem`` with the first calibration input: (bases, its output's bytes)."""
    bases = [mem.alloc(max(region.size, 1)) for region in loadable.regions]
    for i, region in enumerate(loadable.regions):
        if region.content is not None:
            mem.bytes[bases[i] - IOVA_BASE:bases[i] - IOVA_BASE + len(region.content)] = np.frombuffer(
                loadable.region_image(i, bases), np.uint8)
    (x,) = loadable.inputs()
    (y,) = loadable.outputs()
    mem.bytes[bases[x.region] + x.offset - IOVA_BASE:][:x.nbytes] = calibration[0][0].transpose(0, 2, 3, 1).reshape(
        -1).view(np.uint8)
    return bases, mem.bytes[bases[y.region] + y.offset - IOVA_BASE:][:y.nbytes]


def _replays(mem: ChipMemory, command: bytes, out: np.ndarray, count: int) -> tuple[list[bytes], job_plans.JobPlan]:
    """``count`` runs of ``command`` (a first run, then replays): each one's output, and the plan."""
    at = mem.put(np.frombuffer(command, np.uint8))
    outputs = []
    for _ in range(count):
        out[:] = 0
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile(), cores=2).status == 0
        outputs.append(out.tobytes())
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None
    return outputs, plan


@pytest.mark.parametrize("mode", ["0", "1", "auto"])
def test_two_thread_replay_gives_the_same_bytes(tmp_path, monkeypatch, mode):
    """NPU_GRAPH_THREADS=1 (and auto, which tries both): a compiled diamond's graph job (row bands
    too) replays on two threads of the process (job_plans.GraphSteps, graph_steps.c) with the
    bytes of its in-order job, on every replay; so does a replay on one thread (0, and auto's
    first), its bands joined back into one call (band_joins), for good with 0 (one C call,
    as a one-core job's plan)."""
    from libnpu.compiler.lower import compile_model
    from tests.support.diamond import diamond_calibration, diamond_model
    if native.library() is None:
        pytest.skip("no C kernels")
    monkeypatch.setattr(graph_threads, "MODE", mode)
    monkeypatch.setattr(graph_threads, "HANDOFF_NS", 0)      # the diamond is too small to be worth it
    monkeypatch.setattr(graph_threads, "_cpu_free", lambda: True)   # whatever this machine's load
    calibration = diamond_calibration()
    loadable = compile_model(diamond_model(), calibration, recipe="fast", tiles=2)
    mem = ChipMemory(tmp_path, size=4 << 20)
    bases, out = _loaded(mem, loadable, calibration)
    outputs: dict[int | None, list[bytes]] = {}
    for graph in (None, 0):
        # decode, replays until all-C, both kinds
        outputs[graph], plan = _replays(mem, loadable.command_buffer(bases, cores=graph), out,
                                        1 + job_plans.NATIVE_TRIES + 2 * graph_threads.SAMPLES + 2)
        settled = graph is None or mode == "0"
        assert isinstance(plan.native, job_plans.NativeSteps if settled else job_plans.GraphSteps)
        if graph == 0 and mode == "auto":
            assert all(len(walls) == graph_threads.SAMPLES for walls in plan.native.choice.walls)
        if graph == 0 and mode != "1":
            calls = len(plan.native) if settled else plan.native.one_thread_steps
            assert calls < len(loadable.tasks)
    assert set(outputs[None]) == set(outputs[0]) and len(set(outputs[0])) == 1


def test_a_graph_job_too_small_for_two_threads_replays_as_the_one_core_job(tmp_path, monkeypatch):
    """auto, with a CPU free: a strided 1x1 conv split in two bands (which skip the input row
    between them) is too small for two threads to pay for their meeting; once its one-thread
    replays are timed its plan runs as the untiled layer's would, in one C call of one kernel
    call, with the untiled layer's bytes (before: a choice in Python on every replay, two
    kernel calls)."""
    from libnpu.compiler.lower import compile_model
    from tests.support.diamond import strided_model
    if native.library() is None:
        pytest.skip("no C kernels")
    monkeypatch.setattr(graph_threads, "MODE", "auto")
    monkeypatch.setattr(graph_threads, "_cpu_free", lambda: True)
    model, calibration = strided_model()
    whole = compile_model(model, calibration, recipe="fast")
    split = compile_model(model, calibration, recipe="fast", tiles=2)
    assert len(split.tasks) > len(whole.tasks)
    outputs = []
    for loadable, cores in ((whole, None), (split, 0)):
        bus = tmp_path / f"cores-{cores}"
        bus.mkdir()
        mem = ChipMemory(bus, size=4 << 20)
        bases, out = _loaded(mem, loadable, calibration)
        replays, plan = _replays(mem, loadable.command_buffer(bases, cores=cores), out,
                                 1 + job_plans.NATIVE_TRIES + graph_threads.SAMPLES + 2)
        assert isinstance(plan.native, job_plans.NativeSteps) and len(plan.native) == len(whole.tasks)
        outputs += replays
    assert len(set(outputs)) == 1


def test_a_plan_counts_its_dependencies(mem):
    """A command buffer of DEPENDS (7 dependencies in 40 bytes) must not hold more memory in its
    plan than the plans' bound (PLAN_BYTES) counts for it."""
    count = 200
    deps = [list(range(max(0, i - 7), i)) for i in range(count)]
    command = b"".join(tasks.encode_graph(deps, [tasks.encode_task("NOP")] * count))
    at = mem.put(np.frombuffer(command, np.uint8))
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile(), cores=2).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.cost >= job_plans.DEP_BYTES * sum(map(len, deps)) > len(command)
