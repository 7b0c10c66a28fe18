"""How ``npu`` and ``npu-kmd`` end when the user stops them: one line, never a traceback.

- **Ctrl-C, at any moment**: ``<prog>: interrupted`` on stderr, exit 130 (128 + SIGINT,
  what a shell reports).  A console script imports its ``main`` before running it, and
  importing ``libnpu`` (numpy, the compiler, cffi) takes ~0.3 s: a Ctrl-C meanwhile would
  print a KeyboardInterrupt traceback from the import.  So the console scripts start
  here, in a top-level module that imports nothing of the project (an entry inside
  ``libnpu`` would import ``libnpu`` first), and import the command line inside the
  ``try`` that catches the interrupt.  Its SIGINT handler records the signal before
  raising KeyboardInterrupt as Python's does, because C extensions may turn the interrupt
  into another error while they import (numpy raises ImportError when its import of
  ``datetime``'s capsule is interrupted): an error after a recorded SIGINT is an
  interruption too.  Once the command is done SIGINT gets its default action back, so a
  Ctrl-C while Python shuts down ends the process quietly, as it would a C program.
  (Before Python has set its own handler a Ctrl-C kills the process by SIGINT, quietly
  too; while ``site`` imports the editable install's finder, ~10 ms, CPython itself
  prints a "Fatal Python error": no code of ours has run yet.)
- **A reader that went away** (``npu inspect M --plan | head -3``): nothing more is
  written, no message, exit 141 (128 + SIGPIPE, what a shell reports for a C program
  there), following the recipe of Python's ``signal`` documentation: stdout is pointed at
  /dev/null so that the flush at exit cannot fail again.

The CLIs' ``main`` functions leave both to this module: they let KeyboardInterrupt
through, and a BrokenPipeError when :func:`stdout_reader_gone` (a broken pipe of their
own, such as a socket, stays an error of the command).
"""
from __future__ import annotations

import importlib
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BROKEN_PIPE", "INTERRUPTED", "npu", "npu_kmd", "run_main", "stdout_reader_gone"]

INTERRUPTED = 130        # 128 + SIGINT
BROKEN_PIPE = 141        # 128 + SIGPIPE


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reading end is closed (POLLERR on it)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):      # no stdout, or not a file
        return False


def _interrupted(prog: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_DFL)      # a second Ctrl-C ends it at once, quietly
    try:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
    except OSError:                                      # stderr gone too: the exit code says it
        pass
    return INTERRUPTED


def _reader_gone() -> int:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
    return BROKEN_PIPE


def run_main(prog: str, main: Callable[[], int] | str) -> int:
    """Run a CLI's ``main`` (or import it first, given as ``"module"``: its ``main``) and
    flush stdout; its exit code, or the one that says how the user stopped it."""
    interrupts: list[int] = []

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupts.append(signum)
        signal.default_int_handler(signum, frame)        # raises KeyboardInterrupt

    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler    # not ignored (nohup, `cmd &`)
    if ours:
        signal.signal(signal.SIGINT, on_interrupt)
    try:
        if isinstance(main, str):
            main = importlib.import_module(main).main
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt:
        return _interrupted(prog)
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        return _reader_gone()
    except BaseException:
        if interrupts:          # a Ctrl-C that code turned into another error: numpy's C module, when
            return _interrupted(prog)     # interrupted while it imports, raises ImportError instead
        raise
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
    return code


def npu() -> int:
    """The ``npu`` console script: :func:`libnpu.tools.cli.main`."""
    return run_main("npu", "libnpu.tools.cli")


def npu_kmd() -> int:
    """The ``npu-kmd`` console script: :func:`kmd_fuse.cli.main`."""
    return run_main("npu-kmd", "kmd_fuse.cli")
