"""A tiny frame writer for shell tests: one request on a device node, printed as KEY=VALUE.

    python npu_frame.py NODE info | stats | reset     one request, its reply fields
    python npu_frame.py NODE alloc SIZE [hold]        allocate SIZE bytes; with 'hold', print the
                                                      reply, then keep the context open until stdin closes
    python npu_frame.py NODE hold                     open a context, print CONTEXT_ID=, wait for stdin EOF
    python npu_frame.py NODE bench N                  N raw GET_INFO round trips; prints p50/mean µs

A refused request prints ERROR=<errno name> and exits 1; a refused open() exits 2.
"""
from __future__ import annotations

import errno
import os
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


def main(argv: list[str]) -> int:
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
            print(f"CONTEXT_ID={info.context_id}\nPID={os.getpid()}", flush=True)
            sys.stdin.read()
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
