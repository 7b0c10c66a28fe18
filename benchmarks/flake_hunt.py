"""Flake hunt: run chosen tests many times, optionally beside a CPU hog, and report the
failures per test.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.flake_hunt [-k EXPR] [-m MARK] [--runs N] [--hog]
                                               [--jobs J] [--batch B] [TEST_PATH ...]

The tests are those ``pytest --collect-only`` selects with ``-k``/``-m`` (e.g. ``-m
recovery``: the tests that touch reset, user queues or recovery).  ``--runs`` test runs
are drawn from them in rounds (each round every selected test once, in a shuffled order)
and handed out in batches of at most ``--batch`` distinct tests, each batch one pytest
process; ``--jobs`` such processes run at once.  With ``--hog`` one CPU-bound process
spins beside them for the whole hunt, as on a loaded CI machine.  Every run's outcome
comes from the batch's JUnit XML; a batch that dies before writing it counts its tests
as failed, with the process's output.

Prints, per test: runs, failures (and errors), skips; then the first failure's output of
each failing test.  Exit status 1 when any run failed.  Everything it starts (the pytest
processes, the hog) is ended and reaped on exit, Ctrl-C included.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOG = "while True: pass"


@dataclass
class Tally:
    runs: int = 0
    failures: int = 0
    skips: int = 0
    first_failure: str = ""


@dataclass
class Hunt:
    tallies: dict[str, Tally] = field(default_factory=dict)

    def record(self, test: str, outcome: str, output: str = "") -> None:
        tally = self.tallies.setdefault(test, Tally())
        tally.runs += 1
        if outcome == "skipped":
            tally.skips += 1
        elif outcome == "failed":
            tally.failures += 1
            tally.first_failure = tally.first_failure or output

    @property
    def runs(self) -> int:
        return sum(t.runs for t in self.tallies.values())

    @property
    def failures(self) -> int:
        return sum(t.failures for t in self.tallies.values())


def collect(selection: list[str]) -> list[str]:
    """The test ids pytest selects with ``selection`` (its -k/-m/paths)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *selection], capture_output=True, text=True, cwd=REPO)
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        raise SystemExit(f"flake_hunt: no test selected by {selection}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return ids


def plan(ids: list[str], runs: int, batch: int, rng: random.Random) -> list[list[str]]:
    """``runs`` test runs in batches of distinct tests: rounds of every test, shuffled."""
    batches: list[list[str]] = []
    left = runs
    while left > 0:
        round_ = rng.sample(ids, k=len(ids))[:left]
        left -= len(round_)
        batches += [round_[i:i + batch] for i in range(0, len(round_), batch)]
    return batches


def _test_id(case: ET.Element) -> str:
    """A JUnit <testcase>'s pytest id (classname is the dotted path, plus classes)."""
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (REPO / path).is_file():
            return "::".join([str(path), *parts[cut:], name])
    return f"{classname}::{name}"


def read_results(report: Path, tests: list[str], output: str, hunt: Hunt) -> None:
    """Record a batch's outcomes; tests the report does not name (the batch died) failed."""
    seen: set[str] = set()
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            test = _test_id(case)
            seen.add(test)
            failed = case.find("failure")
            if failed is None:
                failed = case.find("error")
            if failed is not None:
                hunt.record(test, "failed", (failed.get("message") or "") + "\n" + (failed.text or ""))
            elif case.find("skipped") is not None:
                hunt.record(test, "skipped")
            else:
                hunt.record(test, "passed")
    for test in tests:
        if test not in seen:
            hunt.record(test, "failed", f"(no result: the pytest process ended)\n{output[-4000:]}")


def _interruptible() -> None:
    """In a child: SIGINT interrupts it (a shell's background job inherits it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen, first: int = signal.SIGINT) -> None:
    """End ``proc``, then reap it: ``first`` (SIGINT: pytest tears its fixtures down, so the
    devices it started are stopped and unmounted), then SIGKILL to its process group (all it
    started there) if it is still running a minute later."""
    if proc.poll() is None:
        try:
            proc.send_signal(first)
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


def _stop_devices_left(tmp: Path) -> None:
    """Stop the devices a pytest interrupted mid-setup left mounted under ``tmp``."""
    devroots = {Path(line.split()[1]).parent for line in Path("/proc/self/mounts").read_text().splitlines()
                if line.split()[1].startswith(f"{tmp}/") and line.split()[1].endswith("/npu0")}
    for devroot in sorted(devroots):
        if devroot.name == "dev":
            subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                           capture_output=True, cwd=REPO, timeout=120)
            print(f"flake_hunt: stopped a device left running: {devroot}", file=sys.stderr)


def run(batches: list[list[str]], jobs: int, hog: bool, pytest_args: list[str], progress) -> Hunt:
    hunt = Hunt()
    running: list[tuple[subprocess.Popen, list[str], Path, Path]] = []
    hogger = subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) if hog else None
    with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
        os.chmod(tmp, 0o711)
        try:
            pending = list(enumerate(batches))
            while pending or running:
                while pending and len(running) < jobs:
                    index, tests = pending.pop(0)
                    report, log = Path(tmp, f"batch{index}.xml"), Path(tmp, f"batch{index}.log")
                    scratch = Path(tmp, f"batch{index}")      # its TMPDIR: the devices its tests start
                    scratch.mkdir(mode=0o711)                 # (other users reach those the tests open)
                    with open(log, "w") as out:
                        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                 f"--junitxml={report}", *pytest_args, *tests],
                                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                                env={**os.environ, "TMPDIR": str(scratch)},
                                                start_new_session=True, preexec_fn=_interruptible)
                    running.append((proc, tests, report, log))
                for entry in [e for e in running if e[0].poll() is not None]:
                    running.remove(entry)
                    proc, tests, report, log = entry
                    read_results(report, tests, log.read_text(errors="replace"), hunt)
                    progress(hunt)
                time.sleep(0.2)    # the hunt's own polling of its children, not a test
        finally:
            for proc, *_ in running:
                _stop(proc)
            _stop_devices_left(Path(tmp))
            if hogger is not None:
                _stop(hogger, signal.SIGTERM)
    return hunt


def report(hunt: Hunt, seconds: float, hog: bool) -> str:
    lines = [f"{hunt.runs} test runs of {len(hunt.tallies)} tests in {seconds:.0f} s"
             f"{' beside a CPU hog' if hog else ''}: {hunt.failures} failed", ""]
    width = max(len(t) for t in hunt.tallies)
    lines.append(f"{'test':<{width}}  runs  failed  skipped")
    for test, t in sorted(hunt.tallies.items(), key=lambda kv: (-kv[1].failures, kv[0])):
        lines.append(f"{test:<{width}}  {t.runs:4d}  {t.failures:6d}  {t.skips:7d}")
    for test, t in hunt.tallies.items():
        if t.failures:
            lines += ["", f"---- first failure of {test} ----", t.first_failure.strip()[-6000:]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.flake_hunt", description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="keyword", help="pytest -k expression selecting the tests")
    ap.add_argument("-m", dest="mark", help="pytest -m marker expression selecting the tests (e.g. recovery)")
    ap.add_argument("--runs", type=int, default=200, help="test runs in all (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="pytest processes at once (default %(default)s)")
    ap.add_argument("--batch", type=int, default=25, help="distinct tests per pytest process (default %(default)s)")
    ap.add_argument("--hog", action="store_true", help="spin a CPU-bound process beside the tests")
    ap.add_argument("--seed", type=int, default=0, help="the order's random seed")
    ap.add_argument("--pytest-arg", action="append", default=[], help="passed to each pytest run (repeatable)")
    ap.add_argument("paths", nargs="*", default=[], help="test files or directories (default: the suite)")
    args = ap.parse_args(argv)
    selection = [*args.paths, *(["-k", args.keyword] if args.keyword else []),
                 *(["-m", args.mark] if args.mark else [])]
    ids = collect(selection)
    batches = plan(ids, args.runs, max(1, args.batch), random.Random(args.seed))
    print(f"flake_hunt: {args.runs} runs of {len(ids)} tests in {len(batches)} pytest processes, {args.jobs} at once"
          f"{', beside a CPU hog' if args.hog else ''}", flush=True)
    started = time.monotonic()
    failed_seen = Counter[str]()

    def progress(hunt: Hunt) -> None:
        new = {test: t.failures for test, t in hunt.tallies.items() if t.failures > failed_seen[test]}
        for test, count in new.items():
            print(f"  FAILED {test} ({count} so far)", flush=True)
            failed_seen[test] = count
        print(f"  {hunt.runs}/{args.runs} runs, {hunt.failures} failed, {time.monotonic() - started:.0f} s", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)       # as Ctrl-C: the tests' devices are stopped
    try:
        hunt = run(batches, max(1, args.jobs), args.hog, args.pytest_arg, progress)
    except KeyboardInterrupt:
        print("flake_hunt: interrupted", file=sys.stderr)
        return 130
    print(report(hunt, time.monotonic() - started, args.hog))
    return 1 if hunt.failures else 0


if __name__ == "__main__":
    sys.exit(main())
