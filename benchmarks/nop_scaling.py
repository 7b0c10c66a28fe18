"""NOP jobs/s of 1 process against 4 processes on user queues, taken alternately, with
the CPU each job cost and the mode each side was in.

Issue 27's line "4 processes submitting NOPs: aggregate >= 0.9x one process alone, Jain
>= 0.98, and the CPU time of all the stack's processes per job" (issue 15 asked 1.5x, which
2 vCPUs cannot give) on a loaded, shared machine: one figure of each moves with whatever else runs, so this takes
``--pairs`` rounds on one scratch device, each of 1 process then ``--processes`` processes
(a few seconds each, back to back), and prints every round's ratio, their median and the
load average. The ratio the bar means is against one process left to its default
(adaptive) wait; each round also runs one process made to spin and one made to sleep
(``libnpu.user_queue.set_wait_mode``) and prints the ratio against each, since a single
process's rate depends mostly on which of the two it fell into. With ``--wakeups`` each round
also runs the ``--processes`` clients sleeping on the completion line (a pipe: poll and read)
beside the default futex on the queue's ``done`` (ABI 2.8), to compare the two wake-ups.

Per run it prints what a job cost in CPU (``/proc/<pid>/schedstat``, the scheduler's own
nanoseconds, not clock ticks): the clients' own in their timed loop, the cores', the
daemon's, the chip main process's, and all of them together (the whole stack); and the
mode of each side: how the clients' waits ended (at once, in the spin, asleep on the
completion line) with their sleeps (voluntary context switches) and preemptions
(involuntary) per job, and the cores' sleeps per job (a core that
sleeps about once per job is woken by a doorbell for each; one that polls takes jobs
without). On 2 vCPUs four clients can only go faster than one by spending less CPU per
job, and that figure moves less with the machine's load than the rates do.

With ``--variants`` each round also runs the ``--processes`` clients in each variant named,
side by side with the default: a ``+``-joined set of ``one-core`` (a second scratch device
with one core: a single core polls for every queue), ``nice`` (the chip's core processes
made ``--core-nice`` for the run, ``os.setpriority``: needs root or RLIMIT_NICE to raise them;
``--core-nice 0`` measures cores at the clients' priority against the chip's default,
``firmware_sim.priority``) and
``spin`` (the clients made to spin, ``set_wait_mode("spin")``) and ``unraised`` (a scratch
device started with ``NPU_CORE_NICE=0``: the chip as it was before ``firmware_sim.priority``),
``raised`` (one started with ``NPU_CORE_NICE`` at ``firmware_sim.priority.RAISED_NICE``, the
cores' nice of branch nop5) and ``unshared`` (one started with ``NPU_SHARED_QUEUES=0``: each queue
served by its own core, the chip before shared service, ``firmware_sim.queue_service``),
e.g. ``--variants unraised,one-core,one-core+unraised,spin``: what each piece of issue 27's
hypothesis (one polling core, not preempted, clients spinning) gives; ``unshared+raised`` is
the chip of branch nop5.

Run: ``python -m benchmarks.nop_scaling [--pairs 3] [--seconds 2] [--processes 4] [--wakeups]
[--variants V,...] [--core-nice N] [--json]``.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks.scratch_device import ScratchDevice
from firmware_sim import priority
from libnpu import user_queue
from libnpu.capi import queue_native
from libnpu.portability import Session
from libnpu.tools import bench

TICKS = os.sysconf("SC_CLK_TCK")
WAYS = ("at_once", "spun", "slept")


@dataclass
class Usage:
    """CPU seconds, sleeps (voluntary context switches) and preemptions (involuntary) of
    some processes."""

    cpu_s: float = 0.0
    sleeps: int = 0
    preemptions: int = 0

    @property
    def switches(self) -> int:
        return self.sleeps + self.preemptions

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s + other.cpu_s, self.sleeps + other.sleeps, self.preemptions + other.preemptions)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s - other.cpu_s, self.sleeps - other.sleeps, self.preemptions - other.preemptions)


def _cpu_seconds(pid: int) -> float:
    """Time on a CPU: schedstat's nanoseconds, else utime + stime in clock ticks."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def process_usage(pid: int) -> Usage:
    """What ``pid`` has used so far (nothing if it is gone)."""
    try:
        cpu = _cpu_seconds(pid)
        with open(f"/proc/{pid}/status") as f:
            counts = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
        return Usage(cpu, int(counts["voluntary_ctxt_switches"]), int(counts["nonvoluntary_ctxt_switches"]))
    except (OSError, IndexError, ValueError, KeyError):
        return Usage()


class QueueClientMeter:
    """A client's own figures over its timed loop: CPU, sleeps, preemptions, how its waits ended."""

    def __init__(self, device) -> None:
        self.queue = device.queues[0] if device.queues else None

    def __enter__(self) -> QueueClientMeter:
        self._usage = process_usage(os.getpid())
        self._waits = self.queue.wait_counts() if self.queue else {}
        return self

    def __exit__(self, *exc) -> None:
        self.usage = process_usage(os.getpid()) - self._usage
        after = self.queue.wait_counts() if self.queue else {}
        self.waits = {way: after[way] - self._waits[way] for way in WAYS} if self.queue else {}

    def outcome(self, jobs: int, path: str) -> dict:
        native = self.queue is not None and self.queue.native
        return {"jobs": jobs, "usage": self.usage, "waits": self.waits,
                "path": f"queue (C, {self.queue.wakeup})" if native else path,
                "core": self.queue.core if self.queue is not None else -1}


def reaped_cpu_seconds(pid: int) -> float:
    """CPU of ``pid``'s children it has reaped (/proc/<pid>/stat's cutime + cstime, clock ticks)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


class DeviceMeter:
    """What the device's processes used over a run: the cores, the driver's daemon and the chip's main process.
    A core that retires during the run (``firmware_sim.recycling``: a grown core that holds nothing
    once a client's context closed) is counted until it exits, through what the chip's main
    process reaped, and its successor from its start."""

    def __init__(self, dev: ScratchDevice) -> None:
        self.dev = dev
        self.main = dev.chip_main()
        self.pids = {"cores": dev.chip_cores(), "daemon": [dev.daemon_pid],
                     "chip_main": [self.main] if self.main else []}

    def _usage(self) -> dict[str, Usage]:
        return {side: sum((process_usage(p) for p in pids), Usage()) for side, pids in self.pids.items()}

    def __enter__(self) -> DeviceMeter:
        self._before = self._usage()
        self._reaped = reaped_cpu_seconds(self.main) if self.main else 0.0
        return self

    def __exit__(self, *exc) -> None:
        after = self._usage()
        self.used = {side: after[side] - self._before[side] for side in after}
        started = [pid for pid in self.dev.chip_cores() if pid not in self.pids["cores"]]
        retired = reaped_cpu_seconds(self.main) - self._reaped if self.main else 0.0
        self.used["cores"] += sum((process_usage(p) for p in started), Usage(cpu_s=retired))
        self.cores_used = self.used["cores"]
        self.others_used = self.used["daemon"] + self.used["chip_main"]


def _client(devroot: str, seconds: float, barrier, results, mode: str = "adaptive", futex: bool = True) -> None:
    """NOP jobs back to back through a user queue, waiting in ``mode``, asleep on a futex (where
    the device offers it) or on the completion line; QueueClientMeter's outcome."""
    user_queue.set_wait_mode(mode)
    queue_native.FUTEX_WAKEUPS = futex          # (NPU_QUEUE_FUTEX) for the queue made below
    with Session(devroot) as session:
        device = session.open(0)
        run_one, _, path = bench.nop_job(device, "queue")
        for _ in range(50):
            run_one()
        barrier.wait()
        with QueueClientMeter(device) as meter:
            deadline = time.perf_counter() + seconds
            completed = 0
            while time.perf_counter() < deadline:
                run_one()
                completed += 1
    results.put(meter.outcome(completed, path))


def _per_job(usage: Usage, jobs: int) -> dict:
    return {"cpu_us_per_job": round(usage.cpu_s / jobs * 1e6, 1), "sleeps_per_job": round(usage.sleeps / jobs, 2),
            "preemptions_per_job": round(usage.preemptions / jobs, 2)}


def summarize(outcomes: list[dict], elapsed: float, device: DeviceMeter, mode: str = "adaptive") -> dict:
    """jobs/s of the clients' outcomes, and per side the CPU per job and the mode it was in."""
    jobs = max(1, sum(o["jobs"] for o in outcomes))
    clients = sum((o["usage"] for o in outcomes), Usage())
    waits = {way: sum(o["waits"].get(way, 0) for o in outcomes) for way in WAYS}
    waited = sum(waits.values()) or 1
    client = _per_job(clients, jobs) | {"waits": {way: round(n / waited, 3) for way, n in waits.items()}}
    client["mode"] = "sleeping" if waits["slept"] >= waited / 2 else "spinning"
    core = _per_job(device.cores_used, jobs)
    core["mode"] = "sleeping" if core["sleeps_per_job"] >= 0.5 else "polling"
    return {"processes": len(outcomes), "wait_mode": mode, "path": outcomes[0]["path"],
            "jobs_per_s": round(jobs / elapsed, 1),
            "fairness": bench.jain_fairness([o["jobs"] for o in outcomes]),
            # each client's core (the one serving its queue), jobs and CPU ms: which one got less, and
            # whether it had less CPU (the host's scheduler) or as much CPU for fewer jobs (the chip's order)
            "per_client": sorted((o.get("core", -1), o["jobs"], round(o["usage"].cpu_s * 1e3)) for o in outcomes),
            "client": client, "cores": core,
            # the daemon and the chip's main process over the whole run (a little longer than the timed loops)
            "daemon_chip": _per_job(device.others_used, jobs),
            "daemon": _per_job(device.used["daemon"], jobs), "chip_main": _per_job(device.used["chip_main"], jobs),
            # every process of the stack: the clients, the cores, the daemon and the chip's main process
            "stack_cpu_us_per_job": round((clients.cpu_s + device.cores_used.cpu_s + device.others_used.cpu_s)
                                          / jobs * 1e6, 1),
            "switches_per_job": round((clients.switches + device.cores_used.switches
                                       + device.others_used.switches) / jobs, 2)}


def measure(dev: ScratchDevice, processes: int, seconds: float, mode: str = "adaptive", futex: bool = True) -> dict:
    """One timed run of ``processes`` clients waiting in ``mode``, on a futex or the line (``summarize``)."""
    with DeviceMeter(dev) as device:
        outcomes, elapsed = bench.run_clients(functools.partial(_client, mode=mode, futex=futex), dev.devroot,
                                              processes, seconds)
    return summarize(outcomes, elapsed, device, mode)


PIECES = ("one-core", "nice", "spin", "unraised", "raised", "unshared")


def parse_variants(text: str) -> list[str]:
    """``--variants``: names of ``+``-joined PIECES, each checked."""
    variants = [v for v in text.split(",") if v]
    for variant in variants:
        unknown = set(variant.split("+")) - set(PIECES)
        if unknown:
            raise ValueError(f"variant {variant!r}: no piece {', '.join(sorted(unknown))} "
                             f"(pieces: {', '.join(PIECES)})")
    return variants


def _autogroup_nice(pid: int) -> int | None:
    """The nice of ``pid``'s autogroup (/proc/<pid>/autogroup: "/autogroup-N nice V"), None without one."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _set_autogroup_nice(pid: int, nice: int) -> None:
    with open(f"/proc/{pid}/autogroup", "w") as f:
        f.write(str(nice))


@contextlib.contextmanager
def cores_at(dev: ScratchDevice, nice: int):
    """The device's core processes at ``nice`` for the block (restored after), and their
    autogroup too where the kernel has them (sched_autogroup: a process's nice weighs only
    against its own session's, and the driver's session is not the clients'); PermissionError
    where this user may not raise them."""
    pids = dev.chip_cores()
    before = {pid: os.getpriority(os.PRIO_PROCESS, pid) for pid in pids}
    groups = {pid: _autogroup_nice(pid) for pid in pids}
    try:
        for pid in pids:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            if groups[pid] is not None:
                _set_autogroup_nice(pid, nice)
        yield
    finally:
        for pid, value in before.items():
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, value)
            if groups[pid] is not None:
                with contextlib.suppress(OSError):
                    _set_autogroup_nice(pid, groups[pid])


def _device_key(variant: str | None) -> tuple[int, tuple[tuple[str, str], ...]]:
    """The scratch device a run takes: its cores, and the chip's environment (its cores' nice,
    whether its queues are shared; the chip's defaults where the variant says nothing)."""
    pieces = set(variant.split("+")) if variant else set()
    env = []
    if "unraised" in pieces or "raised" in pieces:
        env.append((priority.ENVIRONMENT, "0" if "unraised" in pieces else str(priority.RAISED_NICE)))
    if "unshared" in pieces:
        env.append(("NPU_SHARED_QUEUES", "0"))
    return (1 if "one-core" in pieces else 2), tuple(env)


@contextlib.contextmanager
def scratch_device(cores: int, env: tuple[tuple[str, str], ...]):
    """A scratch device of ``cores`` cores whose chip starts with ``env`` in its environment
    (e.g. NPU_CORE_NICE=0: its cores at the clients' nice, in the driver's session)."""
    saved = {name: os.environ.get(name) for name, _ in env}
    os.environ.update(dict(env))
    try:
        dev = ScratchDevice(cores=cores).start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    try:
        yield dev
    finally:
        dev.stop()


def measure_variant(variant: str, dev: ScratchDevice, processes: int, seconds: float, core_nice: int) -> dict:
    """``processes`` clients in ``variant`` (parse_variants) on ``dev`` (its ``_device_key``)."""
    pieces = set(variant.split("+"))
    mode = "spin" if "spin" in pieces else "adaptive"
    with cores_at(dev, core_nice) if "nice" in pieces else contextlib.nullcontext():
        return measure(dev, processes, seconds, mode)


def measure_pairs(pairs: int, seconds: float, processes: int, modes: bool = True,
                  wakeups: bool = False, variants: tuple[str, ...] = (), core_nice: int = -10) -> list[dict]:
    """``pairs`` rounds on one scratch device: 1 process (adaptive; then made to spin and
    made to sleep, unless ``modes`` is false), then ``processes`` processes (adaptive; with
    ``wakeups`` again asleep on the completion line instead of the futex; then in each of
    ``variants``, on a scratch device of one core for ``one-core``, one whose chip does not
    raise its cores for ``unraised``)."""
    rows = []
    with contextlib.ExitStack() as stack:
        devices = {key: stack.enter_context(scratch_device(*key))
                   for key in dict.fromkeys([_device_key(None), *map(_device_key, variants)])}
        dev = devices[_device_key(None)]
        for warming in devices.values():
            measure(warming, 1, 0.3)                                  # warm-up: cores, caches
        for _ in range(pairs):
            row: dict = {"one": measure(dev, 1, seconds)}
            if modes:
                row["one_spinning"] = measure(dev, 1, seconds, "spin")
                row["one_sleeping"] = measure(dev, 1, seconds, "sleep")
            row["many"] = many = measure(dev, processes, seconds)
            row["ratio"] = round(many["jobs_per_s"] / row["one"]["jobs_per_s"], 3)
            if wakeups:
                row["many_line"] = line = measure(dev, processes, seconds, futex=False)
                row["ratio_line"] = round(line["jobs_per_s"] / row["one"]["jobs_per_s"], 3)
            for variant in variants:
                run = measure_variant(variant, devices[_device_key(variant)], processes, seconds, core_nice)
                row.setdefault("variants", {})[variant] = run | {
                    "ratio": round(run["jobs_per_s"] / row["one"]["jobs_per_s"], 3)}
            if modes:
                row["ratio_vs_spinning"] = round(many["jobs_per_s"] / row["one_spinning"]["jobs_per_s"], 3)
                row["ratio_vs_sleeping"] = round(many["jobs_per_s"] / row["one_sleeping"]["jobs_per_s"], 3)
            row["load"] = os.getloadavg()[0]
            row["cores_nice"] = [os.getpriority(os.PRIO_PROCESS, pid) for pid in dev.chip_cores()]
            rows.append(row)
    return rows


def describe(run: dict) -> str:
    """One run in one line: the rate, then each side's CPU per job and mode."""
    client, cores, rest = run["client"], run["cores"], run["daemon_chip"]
    waits = ", ".join(f"{client['waits'][way]:.0%} {way.replace('_', ' ')}" for way in WAYS)
    return (f"{run['jobs_per_s']:7.0f} jobs/s; CPU/job: clients {client['cpu_us_per_job']:5.1f} us "
            f"{client['mode']} (waits {waits}; {client['sleeps_per_job']:.2f} sleeps, "
            f"{client['preemptions_per_job']:.2f} preemptions/job), cores {cores['cpu_us_per_job']:5.1f} us "
            f"{cores['mode']} ({cores['sleeps_per_job']:.2f} sleeps, {cores['preemptions_per_job']:.2f} "
            f"preemptions/job), daemon {run['daemon']['cpu_us_per_job']:.1f} us, chip main "
            f"{run['chip_main']['cpu_us_per_job']:.1f} us (together {rest['cpu_us_per_job']:.1f}); the whole stack "
            f"{run['stack_cpu_us_per_job']:.1f} us; {run['switches_per_job']:.2f} switches/job [{run['path']}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--no-modes", action="store_true",
                    help="skip the single-process runs made to spin and made to sleep")
    ap.add_argument("--wakeups", action="store_true",
                    help="also run the processes asleep on the completion line instead of the futex")
    ap.add_argument("--variants", default="",
                    help=f"comma-separated variants of the processes' run, each a +-joined set of {', '.join(PIECES)}")
    ap.add_argument("--core-nice", type=int, default=-10, help="the nice value of the 'nice' variants' cores")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        variants = parse_variants(args.variants)
    except ValueError as exc:
        ap.error(str(exc))
    rows = measure_pairs(args.pairs, args.seconds, args.processes, modes=not args.no_modes, wakeups=args.wakeups,
                         variants=tuple(variants), core_nice=args.core_nice)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    for row in rows:
        print(f"1 (adaptive): {describe(row['one'])}")
        if "one_spinning" in row:
            print(f"1 (spin):     {describe(row['one_spinning'])}")
            print(f"1 (sleep):    {describe(row['one_sleeping'])}")
        print(f"{args.processes} (adaptive): {describe(row['many'])}")
        against = (f"; against 1 spinning {row['ratio_vs_spinning']:.2f}, 1 sleeping {row['ratio_vs_sleeping']:.2f}"
                   if "one_spinning" in row else "")
        print(f"   ratio {row['ratio']:.2f}{against}; fairness {row['many']['fairness']:.2f} "
              f"(per client: core, jobs, CPU ms {row['many']['per_client']}), load {row['load']:.2f}")
        if "many_line" in row:
            print(f"{args.processes} (line):     {describe(row['many_line'])}")
            print(f"   ratio {row['ratio_line']:.2f}; fairness {row['many_line']['fairness']:.2f} "
                  f"(per client: core, jobs, CPU ms {row['many_line']['per_client']})")
        for variant, run in row.get("variants", {}).items():
            print(f"{args.processes} ({variant.replace('nice', f'nice {args.core_nice}')}): {describe(run)}")
            print(f"   ratio {run['ratio']:.2f}; fairness {run['fairness']:.2f} "
                  f"(per client: core, jobs, CPU ms {run['per_client']})")
    print(f"load {os.getloadavg()[0]:.2f}; median ratio {statistics.median(r['ratio'] for r in rows):.2f} "
          f"(issue 27's bar: >= 0.9), median fairness "
          f"{statistics.median(r['many']['fairness'] for r in rows):.3f} (>= 0.98), the whole stack's CPU per job "
          f"median {statistics.median(r['one']['stack_cpu_us_per_job'] for r in rows):.1f} us with 1 process, "
          f"{statistics.median(r['many']['stack_cpu_us_per_job'] for r in rows):.1f} us with {args.processes}",
          end="")
    if "many_line" in rows[0]:
        print(f"; on the line: ratio {statistics.median(r['ratio_line'] for r in rows):.2f}, fairness "
              f"{statistics.median(r['many_line']['fairness'] for r in rows):.3f}, the whole stack's CPU per job "
              f"{statistics.median(r['many_line']['stack_cpu_us_per_job'] for r in rows):.1f} us", end="")
    if "ratio_vs_spinning" in rows[0]:
        print(f"; against 1 spinning {statistics.median(r['ratio_vs_spinning'] for r in rows):.2f}, "
              f"1 sleeping {statistics.median(r['ratio_vs_sleeping'] for r in rows):.2f}", end="")
    print()
    print(f"  the cores' nice by default: {rows[-1]['cores_nice']}")
    for variant in variants:
        runs = [r["variants"][variant] for r in rows]
        label = variant.replace('nice', f'nice {args.core_nice}')
        print(f"  {label}: ratio {statistics.median(r['ratio'] for r in runs):.2f}, fairness "
              f"{statistics.median(r['fairness'] for r in runs):.3f}, the whole stack's CPU per job "
              f"{statistics.median(r['stack_cpu_us_per_job'] for r in runs):.1f} us (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
