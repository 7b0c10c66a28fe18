"""Benchmark: what a flood on the buffer hand-over socket costs everyone else (issue 24,
finding 2: 1-byte messages from 2 processes of a user who may not open the node made the
raw GET_INFO round trip go from 77 us to 2 ms, and filled the log).

Run from the repository root, as root (not in CI)::

    .venv/bin/python -m benchmarks.handover_flood [--requests 3000] [--rounds 3] [--flooders 2]
        [--user nobody] [--member] [--json]

It starts a device of its own (``ScratchDevice``: ``npu-kmd start`` under a temporary
devroot, stopped at the end even on failure), opens the node as root and times, in
alternating phases, side by side in one run:

- quiet: the raw GET_INFO round trip (one frame written, its reply read; p50 and p99 of
  ``--requests``), then root's buffer hand-over (MEM_MAP and the socket exchange:
  ``Device.buffer_fd``), with nothing else running;
- flood: the same while ``--flooders`` processes of ``--user`` (default ``nobody``, not in
  the node's group: it may not open the node) connect to the hand-over socket and send a
  1-byte message, as fast as they can. With ``--member`` they are in the node's group, so
  they are admitted and each message is refused by the token check instead (the path of
  a rejected message). With ``--node-flood`` they send GET_INFO on the node itself instead,
  as fast as they can: the reference, what any member of the group may do anyway.

Prints each phase's p50s, the ratio flood/quiet of the GET_INFO p50 (medians over
``--rounds``; target <= 2), how many of the flood's messages were refused and how fast,
and how much the driver's log grew during the floods. Exit status 0 when the target holds.
"""
from __future__ import annotations

import argparse
import errno
import json
import multiprocessing
import os
import pwd
import socket
import statistics
import sys
import time
from collections import Counter

import libnpu
from kmd_fuse import paths, uapi

from .scratch_device import ScratchDevice, reap

TARGET_RATIO = 2.0
HANDOVERS = 200            # root's buffer hand-overs timed a phase
COST_SECONDS = 3.0         # the flood alone, to measure the daemon's CPU per message


def get_info_round_trips(fd: int, count: int) -> list[float]:
    """Seconds per raw GET_INFO round trip on the open node ``fd``, ``count`` times."""
    cmd = uapi.NPU_CMD_GET_INFO
    frame = uapi.pack_frame(cmd, 1, uapi.new_payload(cmd))
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        os.write(fd, frame)
        while True:
            try:
                os.read(fd, uapi.NPU_MAX_FRAME)
                break
            except BlockingIOError:      # the driver holds a read ~50 ms at most: read again
                continue
        times.append(time.perf_counter() - t0)
    return times


def handover_times(device, count: int) -> list[float]:
    """Seconds per hand-over of one of root's buffers (MEM_MAP + the socket exchange)."""
    mem = device.alloc_mem(4096)
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        fd, _ = device.buffer_fd(mem.handle)
        times.append(time.perf_counter() - t0)
        os.close(fd)
    device.free_mem(mem)
    return times


def flooder(path: str, node: str | None, uid: int, gid: int, groups: list[int], go, stop, sent, conn) -> None:
    """Connect, send one byte, read the answer, close; again, while ``go`` is set and
    until ``stop``, counting in ``sent`` (with ``node``: a GET_INFO on the node instead).
    Reports a Counter of the answers (errno names) and the seconds flooded."""
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)
    seen: Counter[str] = Counter()
    flooding = 0.0
    fd = os.open(node, os.O_RDWR) if node else -1
    while not stop.is_set():
        if not go.wait(0.1):
            continue
        t0 = time.monotonic()
        while go.is_set():
            if fd >= 0:
                get_info_round_trips(fd, 1)
                seen["GET_INFO"] += 1
                sent.value += 1
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
                try:
                    sock.connect(path)
                    try:
                        sock.send(b"x", socket.MSG_NOSIGNAL)
                    except BrokenPipeError:
                        pass                 # refused before it read: the reply says why
                    reply = sock.recv(64)
                    result = uapi.unpack_handover_reply(reply)[0] if reply else 0
                    seen[errno.errorcode.get(-result, "closed") if result else "no reply"] += 1
                except OSError as exc:
                    seen[errno.errorcode.get(exc.errno or 0, "error")] += 1
            sent.value += 1
        flooding += time.monotonic() - t0
    conn.send((dict(seen), flooding))


def daemon_cost_per_message(pid: int, go, counters) -> float:
    """The daemon's CPU microseconds per flood message: its CPU during COST_SECONDS of the
    flood alone, less what it uses idle over as long, over the messages sent meanwhile."""
    cpu0 = _cpu_seconds(pid)
    time.sleep(COST_SECONDS)
    idle = _cpu_seconds(pid) - cpu0
    go.set()
    time.sleep(0.5)
    cpu0, sent0 = _cpu_seconds(pid), sum(c.value for c in counters)
    time.sleep(COST_SECONDS)
    cpu, sent = _cpu_seconds(pid) - cpu0 - idle, sum(c.value for c in counters) - sent0
    go.clear()
    return cpu / max(sent, 1) * 1e6


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _log_bytes(devroot) -> int:
    log = paths.log_file(devroot, 0)
    return sum(p.stat().st_size for p in (log, log.with_name(log.name + ".1")) if p.exists())


def _p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e6


def run(requests: int, rounds: int, flooders: int, user: str, member: bool, node_flood: bool = False,
        log=print) -> dict:
    entry = pwd.getpwnam(user)
    ctx = multiprocessing.get_context("fork")
    with ScratchDevice() as npu:
        path = str(paths.handover_socket(npu.devroot, 0))
        node = paths.node_path(npu.devroot, 0)
        groups = [os.stat(node).st_gid] if member or node_flood else []
        if node_flood:
            os.chmod(npu.tmp, 0o711)                  # mkdtemp's 0700: the flooders must reach the node
        go, stop = ctx.Event(), ctx.Event()
        workers = []
        counters = [ctx.RawValue("Q", 0) for _ in range(flooders)]     # each written by its flooder only
        for sent in counters:
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=flooder, args=(path, str(node) if node_flood else None, entry.pw_uid,
                                                     entry.pw_gid, groups, go, stop, sent, child_end))
            proc.start()
            workers.append((proc, parent_end))
        phases: dict[str, dict[str, list[float]]] = {"quiet": {"get_info": [], "handover": [], "p99": []},
                                                     "flood": {"get_info": [], "handover": [], "p99": []}}
        log_growth = 0
        cpu = {"quiet": [0.0, 0.0], "flood": [0.0, 0.0]}          # daemon CPU s, wall s
        try:
            fd = os.open(node, os.O_RDWR)
            with libnpu.initialize(npu.devroot) as session:
                device = session.open(0)
                get_info_round_trips(fd, 200)                     # warm up
                for _ in range(rounds):
                    for phase in ("quiet", "flood"):
                        before = _log_bytes(npu.devroot)
                        if phase == "flood":
                            go.set()
                            time.sleep(0.5)                       # let the flood get going
                        cpu0, wall0 = _cpu_seconds(npu.daemon_pid), time.monotonic()
                        times = get_info_round_trips(fd, requests)
                        phases[phase]["get_info"].append(_p(times, 0.5))
                        phases[phase]["p99"].append(_p(times, 0.99))
                        phases[phase]["handover"].append(_p(handover_times(device, HANDOVERS), 0.5))
                        cpu[phase][0] += _cpu_seconds(npu.daemon_pid) - cpu0
                        cpu[phase][1] += time.monotonic() - wall0
                        go.clear()
                        if phase == "flood":
                            log_growth += _log_bytes(npu.devroot) - before
                cost_us = daemon_cost_per_message(npu.daemon_pid, go, counters)
            os.close(fd)
        finally:
            go.clear()
            stop.set()
            seen: Counter[str] = Counter()
            flooded = 0.0
            for _proc, conn in workers:
                if conn.poll(30):
                    try:
                        answers, seconds = conn.recv()
                    except EOFError:                  # it died (its traceback is on stderr)
                        continue
                    seen.update(answers)
                    flooded = max(flooded, seconds)
            reap(workers)
    quiet = statistics.median(phases["quiet"]["get_info"])
    flood = statistics.median(phases["flood"]["get_info"])
    result = {
        "requests": requests, "rounds": rounds, "flooders": flooders, "user": user, "member": member,
        "get_info_p50_us": {"quiet": round(quiet, 1), "flood": round(flood, 1)},
        "get_info_p99_us": {k: round(statistics.median(v["p99"]), 1) for k, v in phases.items()},
        "handover_p50_us": {k: round(statistics.median(v["handover"]), 1) for k, v in phases.items()},
        "ratio": round(flood / quiet, 2),
        "flood_answers": dict(seen),
        "flood_messages_per_s": round(sum(seen.values()) / flooded) if flooded else 0,
        "log_bytes_during_floods": log_growth,
        "daemon_cpu_percent": {k: round(100 * c / w, 1) for k, (c, w) in cpu.items()},
        "daemon_cpu_us_per_message": round(cost_us, 1),
    }
    who = f"{flooders} x {user}" + (" (in the node's group)" if member else " (may not open the node)")
    if node_flood:
        who = f"{flooders} x {user} in the node's group, GET_INFO on the node itself (the reference)"
    log(f"GET_INFO raw round trip, p50 (p99) in us, median of {rounds} rounds of {requests}:")
    log(f"  quiet  {quiet:8.1f} ({result['get_info_p99_us']['quiet']:.1f})")
    log(f"  flood  {flood:8.1f} ({result['get_info_p99_us']['flood']:.1f})   flooders: {who}")
    verdict = "met" if result["ratio"] <= TARGET_RATIO else "MISSED"
    log(f"  ratio  {result['ratio']:8.2f}   (target <= {TARGET_RATIO:g}: {verdict})")
    log(f"root's buffer hand-over (MEM_MAP + socket), p50 in us: quiet {result['handover_p50_us']['quiet']:.1f}, "
        f"flood {result['handover_p50_us']['flood']:.1f}")
    log(f"flood: {sum(seen.values()):,} messages ({result['flood_messages_per_s']:,}/s), answers {dict(seen)}; "
        f"the driver's log grew {log_growth:,} bytes meanwhile")
    log(f"the daemon's CPU: {result['daemon_cpu_percent']['quiet']:.0f}% quiet, "
        f"{result['daemon_cpu_percent']['flood']:.0f}% during the flood; {cost_us:.1f} us of its CPU per flood "
        f"message (the flood alone, {COST_SECONDS:g} s, less its idle CPU)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handover_flood", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="GET_INFO round trips a phase")
    parser.add_argument("--rounds", type=int, default=3, help="quiet/flood phase pairs")
    parser.add_argument("--flooders", type=int, default=2)
    parser.add_argument("--user", default="nobody", help="the flooders' user")
    parser.add_argument("--member", action="store_true", help="put the flooders in the node's group")
    parser.add_argument("--node-flood", action="store_true",
                        help="the reference: flooders in the node's group send GET_INFO on the node itself, "
                             "as any member may")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("handover_flood: run as root (it starts a device and floods as another user)", file=sys.stderr)
        return 2
    result = run(args.requests, args.rounds, args.flooders, args.user, args.member, args.node_flood,
                 log=(lambda *_: None) if args.json else print)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0 if result["ratio"] <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
