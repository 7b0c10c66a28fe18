"""Chaos: clients mixing jobs and allocations while clients, cores and the chip die.

One implementation for ``tests/kmd_fuse/test_chaos.py`` (CI: seconds) and
``python -m benchmarks.soak`` (acceptance: ten minutes).  :func:`run_chaos` keeps
``clients`` processes of :mod:`benchmarks.chaos_client` busy on a
:class:`~benchmarks.scratch_device.ScratchDevice` and, every 0.5-2 s, SIGKILLs one of
the kinds in ``kills``: a client (replaced at once), a chip core, or the chip's main
process.  It checks what issue 11 asks:

- the daemon never exits;
- every operation ends - with success or an errno - before its deadline (the job
  timeout plus ``margin_s``, stretched by the load: chaos_client.loaded_margin); one that
  does not is *hung*: reported with what was killed shortly before, and its client replaced so the run goes on;
- no successful job returns wrong data, no client fails in an unexpected way;
- once the clients are gone, nothing leaks: device memory and contexts, the daemon's
  fds and RSS, the files of the device's /dev/shm directory, and processes (every
  client reaped, the chip at one main process plus its cores, none defunct).
"""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any

from .chaos_client import client_main, loaded_margin
from .scratch_device import Resources, ScratchDevice, process_state, wait_until

KILL_KINDS = ("client", "core", "chip")


@dataclass
class ChaosConfig:
    seconds: float = 30.0
    clients: int = 4
    kills: tuple[str, ...] = KILL_KINDS
    kill_every: tuple[float, float] = (0.5, 2.0)   # seconds between kills, uniform
    job_timeout_ms: int = 2000                     # each job's, and the device's watchdog
    margin_s: float = 15.0                         # an operation is hung past its timeout + this (x load)
    rss_slack: int = 64 << 20                      # the daemon's RSS may grow this much
    settle_s: float = 120.0                        # time to reclaim killed clients and restart a killed chip
    # (test_chaos[chip] saw 3 files of a chip restart still there after 30 s at load 15; the wait ends when back)
    seed: int = 0
    # Past ``seconds``, the run goes on until it did this many operations and kills (a loaded
    # machine does fewer a second), for at most ``overtime_s`` more.
    min_operations: int = 0
    min_kills: int = 0
    overtime_s: float = 300.0


@dataclass
class ChaosReport:
    config: ChaosConfig
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)     # "kind outcome" -> count
    kills: Counter = field(default_factory=Counter)
    hung: list[str] = field(default_factory=list)
    bugs: list[str] = field(default_factory=list)          # wrong data, unexpected errors, lost clients
    leaks: list[str] = field(default_factory=list)
    daemon_exits: int = 0
    resets: int = 0
    baseline: Resources | None = None
    final: Resources | None = None

    @property
    def operations(self) -> int:
        return sum(self.outcomes.values())

    def problems(self) -> list[str]:
        """Everything that broke a promise; empty when the run passed."""
        daemon = [f"the daemon exited ({self.daemon_exits})"] if self.daemon_exits else []
        return daemon + [f"hung: {h}" for h in self.hung] + self.bugs + [f"leak: {leak}" for leak in self.leaks]

    def summary(self) -> str:
        rate = self.operations / max(self.seconds, 1e-9)
        lines = [f"{self.operations:,} operations in {self.seconds:.1f} s ({rate:,.0f}/s), {self.config.clients} "
                 f"clients; kills: {dict(self.kills)}; device resets: {self.resets}; "
                 f"daemon exits: {self.daemon_exits}; hung: {len(self.hung)}"]
        if self.baseline and self.final:
            lines.append(f"baseline {self.baseline}\nfinal    {self.final}")
        for key, count in sorted(self.outcomes.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {key:<28} {count:>9,}")
        lines += [f"PROBLEM: {p}" for p in self.problems()]
        return "\n".join(lines)


class _Client:
    """The controller's view of one client process."""

    def __init__(self, ctx, device: ScratchDevice, config: ChaosConfig, seed: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=client_main, args=(str(device.devroot), seed, config.job_timeout_ms,
                                                          config.margin_s, child), daemon=True)
        self.proc.start()
        child.close()
        self.open: dict[int, tuple[str, float, float]] = {}     # op id -> (kind, started, deadline)
        self.killed = self.stopped = False

    def kill(self) -> None:
        self.killed = True
        if self.proc.exitcode is None:     # not reaped yet: the pid is still our child's
            self.proc.kill()


class _Controller:
    def __init__(self, device: ScratchDevice, config: ChaosConfig, log):
        self.device, self.config, self.log = device, config, log
        self.rng = random.Random(config.seed)
        self.ctx = multiprocessing.get_context("spawn")
        self.report = ChaosReport(config)
        self.clients: list[_Client] = []
        self.retired: list[_Client] = []            # ended or ending, not reaped yet
        self.reaped = 0
        self.kill_log: list[tuple[float, str]] = []
        self.next_seed = config.seed * 1000

    def spawn(self) -> None:
        self.next_seed += 1
        self.clients.append(_Client(self.ctx, self.device, self.config, self.next_seed))

    def retire(self, client: _Client) -> None:
        self.clients.remove(client)
        client.conn.close()
        self.retired.append(client)

    def reap(self, timeout: float = 0.0) -> None:
        """Reap the retired clients that have exited (waiting up to ``timeout`` for each)."""
        for client in list(self.retired):
            client.proc.join(timeout)
            if client.proc.exitcode is not None:
                client.proc.close()
                self.retired.remove(client)
                self.reaped += 1

    def kills_before(self, moment: float) -> str:
        """The kills of the 5 s before ``moment``, or the last one: what a hang may come from."""
        earlier = [(t, kind) for t, kind in self.kill_log if t <= moment]
        recent = [(t, kind) for t, kind in earlier if moment - t < 5] or earlier[-1:]
        described = [f"{kind} killed {moment - t:.1f} s before it started" for t, kind in recent]
        return ", ".join(described) or "no kill before"

    def pump(self, timeout: float) -> None:
        """Take the clients' messages; notice clients that died and operations past their deadline."""
        conns = {client.conn: client for client in self.clients}
        for conn in wait_any(list(conns), timeout=timeout):
            client = conns[conn]
            try:
                while conn.poll():
                    self._message(client, conn.recv())
            except (EOFError, OSError):
                if not client.killed and not client.stopped:
                    client.proc.join(5)
                    self.report.bugs.append(f"client {client.proc.pid} died by itself (exit {client.proc.exitcode})")
                self.retire(client)
        now = time.monotonic()
        for client in list(self.clients):
            for kind, started, deadline in list(client.open.values()):
                if now > deadline:
                    self.report.hung.append(f"{kind} of client {client.proc.pid} not done after {now - started:.1f} s "
                                            f"({self.kills_before(started)})")
                    self.report.outcomes[f"{kind} hung"] += 1
                    client.kill()          # replaced, so that the run goes on
                    self.retire(client)
                    break
        self.reap()

    def _message(self, client: _Client, message: tuple) -> None:
        if message[0] == "start":
            client.open[message[1]] = (message[2], time.monotonic(), message[3])
        elif message[0] == "end":
            kind = client.open.pop(message[1], ("?",))[0]
            outcome = message[2]
            if outcome == "hung":
                self.report.hung.append(f"{kind} of client {client.proc.pid}: its wait timed out")
            elif outcome.startswith(("wrong data", "unexpected")):
                self.report.bugs.append(f"{kind} of client {client.proc.pid}: {outcome}")
            self.report.outcomes[f"{kind} {outcome.split(':')[0]}"] += 1
        elif message[0] == "stopped":
            client.stopped = True

    def kill_something(self) -> None:
        kind = self.rng.choice(self.config.kills)
        if kind == "client":
            victim = self.rng.choice(self.clients)
            victim.kill()
            self.retire(victim)
            self.spawn()
        elif kind == "core":
            cores = self.device.chip_cores()
            if not cores:
                return                                  # the chip is restarting
            os.kill(self.rng.choice(cores), signal.SIGKILL)
        else:
            main = self.device.chip_main()
            if main is None:
                return
            os.kill(main, signal.SIGKILL)
        self.report.kills[kind] += 1
        self.kill_log.append((time.monotonic(), kind))

    def run(self) -> ChaosReport:
        config, report = self.config, self.report
        report.baseline = self.device.resources()
        resets_before = self._reset_count()
        started = time.monotonic()
        for _ in range(config.clients):
            self.spawn()
        end = started + config.seconds
        next_kill = started + self.rng.uniform(*config.kill_every)
        next_log = started + 10

        def going_on() -> bool:
            now = time.monotonic()
            short = report.operations < config.min_operations or sum(report.kills.values()) < config.min_kills
            return now < end or (short and now < end + config.overtime_s)
        while going_on():
            self.pump(0.05)
            if time.monotonic() >= next_log:
                next_log += 10
                self.log(f"  {time.monotonic() - started:5.0f} s: {report.operations:,} operations, "
                         f"kills {dict(report.kills)}, hung {len(report.hung)}, problems {len(report.problems())}")
            while len(self.clients) < config.clients:
                self.spawn()
            if not self.device.daemon_alive():
                report.daemon_exits = 1
                break
            if config.kills and time.monotonic() >= next_kill:
                self.kill_something()
                next_kill = time.monotonic() + self.rng.uniform(*config.kill_every)
        self._stop_clients()
        report.seconds = time.monotonic() - started
        if report.daemon_exits:
            return report
        report.resets = self._reset_count() - resets_before
        self._check_leaks()
        return report

    def _stop_clients(self) -> None:
        """Ask every client to stop; those that do not within the bound are hung."""
        for client in self.clients:
            try:
                client.conn.send("stop")
            except OSError:
                pass
        bound = time.monotonic() + self.config.job_timeout_ms / 1000 + loaded_margin(self.config.margin_s) + 5
        while self.clients and time.monotonic() < bound:
            self.pump(0.1)
            for client in [c for c in self.clients if c.stopped]:
                self.retire(client)
        for client in list(self.clients):
            self.report.hung.append(f"client {client.proc.pid} did not stop ({len(client.open)} operations open)")
            client.kill()
            self.retire(client)
        self.reap(10)
        self.report.leaks += [f"client process {client.proc.pid} not reaped" for client in self.retired]

    def _reset_count(self) -> int:
        import libnpu
        with libnpu.initialize(self.device.devroot) as session:
            return session.open(0).info()["reset_count"]

    def _check_leaks(self) -> None:
        report, config = self.report, self.config
        report.final, leaks = self.device.settle(report.baseline, config.rss_slack, config.settle_s)
        report.leaks += leaks
        cores = self._cores()
        if not wait_until(lambda: len(self.device.chip_cores()) == cores and self.device.chip_main(), 10):
            report.leaks.append(f"chip processes: main {self.device.chip_main()}, cores {self.device.chip_cores()} "
                                f"(expected {cores})")
        defunct = [pid for pid in self.device.chip_processes(include_dead=True) if process_state(pid) == "Z"]
        if defunct:
            report.leaks.append(f"defunct chip processes: {defunct}")

    def _cores(self) -> int:
        import libnpu
        with libnpu.initialize(self.device.devroot) as session:
            return session.open(0).info()["num_cores"]


def run_chaos(device: ScratchDevice, config: ChaosConfig, log=lambda *_: None) -> ChaosReport:
    """Run the chaos workload on a started device; the report says what broke.

    Every client process is ended and reaped before this returns, also when it raises."""
    controller = _Controller(device, config, log)
    try:
        return controller.run()
    finally:
        for client in list(controller.clients):
            controller.retire(client)
        for client in controller.retired:
            client.kill()
        controller.reap(10)
