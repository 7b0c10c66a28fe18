"""A tiny frame writer for shell tests: one request on a device node, printed as KEY=VALUE.

    python npu_frame.py NODE info | stats | reset     one request, its reply fields
    python npu_frame.py NODE alloc SIZE [hold]        allocate SIZE bytes (then hold the context)
    python npu_frame.py NODE hold                     keep the context open: print CONTEXT_ID= and PID=,
                                                      then answer 'info'/'stats' lines on stdin, until EOF
    python npu_frame.py NODE bench N                  N raw GET_INFO round trips; prints p50/mean µs

Options before NODE: `--user NAME|UID` and `--groups G1,G2` drop root's privileges to that
user (its own gid, only those supplementary groups) before the node is opened, for
interpreters other users cannot execute themselves.

Each reply is KEY=VALUE lines; in hold mode a line '.' ends each. A refused request
prints ERROR=<errno name> and exits 1; a refused open() exits 2.
"""
from __future__ import annotations

import errno
import grp
import os
import pwd
import select
import statistics
import sys
import time

from kmd_fuse import uapi

_CMDS = {"info": uapi.NPU_CMD_GET_INFO, "stats": uapi.NPU_CMD_GET_STATS,
         "reset": uapi.NPU_CMD_RESET, "alloc": uapi.NPU_CMD_MEM_ALLOC}


def request(fd: int, cmd: int, payload=None, seq: int = 1, timeout_s: float = 30.0):
    """Write one request frame and read its reply; returns (result, payload struct)."""
    os.write(fd, uapi.pack_frame(cmd, seq, payload if payload is not None else uapi.new_payload(cmd)))
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    while True:
        if poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            try:
                frame = os.read(fd, uapi.NPU_MAX_FRAME)
                break
            except BlockingIOError:   # EAGAIN: woke early, poll again
                pass
        if time.monotonic() > deadline:
            raise TimeoutError("no reply")
    hdr = uapi.unpack_header(frame)
    body = frame[uapi.HDR_SIZE:]
    return hdr.result, (uapi.unpack_payload(cmd, body) if body else None)


def _fields(payload) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in dir(payload):
        value = getattr(payload, name)
        if isinstance(value, int):
            out[name] = value
        elif name == "model":
            out[name] = uapi.c_string(value)
    return out


def _print(payload) -> None:
    for key, value in sorted(_fields(payload).items()):
        print(f"{key.upper()}={value}")
    sys.stdout.flush()


def _bench(fd: int, n: int) -> None:
    cmd = uapi.NPU_CMD_GET_INFO
    frame = uapi.pack_frame(cmd, 1, uapi.new_payload(cmd))
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        os.write(fd, frame)
        poller.poll(5000)
        os.read(fd, uapi.NPU_MAX_FRAME)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"N={n}\nP50_US={times[n // 2] * 1e6:.1f}\nMEAN_US={statistics.fmean(times) * 1e6:.1f}\n"
          f"P99_US={times[int(n * 0.99)] * 1e6:.1f}")


def _drop_privileges(user: str, groups: str) -> None:
    entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    gids = [int(g) if g.isdigit() else grp.getgrnam(g).gr_gid for g in groups.split(",") if g]
    os.setgroups(gids)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def main(argv: list[str]) -> int:
    user, groups = None, ""
    while argv and argv[0] in ("--user", "--groups") and len(argv) > 1:
        if argv[0] == "--user":
            user = argv[1]
        else:
            groups = argv[1]
        argv = argv[2:]
    if user is not None:
        _drop_privileges(user, groups)
    if len(argv) < 2 or argv[1] not in (*_CMDS, "hold", "bench"):
        print(__doc__, file=sys.stderr)
        return 64
    node, what = argv[0], argv[1]
    try:
        fd = os.open(node, os.O_RDWR)
    except OSError as exc:
        print(f"ERROR={errno.errorcode.get(exc.errno, exc.errno)}")
        return 2
    try:
        if what == "bench":
            _bench(fd, int(argv[2]) if len(argv) > 2 else 3000)
            return 0
        hold = what == "hold" or argv[-1] == "hold"
        if what != "hold":
            payload = uapi.new_payload(_CMDS[what])
            if what == "alloc":
                payload.size = int(argv[2])
            result, reply = request(fd, _CMDS[what], payload)
            if result:
                print(f"ERROR={errno.errorcode.get(-result, result)}")
                return 1
            _print(reply)
        if hold:
            result, info = request(fd, uapi.NPU_CMD_GET_INFO)
            print(f"CONTEXT_ID={info.context_id}\nPID={os.getpid()}\n.", flush=True)
            for line in sys.stdin:
                if line.strip() in ("info", "stats"):
                    result, reply = request(fd, _CMDS[line.strip()])
                    _print(reply) if not result else print(f"ERROR={errno.errorcode.get(-result, result)}")
                else:
                    print(f"ERROR=EINVAL unknown command {line.strip()!r}")
                print(".", flush=True)
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
