"""How ``npu-kmd`` reports what goes wrong: one line naming the problem and the next step.

Usage errors are one line (exit 2); an exception a command raises becomes one line
(exit 1), with the traceback only under ``--debug`` or ``NPU_DEBUG=1``.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Callable

from kmd_fuse.uapi.usage_stats import parse_size
from npu_console import stdout_reader_gone

__all__ = ["OneLineParser", "count_argument", "debug_wanted", "mode_argument", "run_reporting_errors",
           "size_argument"]


def size_argument(text: str) -> str:
    """A size option (512M, 2G, 1048576): checked here, passed on to the daemon as written."""
    try:
        parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G or a number of bytes)") from None
    return text


def mode_argument(text: str) -> str:
    """A node mode in octal (0660): checked here, passed on to the daemon as written."""
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"not a file mode: {text!r} (octal, e.g. 0660)")
    return text


def count_argument(text: str) -> int:
    """A count that must be at least 1 (--devices, --cores)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a count >= 1: {text!r}")
    return value


def debug_wanted(argv: list[str] | None) -> tuple[bool, list[str]]:
    """Whether ``--debug`` (anywhere in ``argv``) or NPU_DEBUG=1 asks for tracebacks, and
    ``argv`` without it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    rest = [a for a in argv if a != "--debug"]
    return len(rest) != len(argv) or os.environ.get("NPU_DEBUG", "") not in ("", "0"), rest


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the problem and where the help is)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _next_step(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return "this needs root, or a --devroot of your own; `npu doctor` checks what is missing"
    if isinstance(exc, OSError) and exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return "--devroot and --sysroot name directories"
    return "`npu doctor` checks the prerequisites; --debug shows the traceback"


def run_reporting_errors(command: str, handler: Callable[[argparse.Namespace], int],
                         args: argparse.Namespace, debug: bool) -> int:
    """Run one ``npu-kmd`` command: its exit code, or 1 with one line on stderr if it raises.
    KeyboardInterrupt, and BrokenPipeError once stdout's reader is gone, go through to the
    caller: the ``npu-kmd`` script (:mod:`npu_console`) turns them into exit 130 and 141."""
    try:
        return handler(args)
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
            raise                        # `npu-kmd status | head`: npu_console ends the process quietly
        if debug:
            traceback.print_exc()
        text = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            text = f"{exc.filename}: {' '.join(exc.strerror.split())}"     # not "[Errno N] ...: 'path'"
        print(f"npu-kmd {command}: error: {text} ({_next_step(exc)})", file=sys.stderr)
        return 1
