"""A job plan whose steps are all C kernel calls replays in one call into C
(``job_plans.NativeSteps``): it must write the same bytes, report the same cycles and
fail with the same status at the same task as the per-step replay and the first run.

Random plans: random selections (orders, repeats) of the descriptors of real compiled
models (KWS, ResNet-8, VWW: convolutions, depthwise, fully connected, ADD, pools, softmax,
QUANTIZE / DEQUANTIZE) over random memory contents, run through the real DMA engine and
executor."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.executor import JobResult, run_job
from firmware_sim.kernels import native
from firmware_sim.timing import HardwareProfile
from libnpu.compiler.cache import CompileCache, compile_cached
from npu_hw import iommu, tasks
from tests.support.chip_memory import ASID, ChipMemory

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")

MEMORY = 16 << 20


def _descriptors(command: bytes) -> list[bytes]:
    return [command[offset:offset + task.size] for offset, task, _ in tasks.decode_tasks(command)]


class Rig:
    """A model's regions placed in chip memory, with its descriptors and a fresh image of
    the memory to restore before each run."""

    def __init__(self, mem: ChipMemory, model_path, cache: CompileCache, rng: np.random.Generator):
        loadable, _ = compile_cached(str(model_path), cache=cache)
        mem._next = 0
        bases = [mem.alloc(max(region.size, 1)) for region in loadable.regions]
        used = mem._next
        mem.bytes[:used] = rng.integers(0, 256, used, dtype=np.uint8)   # activations too
        for index, region in enumerate(loadable.regions):
            if region.content is not None:
                image = np.frombuffer(loadable.region_image(index, bases), np.uint8)
                start = bases[index] - iommu.IOVA_BASE
                mem.bytes[start:start + image.size] = image
        self.mem, self.used = mem, used
        self.descriptors = _descriptors(loadable.command_buffer(bases))
        self.image = mem.bytes[:used].copy()
        self.command_at = mem.alloc(64 * 1024)

    def run(self, command: bytes) -> tuple[JobResult, np.ndarray]:
        """Restore the memory, run ``command`` as one job; the result and the memory after."""
        self.mem.bytes[:self.used] = self.image
        start = self.command_at - iommu.IOVA_BASE
        self.mem.bytes[start:start + len(command)] = np.frombuffer(command, np.uint8)
        result = run_job(self.mem.dma, ASID, self.command_at, len(command), HardwareProfile())
        return result, self.mem.bytes[:self.used].copy()

    def plan(self, command: bytes) -> job_plans.JobPlan:
        found = job_plans.lookup(self.mem.dma, ASID, self.command_at, np.frombuffer(command, np.uint8))
        assert found is not None
        return found


def _per_step(plan: job_plans.JobPlan) -> None:
    plan.native, plan.native_tries, plan.mixed = None, job_plans.NATIVE_TRIES, None     # no C runs at all


def _one_call(plan: job_plans.JobPlan) -> None:
    plan.native, plan.native_tries = None, 0


def _compare_paths(rig: Rig, command: bytes) -> JobResult:
    """First run, per-step replay and one-call replay of ``command``: same bytes, same
    result; returns it."""
    first, after_first = rig.run(command)
    plan = rig.plan(command)
    _per_step(plan)
    per_step, after_per_step = rig.run(command)
    assert plan.native is None
    _one_call(plan)
    one_call, after_one_call = rig.run(command)
    if plan.native is None:      # a task whose C call binds only from its second run
        one_call, after_one_call = rig.run(command)
    assert plan.native is not None, "every task of these models is a C kernel call"
    for result in (per_step, one_call):
        assert (result.status, result.cycles, result.task_index, result.fault_iova) == \
            (first.status, first.cycles, first.task_index, first.fault_iova)
    np.testing.assert_array_equal(after_per_step, after_first)
    np.testing.assert_array_equal(after_one_call, after_first)
    return first


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> CompileCache:
    return CompileCache(tmp_path_factory.mktemp("compiled"))


@pytest.fixture
def chip(tmp_path) -> ChipMemory:
    return ChipMemory(tmp_path, size=MEMORY)


@pytest.mark.parametrize("model", ["kws_path", "resnet8_path", "vww_path"])
def test_random_plans_give_the_same_bytes_and_cycles(model, request, chip, cache) -> None:
    rng = np.random.default_rng(abs(hash(model)) % 1000)
    rig = Rig(chip, request.getfixturevalue(model), cache, rng)
    _compare_paths(rig, b"".join(rig.descriptors))          # the model's own job
    for _ in range(6):
        picks = rng.integers(0, len(rig.descriptors), rng.integers(1, 2 * len(rig.descriptors)))
        result = _compare_paths(rig, b"".join(rig.descriptors[i] for i in picks))
        assert result.status == 0 and result.task_index == len(picks)


def test_a_plan_with_a_python_step_replays_its_c_runs_around_it(chip, kws_path, cache) -> None:
    """A DMA copy (no C call) among KWS's tasks: the replay runs the tasks before it as one
    call into C, the copy from Python, the tasks after it as another call; the same bytes
    and results as the first run and the step-by-step replay."""
    rig = Rig(chip, kws_path, cache, np.random.default_rng(3))
    copy = tasks.encode_task("DMA_COPY", 0, src=iommu.IOVA_BASE, dst=iommu.IOVA_BASE + 64, length=64)
    command = b"".join(rig.descriptors[:3]) + copy + b"".join(rig.descriptors[3:])
    first, after_first = rig.run(command)
    for _ in range(3):
        again, after = rig.run(command)
        assert (again.status, again.cycles, again.task_index) == (first.status, first.cycles, first.task_index)
        np.testing.assert_array_equal(after, after_first)
    plan = rig.plan(command)
    assert plan.native is None and plan.mixed is not None
    kinds = [isinstance(segment, job_plans.NativeSteps) for _, segment in plan.mixed.segments]
    assert kinds == [True, False, True] and plan.mixed.segments[1][0] == 3
    _per_step(plan)
    per_step, after = rig.run(command)
    assert (per_step.status, per_step.cycles, per_step.task_index) == (first.status, first.cycles, first.task_index)
    np.testing.assert_array_equal(after, after_first)


def test_a_failing_step_stops_the_one_call_replay_at_its_task(chip, kws_path, cache) -> None:
    """A requantization shift rewritten out of range after the plan was made: the C kernel's
    own check fails the job with EINVAL at that task, in both replays, and the tasks after
    it do not run."""
    rig = Rig(chip, kws_path, cache, np.random.default_rng(4))
    command = b"".join(rig.descriptors)
    first, _ = rig.run(command)
    assert first.status == 0
    plan = rig.plan(command)
    rig.run(command)
    assert plan.native is not None
    # The first convolution-like task with a per-layer shift operand: make its shifts 40.
    shifted = [(position, int(desc["shift_iova"]) - iommu.IOVA_BASE)
               for position, (_, _, desc) in enumerate(tasks.decode_tasks(command))
               if "shift_iova" in (desc.dtype.names or ()) and int(desc["shift_iova"])]
    assert shifted, "KWS has no task with a shift operand"
    position, shift_at = shifted[0]
    rig.image[shift_at:shift_at + 4] = np.array([40], np.int32).view(np.uint8)
    outcomes = []
    for choose in (_one_call, _per_step):
        choose(plan)
        result, after = rig.run(command)
        outcomes.append(((result.status, result.task_index, result.cycles), after))
    assert plan.native is None and outcomes[0][0] == outcomes[1][0]
    assert outcomes[0][0][:2] == (-errno.EINVAL, position)
    np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])   # the same tasks ran


def test_a_failing_c_run_of_a_mixed_plan_stops_at_its_task(chip, kws_path, cache) -> None:
    """The same out-of-range shift in a plan that also has a Python step (a DMA copy first):
    the C run fails the job with EINVAL at that task, as the step-by-step replay does."""
    rig = Rig(chip, kws_path, cache, np.random.default_rng(5))
    copy = tasks.encode_task("DMA_COPY", 0, src=iommu.IOVA_BASE, dst=iommu.IOVA_BASE + 64, length=64)
    command = copy + b"".join(rig.descriptors)
    assert rig.run(command)[0].status == 0
    plan = rig.plan(command)
    rig.run(command)
    assert plan.mixed is not None
    shifted = [(position, int(desc["shift_iova"]) - iommu.IOVA_BASE)
               for position, (_, _, desc) in enumerate(tasks.decode_tasks(command))
               if "shift_iova" in (desc.dtype.names or ()) and int(desc["shift_iova"])]
    position, shift_at = shifted[0]
    rig.image[shift_at:shift_at + 4] = np.array([40], np.int32).view(np.uint8)
    mixed, after_mixed = rig.run(command)
    _per_step(plan)
    per_step, after_per_step = rig.run(command)
    assert (mixed.status, mixed.task_index) == (per_step.status, per_step.task_index) == (-errno.EINVAL, position)
    np.testing.assert_array_equal(after_mixed, after_per_step)
