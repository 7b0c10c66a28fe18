"""Grouping CPU operators into host calls (compiler.host_groups): as few calls as the data
flow allows, never a cycle, every group's members adjacent in a topological order."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu.compiler.host_groups import group_host_ops


def _chain(*names: str) -> list[tuple[list[str], list[str]]]:
    """Operators reading the previous one's output: x -> op0 -> op1 ..."""
    return [([f"t{k - 1}" if k else "x"], [f"t{k}"]) for k in range(len(names))]


def test_adjacent_cpu_operators_make_one_call():
    groups = group_host_ops(_chain("npu", "cpu", "cpu", "cpu", "npu"), {1, 2, 3})
    assert groups.count() == 1 and groups.order == [0, 1, 2, 3, 4]


def test_a_chip_operator_between_two_cpu_operators_on_one_path_splits_them():
    groups = group_host_ops(_chain("cpu", "npu", "cpu"), {0, 2})
    assert groups.count() == 2 and groups.group[0] != groups.group[2]


def test_parallel_branches_share_a_call_and_the_chip_operators_move_around_it():
    # x -> a(npu) -> b(cpu);  x -> c(npu) -> d(cpu);  e(npu) reads b and d.  File order a b c d e.
    ops = [(["x"], ["a"]), (["a"], ["b"]), (["x"], ["c"]), (["c"], ["d"]), (["b", "d"], ["e"])]
    groups = group_host_ops(ops, {1, 3})
    assert groups.count() == 1
    assert groups.order == [0, 2, 1, 3, 4]      # c runs before the call, which then takes b and d


def _jobs(groups, host) -> int:
    """Chip jobs the order makes: runs of chip operators."""
    kinds = [k in host for k in groups.order]
    return sum(1 for i, cpu in enumerate(kinds) if not cpu and (i == 0 or kinds[i - 1]))


def test_a_call_reading_only_model_inputs_runs_before_the_chip_instead_of_between_two_jobs():
    # x -> a(npu);  mask -> c(cpu);  b(npu) reads a and c.  File order a c b: the chip's work
    # was split around c (two jobs); c first leaves one.
    ops = [(["x"], ["a"]), (["mask"], ["c"]), (["a", "c"], ["b"])]
    groups = group_host_ops(ops, {1})
    assert groups.order == [1, 0, 2] and _jobs(groups, {1}) == 1


def test_the_chip_runs_what_it_can_before_a_call_instead_of_coming_back_after_it():
    # x -> a(npu) -> h(cpu);  x -> b(npu), a model output.  File order a h b.
    ops = [(["x"], ["a"]), (["a"], ["h"]), (["x"], ["b"])]
    groups = group_host_ops(ops, {1})
    assert groups.order == [0, 2, 1] and _jobs(groups, {1}) == 1


def test_alone_operators_get_a_call_of_their_own():
    groups = group_host_ops(_chain("cpu", "custom", "cpu"), {0, 1, 2}, alone=lambda k: k == 1)
    assert groups.count() == 3


@pytest.mark.parametrize("seed", range(30))
def test_random_graphs_give_acyclic_adjacent_groups(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 30))
    ops = []
    for k in range(count):
        reads = [f"t{j}" for j in rng.choice(k, size=min(k, int(rng.integers(0, 3))), replace=False)] if k else []
        ops.append((reads or ["x"], [f"t{k}"]))
    host = {k for k in range(count) if rng.random() < 0.5}
    groups = group_host_ops(ops, host)
    assert sorted(groups.order) == list(range(count)) and set(groups.group) == host
    position = {k: i for i, k in enumerate(groups.order)}
    producer = {t: k for k, (_, outs) in enumerate(ops) for t in outs}
    for k, (ins, _) in enumerate(ops):               # topological
        assert all(position[producer[t]] < position[k] for t in ins if t in producer)
    runs = [groups.group.get(k) for k in groups.order]
    for g in set(groups.group.values()):             # adjacent: each group one run in the order
        at = [i for i, h in enumerate(runs) if h == g]
        assert at == list(range(at[0], at[-1] + 1))
