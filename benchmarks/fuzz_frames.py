"""Acceptance script: a million random and mutated request frames against a device of its own.

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.fuzz_frames [--frames 1000000] [--processes 4] [--json]

It starts a device under a temporary devroot (``npu-kmd start``; stopped at the end
even on failure), then each of ``--processes`` clients, as the unprivileged user
``--user`` (default ``nobody`` when run as root: the attacker of issue 11), opens the node
and writes its share of frames from :class:`benchmarks.frames.FrameGenerator`, reading
every reply.  Checked:

- every errno that comes back (from ``write()``, from ``read()``, in a reply, as a job's
  status) is one docs/abi.md documents; every reply echoes its request's seq and command;
- no reply takes longer than ``--reply-timeout`` seconds (a wedged driver);
- the daemon never exits;
- once the clients are gone: device memory and contexts back to the baseline, the
  daemon's file descriptors and the device's /dev/shm files back to theirs, no file in
  /dev/shm left owned by the clients' user, the daemon's RSS within a margin.

Prints frames/s and the errno histogram; exit status 0 when every check held.
"""
from __future__ import annotations

import argparse
import errno
import functools
import json
import multiprocessing
import os
import pwd
import sys
import time
from collections import Counter

from kmd_fuse import uapi

from .frames import FrameGenerator, documented_errnos
from .scratch_device import ScratchDevice, reap

RSS_SLACK = 64 << 20
PROGRESS_EVERY = 5000


def _shm_files_of(uid: int) -> int:
    """Files anywhere under /dev/shm owned by ``uid`` (the clients' buffers are theirs)."""
    count = 0
    for root, dirs, files in os.walk("/dev/shm"):
        for name in files + dirs:
            try:
                count += os.lstat(os.path.join(root, name)).st_uid == uid
            except OSError:
                pass            # another program's file, gone meanwhile
    return count


def _name(err: int) -> str:
    return errno.errorcode.get(err, str(err))


class _Client:
    """One fuzzing context: writes frames, reads and checks every reply."""

    def __init__(self, node: str, seed: int, reply_timeout: float, documented: set[int]):
        self.fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
        self.gen = FrameGenerator(seed)
        self.reply_timeout, self.documented = reply_timeout, documented
        self.histogram: Counter[str] = Counter()
        self.problems: list[str] = []

    def _errno(self, where: str, err: int) -> None:
        self.histogram[f"{where} {_name(err)}"] += 1
        if err not in self.documented and len(self.problems) < 50:
            self.problems.append(f"undocumented errno {_name(err)} from {where}")

    def _read(self, size: int = uapi.NPU_MAX_FRAME) -> bytes | None:
        """One reply frame, waiting through EAGAIN; None (and a problem) past the timeout."""
        deadline = time.monotonic() + self.reply_timeout
        while True:
            try:
                return os.pread(self.fd, size, 0)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
            if time.monotonic() > deadline:
                self.problems.append(f"no reply within {self.reply_timeout} s")
                return None

    def one(self) -> bool:
        """Send one frame and check its reply; False if the client cannot go on."""
        frame = self.gen.next()
        try:
            os.pwrite(self.fd, frame, 0)
        except OSError as exc:
            self._errno("write", exc.errno)
            return exc.errno in self.documented
        if len(frame) < uapi.HDR_SIZE:
            if frame:
                self.problems.append(f"a {len(frame)}-byte frame was accepted")
            return True                         # an empty write reaches no driver: nothing to read
        _, cmd, seq, _, _, _ = uapi.header_fields(frame)
        try:
            reply = self._read()
        except OSError as exc:
            self._errno("read", exc.errno)
            return False
        if reply is None:
            return False
        _, reply_cmd, reply_seq, _, result, _ = uapi.header_fields(reply)
        if (reply_cmd, reply_seq) != (cmd, seq):
            self.problems.append(f"reply for cmd {reply_cmd:#x} seq {reply_seq} to cmd {cmd:#x} seq {seq}")
            return False
        command = uapi.COMMANDS.get(cmd)
        label = command.name if command else "unknown"
        if result:
            self._errno(f"reply {label}", -result)
        else:
            self.histogram[f"reply {label} ok"] += 1
            self._job_statuses(command, reply)
        self.gen.observe(reply)
        return True

    def _job_statuses(self, command: uapi.Command | None, reply: bytes) -> None:
        if command is None or command.name not in ("SUBMIT", "WAIT"):
            return
        payload = uapi.unpack_payload(command.number, reply, uapi.HDR_SIZE)
        if command.name == "SUBMIT":
            statuses = [payload.status] if payload.flags & uapi.NPU_SUBMIT_WAIT else []
        else:
            statuses = [payload.status[i] for i in range(min(payload.count, uapi.NPU_MAX_WAIT_FENCES))]
        for status in statuses:
            if status < 0:
                self._errno(f"job ({command.name})", -status)

    def edge_reads(self) -> None:
        """Reads the ABI defines errors for: nothing outstanding, a too small buffer."""
        try:
            os.pread(self.fd, uapi.NPU_MAX_FRAME, 0)
            self.problems.append("read with no request outstanding returned a frame")
        except OSError as exc:
            self._errno("read (idle)", exc.errno)
        info = uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO))
        os.pwrite(self.fd, info, 0)
        try:
            os.pread(self.fd, 16, 0)
            self.problems.append("a 16-byte read returned a reply")
        except OSError as exc:
            self._errno("read (small buffer)", exc.errno)
        if self._read() is None:
            self.problems.append("the reply kept after EOVERFLOW never came")


def fuzz_client(node: str, frames: int, seed: int, uid: int | None, reply_timeout: float, conn) -> None:
    """A client process: ``frames`` frames, then its histogram and problems on ``conn``."""
    documented = documented_errnos()     # read first: the user may not reach this checkout's docs
    if uid is not None:
        os.setgroups([])
        os.setgid(pwd.getpwuid(uid).pw_gid)
        os.setuid(uid)
    client = _Client(node, seed, reply_timeout, documented)
    sent = 0
    try:
        while sent < frames:
            if sent % 1000 == 0:
                client.edge_reads()
            if not client.one():
                break
            sent += 1
            if sent % PROGRESS_EVERY == 0:
                conn.send(("progress", PROGRESS_EVERY))
    except OSError as exc:
        client.problems.append(f"client stopped: {exc!r}")
    finally:
        os.close(client.fd)
    conn.send(("done", sent % PROGRESS_EVERY, dict(client.histogram), client.problems))


def run(frames: int, processes: int, user: str | None, reply_timeout: float, log=print) -> dict:
    """Start a device, fuzz it, check it; the figures and problems as a dict."""
    uid = pwd.getpwnam(user).pw_uid if user else None
    problems: list[str] = []
    histogram: Counter[str] = Counter()
    device = ScratchDevice()
    device.start()
    try:
        if uid is not None:                     # let the unprivileged clients reach the node
            os.chmod(device.tmp, 0o711)
            os.chmod(device.devroot / "npu0", 0o666)
        baseline = device.resources()
        shm_before = _shm_files_of(uid) if uid is not None else 0
        log(f"device up: daemon {device.daemon_pid}, {baseline}")
        spawn = multiprocessing.get_context("spawn")
        workers = []
        started = time.monotonic()
        for i in range(processes):
            share = frames // processes + (1 if i < frames % processes else 0)
            parent_end, child_end = spawn.Pipe(duplex=False)
            proc = spawn.Process(target=fuzz_client, args=(str(device.devroot / "npu0"), share, 1000 + i, uid,
                                                           reply_timeout, child_end), daemon=True)
            proc.start()
            child_end.close()
            workers.append((proc, parent_end))
        sent, finished, last_print = 0, 0, time.monotonic()
        from multiprocessing.connection import wait as wait_any
        pending = {conn: proc for proc, conn in workers}
        while pending:
            for conn in wait_any(list(pending), timeout=1.0):
                try:
                    message = conn.recv()
                except EOFError:
                    problems.append(f"fuzz client {pending[conn].pid} died: exit {pending[conn].exitcode}")
                    del pending[conn]
                    continue
                sent += message[1]
                if message[0] == "done":
                    histogram.update(message[2])
                    problems.extend(message[3])
                    finished += 1
                    del pending[conn]
            if not device.daemon_alive():
                problems.append(f"the daemon (pid {device.daemon_pid}) exited")
                break
            if time.monotonic() - last_print > 10:
                last_print = time.monotonic()
                log(f"  {sent:,} frames, {sent / (last_print - started):,.0f} frames/s")
        elapsed = time.monotonic() - started
        reap(workers)
        daemon_exits = 0 if device.daemon_alive() else 1
        leaks: list[str] = []
        if not daemon_exits:
            final, leaks = device.settle(baseline, RSS_SLACK)
            if uid is not None and _shm_files_of(uid) != shm_before:
                leaks.append(f"/dev/shm files of uid {uid}: {shm_before} before, {_shm_files_of(uid)} after")
        else:
            final = baseline
    finally:
        left = device.stop()
    problems += left + leaks
    return {"frames": sent, "seconds": round(elapsed, 1), "frames_per_s": round(sent / max(elapsed, 1e-9)),
            "processes": processes, "user": user or "root", "daemon_exits": daemon_exits,
            "baseline": baseline.__dict__, "final": final.__dict__,
            "histogram": dict(sorted(histogram.items(), key=lambda kv: -kv[1])), "problems": problems}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_frames", description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--user", default="nobody" if os.geteuid() == 0 else None,
                    help="run the clients as this user (default nobody when root; '' = as yourself)")
    ap.add_argument("--reply-timeout", type=float, default=30.0, help="seconds a reply may take")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("fuzz_frames: mounting the device needs root", file=sys.stderr)
        return 2
    result = run(args.frames, args.processes, args.user or None, args.reply_timeout,
                 log=(lambda *_: None) if args.json else functools.partial(print, flush=True))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['frames']:,} frames in {result['seconds']} s ({result['frames_per_s']:,} frames/s), "
              f"{result['processes']} processes as {result['user']}; daemon exits: {result['daemon_exits']}")
        print(f"baseline {result['baseline']}\nfinal    {result['final']}")
        width = max((len(k) for k in result["histogram"]), default=0)
        for key, count in result["histogram"].items():
            print(f"  {key:<{width}} {count:>10,}")
        for problem in result["problems"]:
            print(f"PROBLEM: {problem}")
        print("OK" if not result["problems"] and not result["daemon_exits"] else "FAILED")
    return 0 if not result["problems"] and not result["daemon_exits"] else 1


if __name__ == "__main__":
    sys.exit(main())
