"""Daemons forked from one warmed process, so that they share the Python heap of their imports.

A daemon's heap is ~28 MiB (trio, pyfuse3, numpy through ``npu_hw``, cffi's parse of the
uapi header), nearly all of it the same in every daemon: 128 devices paid for it 128
times. ``npu-kmd start`` therefore starts one fork server for the devices it brings up
(``python -m kmd_fuse.daemon --fork-server``: the command line says what it serves, as a
daemon's does), which imports the daemon's modules, freezes its heap (``gc.freeze``:
no collection ever writes to those pages) and forks each daemon, which runs
``daemon.main`` with its own arguments, in a session of its own, its output in its log.

The protocol, one line each way: ``npu-kmd start`` writes a daemon's arguments (a JSON
object: ``argv`` and ``log``), the server answers ``pid N``; when one of its daemons
exits it writes ``exit N CODE`` (CODE as ``Popen.returncode``: negative, the signal).
At EOF on its input it exits; the daemons live on, adopted by init, as spawned ones were.
:class:`ForkServer` is the start's side, :class:`ForkedDaemon` the ``Popen``-like handle
of one daemon.
"""
from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

__all__ = ["ForkServer", "ForkedDaemon", "serve"]


# ---- the server ----

def serve(run_daemon: Callable[[list[str]], int]) -> int:
    """Serve fork requests on stdin until EOF; each child runs ``run_daemon(argv)``
    (``daemon.main``: this process is ``python -m kmd_fuse.daemon``, its modules loaded)."""
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # npu-kmd start ends us (EOF, or SIGTERM)
    requests = os.fdopen(0, "rb", buffering=0)
    replies = os.fdopen(1, "w", buffering=1)
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    pending = b""
    live: set[int] = set()
    while True:
        for pid, code in _reaped(live):
            replies.write(f"exit {pid} {code}\n")
        if not selector.select(0.05 if live else None):
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _run_daemon(run_daemon, request["argv"], request["log"])
            live.add(pid)
            replies.write(f"pid {pid}\n")


def _reaped(live: set[int]) -> list[tuple[int, int]]:
    done = []
    for pid in list(live):
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            live.discard(pid)
            done.append((pid, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)))
    return done


def _run_daemon(main: Callable[[list[str]], int], argv: list[str], log: str) -> None:
    """In the forked child: become a daemon as ``Popen(..., start_new_session=True)`` made
    one (stdin /dev/null, output to its log, default signals), run it, exit with its code."""
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL if signum != signal.SIGPIPE else signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 65536)                      # the server's pipes, the selector
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# ---- npu-kmd start's side ----

class ForkServer:
    """The fork server of one ``npu-kmd start``."""

    def __init__(self, devroot: Path, sysroot: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kmd_fuse.daemon", "--fork-server", "--devroot", str(devroot),
             "--sysroot", str(sysroot)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self._buffer = b""
        self.exits: dict[int, int] = {}

    def fork(self, argv: list[str], log: Path) -> ForkedDaemon:
        """Fork a daemon with ``argv`` (``daemon.main``'s), its output appended to ``log``."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"argv": argv, "log": str(log)}).encode() + b"\n")
        self.process.stdin.flush()
        while True:
            for words in self._lines():
                if words[0] == "pid":
                    return ForkedDaemon(self, int(words[1]))
            if self.process.poll() is not None:
                raise OSError(f"the daemons' fork server exited with status {self.process.returncode}")
            time.sleep(0.005)

    def _lines(self) -> list[list[str]]:
        """The lines the server wrote since the last look; ``exit`` lines are recorded."""
        assert self.process.stdout is not None
        if self.process.stdout.closed:       # closed: the daemons' fate is read from /proc (poll)
            return []
        try:
            self._buffer += self.process.stdout.read() or b""
        except BlockingIOError:
            pass
        *lines, self._buffer = self._buffer.split(b"\n")
        words = [line.decode().split() for line in lines if line.strip()]
        for word in words:
            if word[0] == "exit":
                self.exits[int(word[1])] = int(word[2])
        return words

    def collect(self) -> None:
        self._lines()

    def close(self) -> None:
        """Let the server go (EOF) and reap it; its daemons live on."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class ForkedDaemon:
    """A daemon the fork server forked, handled as ``npu-kmd start`` handles a ``Popen``."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.collect()
            self.returncode = self.server.exits.get(self.pid)
            if self.returncode is None and self.server.process.poll() is not None:
                # The server is gone: it can no longer report; alive is what /proc says.
                if not Path(f"/proc/{self.pid}").exists():
                    self.returncode = 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"daemon {self.pid}", timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:             # not reaped yet: the pid is still this daemon's
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
