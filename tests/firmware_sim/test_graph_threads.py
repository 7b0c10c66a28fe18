"""firmware_sim.graph_threads: when a graph job's replay runs on one thread and when on two."""
from __future__ import annotations

import pytest

from firmware_sim import graph_threads
from firmware_sim.graph_threads import EXPLORE, EXPLORE_MAX, HANDOFF_NS, MARGIN, SAMPLES, ThreadChoice, graph_levels


@pytest.fixture(autouse=True)
def auto(monkeypatch):
    """auto, on a machine with a CPU free for the helper (whatever this one's load is)."""
    monkeypatch.setattr(graph_threads, "MODE", "auto")
    monkeypatch.setattr(graph_threads, "_cpu_free", lambda: True)


def _replay(choice: ThreadChoice, one_ns: int, two_ns: int) -> bool:
    two = choice.two_threads()
    choice.record(two, two_ns if two else one_ns)
    return two


def test_one_thread_first_then_two_then_the_faster_and_the_other_ever_more_rarely():
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)      # half the time saved
    kinds = [_replay(choice, 200_000, 120_000) for _ in range(2 * SAMPLES + 4096)]
    assert kinds[:SAMPLES] == [False] * SAMPLES and kinds[SAMPLES:2 * SAMPLES] == [True] * SAMPLES
    rest = kinds[2 * SAMPLES:]
    looks = [i for i, two in enumerate(rest) if not two]        # one thread, measured again
    gaps = [b - a for a, b in zip([-1, *looks], looks)]
    assert gaps[:4] == [EXPLORE, 2 * EXPLORE, 4 * EXPLORE, 8 * EXPLORE] and max(gaps) == EXPLORE_MAX


def test_a_choice_that_turns_looks_at_the_other_kind_often_again():
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)
    for _ in range(2 * SAMPLES + 2000):
        _replay(choice, 200_000, 120_000)
    assert choice.two and choice.every == EXPLORE_MAX
    kinds = [_replay(choice, 200_000, 900_000) for _ in range(SAMPLES)]     # two threads got slow
    assert not choice.two and choice.every == EXPLORE and kinds[-1] is False


def test_two_threads_given_up_when_they_measure_slower():
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)
    kinds = [_replay(choice, 200_000, 300_000) for _ in range(2 * SAMPLES + EXPLORE)]
    assert kinds[2 * SAMPLES:].count(True) == 1


def test_two_threads_a_little_faster_are_not_worth_their_cpu():
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)
    one = 200_000
    kinds = [_replay(choice, one, int(one * MARGIN) + 1000) for _ in range(2 * SAMPLES + EXPLORE)]
    assert kinds[2 * SAMPLES:].count(True) == 1


def test_a_median_ignores_one_preempted_replay():
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)
    for _ in range(2 * SAMPLES):
        _replay(choice, 200_000, 120_000)
    choice.record(True, 50_000_000)               # a time slice lost once
    assert choice.two_threads()


def test_no_cpu_free_for_the_helper_keeps_one_thread(monkeypatch):
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000)
    for _ in range(2 * SAMPLES):
        _replay(choice, 200_000, 100_000)
    monkeypatch.setattr(graph_threads, "_cpu_free", lambda: False)
    assert not any(_replay(choice, 200_000, 100_000) for _ in range(2 * EXPLORE))


def test_too_little_modeled_gain_never_tries_two_threads():
    # 10% saved of a job taking just under 10x the hand-off: not worth waking the helper.
    choice = ThreadChoice(critical_cycles=900, serial_cycles=1000)
    assert not any(_replay(choice, 10 * HANDOFF_NS - 1000, 1) for _ in range(4 * SAMPLES))
    assert choice.settled


def test_a_small_job_of_many_levels_settles_on_one_thread():
    """Half the time saved on paper, but the threads meet at each of 40 levels: ResNet-8's and
    VWW's size (two threads forced were 0.97x and 1.17x one thread's wall time, quiet)."""
    choice = ThreadChoice(critical_cycles=500, serial_cycles=1000, levels=40)
    assert not any(_replay(choice, 200_000, 1) for _ in range(4 * SAMPLES))
    assert choice.settled
    large = ThreadChoice(critical_cycles=500, serial_cycles=1000, levels=40)
    assert any(_replay(large, 20_000_000, 1) for _ in range(2 * SAMPLES)) and not large.settled


def test_graph_levels_count_the_longest_chain():
    # 0 -> (1, 2) -> 3, and 4 alone: three levels.
    assert graph_levels([[], [0], [0], [1, 2], []], [0, 1, 2, 3, 4]) == 3
    assert graph_levels([[] for _ in range(5)], list(range(5))) == 1


@pytest.mark.parametrize(("mode", "two"), [("0", False), ("1", True)])
def test_the_environment_forces_a_kind(monkeypatch, mode, two):
    monkeypatch.setattr(graph_threads, "MODE", mode)
    choice = ThreadChoice(critical_cycles=100, serial_cycles=1000)
    assert all(_replay(choice, 200_000, 1_000_000) == two for _ in range(3 * SAMPLES))
    assert choice.settled == (mode == "0")
