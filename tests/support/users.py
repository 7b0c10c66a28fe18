"""Code run as another user in a forked child of the test process: the child drops root's
privileges (setgroups, setgid, setuid) and runs a function already imported, so nothing
has to be staged where that user can read it (a clone under /root works too).

``as_user`` runs a function once and returns its result; ``UserProcess`` keeps the child
alive and talks to it over a pipe (for peers that must hold something while the test
acts). Every child is reaped, also when the test fails."""
from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

NOBODY = 65534
_FORK = multiprocessing.get_context("fork")


def drop_privileges(uid: int, gid: int | None = None, groups: Sequence[int] = ()) -> None:
    """Become ``uid`` (group ``gid``, default the same number) with only ``groups``."""
    os.setgroups(list(groups))
    os.setgid(uid if gid is None else gid)
    os.setuid(uid)


def _child(uid: int, gid: int | None, groups: Sequence[int], fn: Callable, args: tuple, conn) -> None:
    try:
        drop_privileges(uid, gid, groups)
        conn.send(("ok", fn(conn, *args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class UserProcess:
    """``fn(conn, *args)`` in a child running as ``uid``; ``conn`` is the child's end of a
    pipe (``send``/``recv`` below reach it), and fn's return value is the last message."""

    def __init__(self, uid: int, fn: Callable, *args: Any, gid: int | None = None, groups: Sequence[int] = ()):
        self.conn, child_end = _FORK.Pipe()
        self.proc = _FORK.Process(target=_child, args=(uid, gid, tuple(groups), fn, args, child_end), daemon=True)
        self.proc.start()
        child_end.close()

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def recv(self, timeout: float = 60) -> Any:
        """The child's next message; its traceback as an AssertionError if it failed."""
        if not self.conn.poll(timeout):
            raise AssertionError(f"no word from the child in {timeout} s")
        message = self.conn.recv()
        if isinstance(message, tuple) and message[:1] == ("error",):
            raise AssertionError(f"the child failed:\n{message[1]}")
        return message[1] if isinstance(message, tuple) and message[:1] == ("ok",) else message

    def close(self) -> None:
        self.conn.close()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()

    def __enter__(self) -> UserProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def as_user(uid: int, fn: Callable, *args: Any, gid: int | None = None, groups: Sequence[int] = (),
            timeout: float = 60) -> Any:
    """``fn(*args)`` run as ``uid``; its return value (it must pickle)."""
    with UserProcess(uid, lambda _conn, *a: fn(*a), *args, gid=gid, groups=groups) as child:
        return child.recv(timeout)
