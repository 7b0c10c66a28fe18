"""One client of the chaos workload: a process mixing jobs and allocations through libnpu.

``client_main`` runs in its own process (started by :mod:`benchmarks.chaos`, which may
SIGKILL it at any moment).  It loops over operations chosen at random:

- ``dma``: a DMA copy job (4 KiB to 4 MiB, one to four copies), its result checked;
- ``infer``: one inference of a small int8 fully connected layer through
  ``libnpu.load`` (loaded on first use), its output checked against the first one;
- ``async``: up to 16 NOP and copy jobs submitted at once, then waited for;
- ``alloc`` / ``free``: buffers allocated and freed, up to 32 kept at a time.

Before and after each operation it sends ``("start", id, kind, deadline)`` and
``("end", id, outcome)`` to the controller, which calls an operation hung when its
deadline (the job timeout plus a margin, on the system-wide monotonic clock) passes
first.  Outcomes: ``ok``, an errno name (the driver's or the job's error), ``hung`` (a
wait that outlived the deadline), ``wrong data`` or ``unexpected: ...`` (anything else:
a bug).  The controller's ``"stop"`` ends the loop; the client then frees what it
holds and closes the device.
"""
from __future__ import annotations

import errno
import os
import random
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import libnpu

KINDS = {"dma": 4, "infer": 3, "async": 2, "alloc": 2, "free": 2}
SIZES = (4096, 64 << 10, 1 << 20, 4 << 20)
MAX_HELD = 32


def loaded_margin(margin_s: float) -> float:
    """``margin_s`` stretched by how oversubscribed the CPUs are now (1-minute load average
    per CPU, at least 1): a chip restarted under load 25 on 2 CPUs took longer than 15 s to
    serve again, which is slowness, not a hang; a real hang outlives any margin."""
    return margin_s * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


class _Reporter:
    def __init__(self, conn, job_timeout_s: float, margin_s: float):
        self.conn, self.job_timeout_s, self.margin_s = conn, job_timeout_s, margin_s
        self.next_id = 0

    def deadline(self, job: bool) -> float:
        return time.monotonic() + (self.job_timeout_s if job else 0.0) + loaded_margin(self.margin_s)

    @contextmanager
    def op(self, kind: str, job: bool = True) -> Iterator[dict]:
        """Report the operation's start and its outcome (``result["outcome"]`` may be set)."""
        self.next_id += 1
        op_id, result = self.next_id, {"outcome": "ok"}
        self.conn.send(("start", op_id, kind, self.deadline(job)))
        try:
            yield result
        except libnpu.NpuError as exc:          # JobError included: a clear error with an errno
            result["outcome"] = errno.errorcode.get(exc.errno, str(exc.errno))
        except TimeoutError:
            result["outcome"] = "hung"
        except Exception as exc:  # noqa: BLE001 - reported to the controller as a bug
            result["outcome"] = f"unexpected: {exc!r} at {traceback.format_tb(exc.__traceback__)[-1].strip()}"
        self.conn.send(("end", op_id, result["outcome"]))


@contextmanager
def _scratch(device: libnpu.Device) -> Iterator[list]:
    """Memory that an operation allocates into the yielded list, all freed at its end."""
    got: list[libnpu.Memory] = []
    try:
        yield got
    finally:
        for memory in got:
            device.free_mem(memory)


def _fc_loadable():
    from libnpu.compiler.lower import lower
    from libnpu.tools.ops_bench import Layer, build_graph
    return lower(build_graph(Layer("chaos_fc", "fc", 4, 256, 64), np.random.default_rng(0)))


class _Client:
    def __init__(self, device: libnpu.Device, rng: random.Random, reporter: _Reporter, job_timeout_ms: int):
        self.device, self.rng, self.report, self.job_timeout_ms = device, rng, reporter, job_timeout_ms
        self.held: list[libnpu.Memory] = []
        self.model = None
        self.expected: np.ndarray | None = None
        self.x = np.random.default_rng(1).integers(-128, 128, (4, 256), dtype=np.int8)

    def dma(self) -> None:
        size, copies = self.rng.choice(SIZES), self.rng.randint(1, 4)
        with self.report.op("dma") as result, _scratch(self.device) as got:
            src, dst = self._alloc(got, size), self._alloc(got, size)
            cmds = self._commands(got)
            value = self.rng.randrange(256)
            src.view[:] = value
            for _ in range(copies):
                cmds.add("DMA_COPY", src=src.address, dst=dst.address, length=size)
            self.device.run(cmds, [src, dst], timeout_ms=self.job_timeout_ms)
            if not (dst.view == value).all():
                result["outcome"] = "wrong data"

    def _alloc(self, got: list, size: int) -> libnpu.Memory:
        got.append(self.device.alloc_mem(size))
        return got[-1]

    def _commands(self, got: list) -> libnpu.CommandBuffer:
        commands = self.device.command_buffer()
        got.append(commands.memory)
        return commands

    def infer(self) -> None:
        if self.model is None:
            with self.report.op("load", job=False):
                self.model = libnpu.load(_fc_loadable(), self.device)
            return
        with self.report.op("infer") as result:
            (y,) = self.model.infer([self.x])
            if self.expected is None:
                self.expected = y
            elif not np.array_equal(y, self.expected):
                result["outcome"] = "wrong data"

    def async_jobs(self) -> None:
        with self.report.op("async") as result, _scratch(self.device) as got:
            src, dst = self._alloc(got, 64 << 10), self._alloc(got, 64 << 10)
            nop, copy = self._commands(got), self._commands(got)
            nop.add("NOP")
            copy.add("DMA_COPY", src=src.address, dst=dst.address, length=64 << 10)
            fences = [self.device.submit(*self.rng.choice(((nop, []), (copy, [src, dst]))),
                                         timeout_ms=self.job_timeout_ms)
                      for _ in range(self.rng.randint(1, 16))]
            bound = self.report.job_timeout_s + loaded_margin(self.report.margin_s)
            self.device.wait(fences, timeout=bound)     # TimeoutError: hung
            failed = sorted({-f.status for f in fences if f.status})
            if failed:
                result["outcome"] = errno.errorcode.get(failed[0], str(failed[0]))

    def alloc(self) -> None:
        with self.report.op("alloc", job=False):
            for _ in range(self.rng.randint(1, 4)):
                self.held.append(self.device.alloc_mem(self.rng.choice(SIZES)))
        while len(self.held) > MAX_HELD:
            self.free()

    def free(self) -> None:
        if not self.held:
            return
        memory = self.held.pop(self.rng.randrange(len(self.held)))
        with self.report.op("free", job=False):
            self.device.free_mem(memory)

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
        for memory in self.held:
            self.device.free_mem(memory)


def client_main(devroot: str, seed: int, job_timeout_ms: int, margin_s: float, conn) -> None:
    """The client process's body: operations until the controller says ``"stop"``."""
    rng = random.Random(seed)
    reporter = _Reporter(conn, job_timeout_ms / 1000, margin_s)
    with libnpu.initialize(devroot) as session:
        client = _Client(session.open(0), rng, reporter, job_timeout_ms)
        actions = {"dma": client.dma, "infer": client.infer, "async": client.async_jobs,
                   "alloc": client.alloc, "free": client.free}
        kinds, weights = list(KINDS), list(KINDS.values())
        while not conn.poll():
            actions[rng.choices(kinds, weights)[0]]()
        with reporter.op("close", job=False):
            client.close()
    conn.send(("stopped",))
