"""What ``python -m firmware_sim`` does before its own imports: ask to die with its driver,
and hold its power-on when a test asks for it.

The chip's imports load the C kernels and build them when the cache has none for these
sources (a first start, a rootless user's, or after a change to the C code: tens of
seconds on a loaded host). A driver stopped meanwhile (SIGTERM, SIGKILL) must take its chip
with it, so the request comes first: a chip that asked only once its imports were done
outlived its stopped driver by the whole build.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

__all__ = ["HOLD_POWER_ON_ENV", "die_with_parent", "hold_power_on", "parent_argument"]

PR_SET_PDEATHSIG = 1
# Test-only fault injection, never set in production: "SECONDS" holds every chip's power-on
# that long before its imports (a stand-in for the C kernels' build of a first start),
# "npuN=SECONDS" only the chip whose bus directory is named npuN. Unset: no hold.
HOLD_POWER_ON_ENV = "NPU_TEST_HOLD_POWER_ON"


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL us when our parent exits (PR_SET_PDEATHSIG). With the
    ``parent`` we were forked from: exit now if it already died before we asked."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def parent_argument(argv: list[str]) -> int | None:
    """The value of ``--parent`` in the chip's arguments (read before argparse is imported
    with the rest), None without one."""
    for at, word in enumerate(argv):
        if word == "--parent" and at + 1 < len(argv) and argv[at + 1].isdigit():
            return int(argv[at + 1])
        if word.startswith("--parent=") and word[9:].isdigit():
            return int(word[9:])
    return None


def hold_power_on(argv: list[str]) -> None:
    """Sleep as HOLD_POWER_ON_ENV asks for this chip (its ``--bus`` directory's name)."""
    value = os.environ.get(HOLD_POWER_ON_ENV, "")
    if not value:
        return
    name, _, seconds = value.rpartition("=")
    bus = next((argv[at + 1] for at, word in enumerate(argv[:-1]) if word == "--bus"), "")
    if not name or os.path.basename(bus.rstrip("/")) == name:
        time.sleep(float(seconds))
