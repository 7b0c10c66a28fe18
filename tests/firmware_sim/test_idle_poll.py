"""The idle core's adaptive poll window (KVM halt-polling's grow/shrink rule)."""
import time

from firmware_sim.idle_poll import CONTENDED_NS, GROW_START_NS, LOAD_CHECK_NS, IdlePoll, RunQueueProbe


def test_grows_when_a_longer_poll_would_have_caught_the_job() -> None:
    poll = IdlePoll(300_000)
    assert poll.window_ns == GROW_START_NS
    for expected in (20_000, 40_000, 80_000, 160_000, 300_000, 300_000):
        poll.record(idle_ns=250_000, polled_ns=poll.window_ns)
        assert poll.window_ns == expected


def test_keeps_its_window_when_the_poll_caught_the_job() -> None:
    poll = IdlePoll(300_000)
    poll.window_ns = 80_000
    poll.record(idle_ns=30_000, polled_ns=80_000)
    assert poll.window_ns == 80_000


def test_shrinks_to_nothing_when_jobs_come_later_than_the_limit_then_grows_again() -> None:
    poll = IdlePoll(300_000)
    poll.window_ns = 40_000
    for expected in (20_000, 10_000, 0, 0):
        poll.record(idle_ns=5_000_000, polled_ns=poll.window_ns)
        assert poll.window_ns == expected
    assert poll.window() == 0                       # no polling at all now
    poll.record(idle_ns=100_000, polled_ns=0)       # a job a poll would have caught
    assert poll.window_ns == GROW_START_NS


def test_no_polling_when_turned_off_and_a_short_one_when_the_cpus_are_wanted() -> None:
    assert IdlePoll(0).window() == 0
    busy = IdlePoll(300_000, cpus=1)
    busy.window_ns = 300_000
    # This process (pytest) is runnable; with one CPU any other runnable task means contention.
    assert busy.window() in (CONTENDED_NS, 300_000)


def test_looks_at_the_load_at_most_once_per_check_interval() -> None:
    poll = IdlePoll(300_000)
    poll.window_ns = 300_000
    started = time.monotonic_ns()
    for _ in range(2000):
        assert poll.window() in (CONTENDED_NS, 300_000)
    intervals = (time.monotonic_ns() - started) // LOAD_CHECK_NS
    assert 1 <= poll.load_checks <= intervals + 1
    poll.close()


def test_run_queue_probe_reads_the_live_file_each_time() -> None:
    probe = RunQueueProbe()
    try:
        # This process runs while it reads: the count of others is never negative, and a
        # second read through the same descriptor sees the file afresh (pread at 0).
        assert probe.others() >= 0 and probe.others() >= 0
    finally:
        probe.close()
    assert probe.others() == 0          # closed: no load seen, never an error
