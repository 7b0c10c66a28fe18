"""Acceptance script: hostile user-queue clients beside a victim, on a device of its own.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.fuzz_queues [--seconds 60] [--processes 2] [--seed 1] [--json]

It starts a device under a temporary devroot (``npu-kmd start``; stopped at the end even
on failure). Each of ``--processes`` hostile clients, as the unprivileged user ``--user``
(default ``nobody`` when run as root), keeps two user queues and, action after action
chosen at random, lies to them through the queue memory the chip reads: entries with
random command addresses (its own command buffer, its queue memory, a buffer it just
freed, address 0, past a mapping's end, another context's range), sizes (0, 7, 2^32 - 8,
past the end), timeouts (0, 1, 2^32 - 1) and flags; entries whose seq lies; tails that
run backwards or far ahead; random header fields (done, error, waiting, polling, magic,
entries) and completion records; floods of doorbell bytes; MEM_FREE of the buffers its
entries use; QUEUE_DESTROY with and without CANCEL at any moment, then QUEUE_CREATE
again; GET_PROFILE of random queue fences. Meanwhile a victim process runs DMA-copy jobs
of random data through a user queue and through SUBMIT, each checked. Checked:

- every victim job completes, with status 0 and the right bytes, within
  ``--job-timeout`` seconds (no fence lost, no stall);
- every status a hostile job gets (its completion record) and every errno a hostile
  request gets is one docs/abi.md documents for it;
- every entry a hostile client writes completes within ``--job-timeout`` seconds (or its
  queue stops);
- the daemon never exits; once the clients are gone the device memory, contexts, the
  daemon's descriptors and the state directory's files are back to the baseline and no
  queue slot is left enabled.

Prints hostile actions/s, victim jobs/s and the outcome histogram; exit status 0 when
every check held.
"""
from __future__ import annotations

import argparse
import errno
import functools
import json
import multiprocessing
import os
import pwd
import random
import sys
import time
from collections import Counter

import numpy as np

from kmd_fuse import paths
from npu_hw import queues

from .scratch_device import ScratchDevice, reap

RSS_SLACK = 64 << 20
QUEUE_STATUSES = {0, -errno.EFAULT, -errno.EINVAL, -errno.ETIMEDOUT, -errno.EIO, -errno.ECANCELED}
REQUEST_ERRNOS = {
    "QUEUE_CREATE": {errno.EMFILE, errno.ENOSPC, errno.EAGAIN},
    "QUEUE_DESTROY": {errno.EBUSY, errno.ENOENT},
    "GET_PROFILE": {errno.ENOENT, errno.EBUSY, errno.EINVAL},
    "MEM_FREE": {errno.ENOENT},
    "MEM_ALLOC": {errno.ENOMEM, errno.EDQUOT},
}
U64 = (1 << 64) - 1
SLOW_NS = 500_000_000
HOSTILE_VALUES = (0, 1, 7, 0xFFFFFFFF, 1 << 31, 1 << 47, 1 << 63, (1 << 64) - 1)
BUFFER_BYTES = 64 << 10


def _name(err: int) -> str:
    return errno.errorcode.get(abs(err), str(err))


class Hostile:
    """One lying client: a device, two queues, a few buffers and a command buffer."""

    def __init__(self, devroot: str, seed: int, job_timeout: float):
        import libnpu
        self.libnpu = libnpu
        self.rng = random.Random(seed)
        self.job_timeout = job_timeout
        self.session = libnpu.initialize(devroot)
        self.device = self.session.open(0)
        self.queues = [self.device.create_queue(entries=self.rng.choice((2, 8, 64))) for _ in range(2)]
        self.buffers = [self.device.alloc_mem(BUFFER_BYTES) for _ in range(3)]
        self.freed: list[int] = []                 # addresses of buffers it freed
        self.nop = self.device.command_buffer()
        self.nop.add("NOP")
        self.histogram: Counter[str] = Counter()
        self.problems: list[str] = []
        self._busy = 0                             # QUEUE_DESTROY EBUSY answers seen
        self.slow: list[str] = []                  # entries that held their core over SLOW_NS

    # ---- bookkeeping ----
    def _request(self, name: str, call) -> object:
        try:
            result = call()
            self.histogram[f"{name} ok"] += 1
            return result
        except self.libnpu.NpuError as exc:
            self.histogram[f"{name} {_name(exc.errno)}"] += 1
            if exc.errno not in REQUEST_ERRNOS.get(name, set()):
                self._problem(f"{name}: undocumented errno {_name(exc.errno)}")
            return None

    def _problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)

    def _queue(self):
        return self.rng.choice(self.queues)

    def _replace(self, queue, cancel: bool) -> None:
        """QUEUE_DESTROY (the library's raw path: no wait for the jobs), then a new queue."""
        from kmd_fuse import uapi
        request = uapi.new_payload(uapi.NPU_CMD_QUEUE_DESTROY)
        request.queue_id, request.flags = queue.id, uapi.NPU_QUEUE_DESTROY_CANCEL if cancel else 0
        destroyed = self._request("QUEUE_DESTROY",
                                  lambda: self.device.file.request(uapi.NPU_CMD_QUEUE_DESTROY, request))
        if destroyed is None and self.histogram["QUEUE_DESTROY EBUSY"] > self._busy:
            self._busy += 1
            return                                   # EBUSY: it stays
        queue.release()
        self.queues.remove(queue)
        created = self._request("QUEUE_CREATE", lambda: self.device.create_queue(entries=self.rng.choice((2, 8, 64))))
        if created is not None:
            self.queues.append(created)
        else:
            self.queues.append(self.device.create_queue())

    # ---- what a completion may say ----
    def _check_completion(self, queue, seq: int, what: str) -> None:
        """The status of the job just done (the client scribbles older records itself)."""
        at = queues.completions_offset(queue.entries) + (seq & (queue.entries - 1)) * queues.COMPLETION_STRUCT.size
        written, status, *_, exec_ns = queues.COMPLETION_STRUCT.unpack_from(queue.mem, at)
        if written == seq and exec_ns > SLOW_NS and len(self.slow) < 10:
            self.slow.append(f"{exec_ns / 1e9:.1f} s, {_name(status) if status else 'ok'}: {what}")
        if written == seq:
            self.histogram[f"job {_name(status) if status else 'ok'}"] += 1
            if status not in QUEUE_STATUSES:
                self._problem(f"queue job status {status} ({_name(status)})")

    # ---- actions ----
    def entry(self) -> None:
        queue = self._queue()
        if queue.error():
            self._replace(queue, cancel=True)
            return
        seq = (queue.header.read64(queues.HDR_TAIL) + 1) & U64
        if not 0 < seq - queue.header.read64(queues.HDR_DONE) <= queue.entries:
            return                                    # its header lies (the client's own doing)
        buffer = self.rng.choice(self.buffers)
        address = self.rng.choice([self.nop.address, queue.address, queue.address + queues.entries_offset(),
                                   buffer.address, buffer.address + BUFFER_BYTES - 8, 0,
                                   self.freed[-1] if self.freed else 0x7_0000_0000, self.rng.randrange(1 << 40)])
        size = self.rng.choice([self.nop.used, 0, 7, 0xFFFFFFF8, BUFFER_BYTES + 8, self.rng.randrange(1 << 16)])
        timeout = self.rng.choice([0, 0, 1, 0xFFFFFFFF])
        flags = self.rng.choice([0, 0, queues.ENTRY_PROFILE, self.rng.randrange(1 << 32)])
        written = seq if self.rng.random() < 0.9 else self.rng.choice(HOSTILE_VALUES)
        at = queues.entries_offset() + (seq & (queue.entries - 1)) * queues.ENTRY_STRUCT.size
        queues.ENTRY_STRUCT.pack_into(queue.mem, at, written, address, size, timeout, flags, 0)
        queue.header.write64(queues.HDR_TAIL, seq)
        queue.tail = seq
        queue.ring()
        self._wait_done(queue, seq, f"cmd {address:#x}+{size:#x} timeout {timeout} flags {flags:#x} seq {written:#x}",
                        required=not getattr(queue, "lied_to", False))

    def _wait_done(self, queue, seq: int, what: str, required: bool) -> None:
        """Wait for the entry's completion; one of a queue whose tail or done it forged may
        never come (the core may have completed that seq already, or stopped the queue)."""
        deadline = time.monotonic() + (self.job_timeout if required else 0.05)
        while queue.header.read64(queues.HDR_DONE) < seq and not queue.error():
            if time.monotonic() > deadline:
                if not required:
                    self.histogram["entry of a forged queue not seen done"] += 1
                    return
                header = queue.header
                self._problem(f"queue {queue.id} (core {queue.core}, {queue.entries} entries) job {seq} not done "
                              f"in {self.job_timeout} s ({what}; at {time.strftime('%H:%M:%S')}: tail "
                              f"{header.read64(queues.HDR_TAIL)}, done {header.read64(queues.HDR_DONE)}, "
                              f"polling {header.read32(queues.HDR_POLLING)})")
                return
            time.sleep(0.0005)
        self._check_completion(queue, seq, what)

    def tail(self) -> None:
        queue = self._queue()
        done = queue.header.read64(queues.HDR_DONE)
        bad = self.rng.choice([done - 1, done + queue.entries + 1, self.rng.choice(HOSTILE_VALUES)])
        queue.header.write64(queues.HDR_TAIL, bad & U64)
        queue.lied_to = True                          # its own entries may never complete now
        queue.ring()
        self.histogram["tail lied"] += 1

    def header(self) -> None:
        queue = self._queue()
        field, width = self.rng.choice([(queues.HDR_DONE, 8), (queues.HDR_ERROR, 4), (queues.HDR_WAITING, 4),
                                        (queues.HDR_POLLING, 4), (queues.HDR_MAGIC, 4), (queues.HDR_ENTRIES, 4)])
        value = self.rng.choice(HOSTILE_VALUES) & ((1 << (8 * width)) - 1)
        (queue.header.write64 if width == 8 else queue.header.write32)(field, value)
        queue.lied_to = True                          # its own entries may never complete now
        self.histogram["header lied"] += 1

    def completions(self) -> None:
        queue = self._queue()
        start = queues.completions_offset(queue.entries)
        length = queue.entries * queues.COMPLETION_STRUCT.size
        offset = start + self.rng.randrange(length)
        chunk = min(64, start + length - offset)
        queue.mem[offset:offset + chunk] = self.rng.randbytes(chunk)
        self.histogram["completions scribbled"] += 1

    def doorbells(self) -> None:
        queue = self._queue()
        for _ in range(1000):
            try:
                os.write(queue.doorbell_fd, b"x" * 64)
            except BlockingIOError:
                break
            except BrokenPipeError:
                break
        self.histogram["doorbell flood"] += 1

    def free(self) -> None:
        buffer = self.buffers.pop(self.rng.randrange(len(self.buffers)))
        self.freed.append(buffer.address)
        self.freed = self.freed[-8:]
        self._request("MEM_FREE", lambda: self.device.free_mem(buffer))
        fresh = self._request("MEM_ALLOC", lambda: self.device.alloc_mem(BUFFER_BYTES))
        self.buffers.append(fresh if fresh is not None else self.device.alloc_mem(4096))

    def destroy(self) -> None:
        self._replace(self._queue(), cancel=self.rng.random() < 0.7)

    def profile(self) -> None:
        queue = self._queue()
        tail = queue.header.read64(queues.HDR_TAIL)
        seq = self.rng.choice([0, 1, tail, tail + 1, (1 << 48) - 1]) & ((1 << 48) - 1)
        slot = self.rng.choice([queue.id, queue.id, self.rng.randrange(1 << 15)])
        fence = queues.USER_JOB_BIT | (slot << 48) | seq
        self._request("GET_PROFILE", lambda: self.device.get_profile(fence))

    ACTIONS = (("entry", 40), ("tail", 4), ("header", 8), ("completions", 6), ("doorbells", 2), ("free", 5),
               ("destroy", 4), ("profile", 6))

    def step(self) -> None:
        names, weights = zip(*self.ACTIONS)
        getattr(self, self.rng.choices(names, weights)[0])()

    def close(self) -> None:
        self.device.close()
        self.session.destroy()


def hostile_client(devroot: str, seconds: float, seed: int, uid: int | None, job_timeout: float, conn) -> None:
    if uid is not None:
        os.setgroups([])
        os.setgid(pwd.getpwuid(uid).pw_gid)
        os.setuid(uid)
    actions = 0
    client = None
    try:
        client = Hostile(devroot, seed, job_timeout)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            client.step()
            actions += 1
    except Exception as exc:       # a client that cannot go on is itself a finding
        problems = (client.problems if client else []) + [f"hostile client stopped: {exc!r}"]
        conn.send(("done", actions, dict(client.histogram) if client else {}, client.slow if client else [],
                   problems))
        return
    client.close()
    conn.send(("done", actions, dict(client.histogram), client.slow, client.problems))


def victim_client(devroot: str, seconds: float, seed: int, job_timeout: float, conn) -> None:
    """DMA copies of random data through a user queue and through SUBMIT, each checked."""
    import libnpu
    rng = np.random.default_rng(seed)
    problems: list[str] = []
    jobs = 0
    worst = 0.0
    with libnpu.initialize(devroot) as session:
        device = session.open(0)
        queue = device.create_queue()
        src, dst = device.alloc_mem(BUFFER_BYTES), device.alloc_mem(BUFFER_BYTES)
        commands = device.command_buffer()
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(problems) < 20:
            length = int(rng.integers(1, BUFFER_BYTES // 64)) * 64
            pattern = rng.integers(0, 256, length, dtype=np.uint8)
            src.view[:length] = pattern
            dst.view[:length] = 0
            commands.clear()
            commands.add("DMA_COPY", src=src.address, dst=dst.address, length=length)
            started = time.monotonic()
            path = "queue" if jobs % 2 == 0 else "ioctl"
            try:
                if path == "queue":
                    device.queue_submit(queue, commands).wait(job_timeout)
                else:
                    device.run(commands, [src, dst], timeout_ms=int(job_timeout * 1000))
            except Exception as exc:
                problems.append(f"victim {path} job {jobs}: {exc!r}")
                continue
            worst = max(worst, time.monotonic() - started)
            if not np.array_equal(dst.view[:length], pattern):
                problems.append(f"victim {path} job {jobs}: wrong bytes")
            jobs += 1
    conn.send(("victim", jobs, worst, problems))


def _enabled_slots(devroot) -> list[int]:
    table = np.fromfile(paths.bus_dir(devroot, 0) / "qtab", np.uint32)
    return [slot for slot in range(queues.QUEUE_SLOTS)
            if table[(queues.slot_offset(slot) + queues.Q_CONTROL) // 4] & queues.Q_ENABLED]


def _log_lines(devroot) -> list[str]:
    """The daemon's log lines about restarts, timeouts and errors (to explain a problem)."""
    try:
        text = paths.log_file(devroot, 0).read_text(errors="replace")
    except OSError:
        return []
    words = ("watchdog", "restart", "timed out", "died", "Traceback", "ERROR", "error")
    return [line for line in text.splitlines() if any(word in line for word in words)][-40:]


def run(seconds: float, processes: int, user: str | None, seed: int, job_timeout: float, log=print) -> dict:
    uid = pwd.getpwnam(user).pw_uid if user else None
    problems: list[str] = []
    histogram: Counter[str] = Counter()
    device = ScratchDevice()
    device.start()
    actions = victim_jobs = 0
    log_lines: list[str] = []
    slow: list[str] = []
    worst = 0.0
    elapsed = 0.0
    try:
        if uid is not None:
            os.chmod(device.tmp, 0o711)
            os.chmod(device.devroot / "npu0", 0o666)
        baseline = device.resources()
        log(f"device up: daemon {device.daemon_pid}, {baseline}")
        spawn = multiprocessing.get_context("spawn")
        workers = []
        started = time.monotonic()
        for i in range(processes + 1):
            parent_end, child_end = spawn.Pipe(duplex=False)
            if i < processes:
                target, args = hostile_client, (str(device.devroot), seconds, seed + i, uid, job_timeout, child_end)
            else:
                target, args = victim_client, (str(device.devroot), seconds, seed + 1000, job_timeout, child_end)
            proc = spawn.Process(target=target, args=args, daemon=True)
            proc.start()
            child_end.close()
            workers.append((proc, parent_end))
        for proc, conn in workers:
            try:
                if not conn.poll(seconds + 120):
                    problems.append(f"client {proc.pid} gave no result")
                    continue
                message = conn.recv()
            except EOFError:
                proc.join(10)
                problems.append(f"client {proc.pid} died: exit {proc.exitcode}")
                continue
            if message[0] == "victim":
                victim_jobs, worst = message[1], message[2]
            else:
                actions += message[1]
                histogram.update(message[2])
                slow += message[3]
            problems.extend(message[-1])
        elapsed = time.monotonic() - started
        reap(workers)
        daemon_exits = 0 if device.daemon_alive() else 1
        if not daemon_exits:
            final, leaks = device.settle(baseline, RSS_SLACK)
            problems += leaks
            slots = _enabled_slots(device.devroot)
            if slots:
                problems.append(f"queue slots still enabled once every client left: {slots}")
        else:
            problems.append(f"the daemon (pid {device.daemon_pid}) exited")
            final = baseline
        log_lines = _log_lines(device.devroot) if problems else []
    finally:
        problems += device.stop()
    return {"seconds": round(elapsed, 1), "hostile_processes": processes, "user": user or "root",
            "hostile_actions": actions, "actions_per_s": round(actions / max(elapsed, 1e-9)),
            "victim_jobs": victim_jobs, "victim_jobs_per_s": round(victim_jobs / max(elapsed, 1e-9)),
            "victim_worst_job_s": round(worst, 3), "baseline": baseline.__dict__, "final": final.__dict__,
            "histogram": dict(sorted(histogram.items(), key=lambda kv: -kv[1])), "problems": problems,
            "slow_entries": slow, "log": log_lines}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_queues", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--processes", type=int, default=2, help="hostile clients")
    ap.add_argument("--user", default="nobody" if os.geteuid() == 0 else None,
                    help="run the hostile clients as this user (default nobody when root; '' = as yourself)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-timeout", type=float, default=15.0, help="seconds a proper job may take")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("fuzz_queues: mounting the device needs root", file=sys.stderr)
        return 2
    result = run(args.seconds, args.processes, args.user or None, args.seed, args.job_timeout,
                 log=(lambda *_: None) if args.json else functools.partial(print, flush=True))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['hostile_actions']:,} hostile actions in {result['seconds']} s "
              f"({result['actions_per_s']:,}/s) by {result['hostile_processes']} processes as {result['user']}; "
              f"victim: {result['victim_jobs']:,} jobs ({result['victim_jobs_per_s']}/s), "
              f"worst {result['victim_worst_job_s']} s")
        print(f"baseline {result['baseline']}\nfinal    {result['final']}")
        width = max((len(k) for k in result["histogram"]), default=0)
        for key, count in result["histogram"].items():
            print(f"  {key:<{width}} {count:>10,}")
        for entry in result["slow_entries"]:
            print(f"slow entry: {entry}")
        for problem in result["problems"]:
            print(f"PROBLEM: {problem}")
        for line in result["log"]:
            print(f"log: {line}")
        print("OK" if not result["problems"] else "FAILED")
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
