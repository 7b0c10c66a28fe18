"""``npu doctor``: is everything the stack needs in place for this user?

One :class:`Check` per prerequisite, in the order a user meets them: FUSE, the driver's
state directories, the chip's compiled C kernels, then each device (node, GET_INFO, its
attribute tree).  A failed check carries the fix.  The driver's and the chip's own rules
are asked through their command lines (``npu-kmd status``, ``python -m
firmware_sim.kernels.native``): the tools may not import them, and their answer is the one
that counts.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kmd_fuse.uapi.sysfs_layout import class_dir, default_sysroot, recorded_sysroot
from libnpu.portability import Session

from .errors import device_hint, start_command
from .npu_sysfs import SysfsError, read_device

__all__ = ["Check", "check_fuse", "check_fuse_conf", "check_kernels", "check_state", "device_checks", "doctor"]

SUBPROCESS_TIMEOUT_S = 300.0     # a first build of the C kernels takes a while on a busy machine


@dataclass(frozen=True)
class Check:
    """One prerequisite: passed or not (``info`` lines never fail), what was found, the fix."""
    name: str
    ok: bool
    detail: str
    fix: str = ""
    info: bool = False

    def line(self) -> str:
        status = "info" if self.info else "ok" if self.ok else "FAIL"
        text = f"{status:4}  {self.name}: {self.detail}"
        return f"{text}; fix: {self.fix}" if not self.ok and self.fix else text


def check_fuse(euid: int | None = None, fusermount: str | None = None, dev_fuse: str = "/dev/fuse") -> Check:
    """FUSE usable by this user: /dev/fuse read-write for root; for anyone else fusermount3
    on PATH and setuid root too (it does the mounting for them)."""
    euid = os.geteuid() if euid is None else euid
    if not os.path.exists(dev_fuse):
        return Check("fuse", False, f"{dev_fuse} does not exist",
                     "load the fuse module (modprobe fuse), or in a container pass --device /dev/fuse")
    if not os.access(dev_fuse, os.R_OK | os.W_OK):
        return Check("fuse", False, f"{dev_fuse} is not readable and writable by uid {euid}",
                     f"chmod 0666 {dev_fuse} (its usual mode), as root")
    if euid == 0:
        return Check("fuse", True, f"{dev_fuse} is read-write (root mounts directly)")
    fusermount = fusermount or shutil.which("fusermount3")
    if fusermount is None:
        return Check("fuse", False, "fusermount3 is not on PATH (a normal user mounts through it)",
                     "install the fuse3 package (apt-get install fuse3)")
    st = os.stat(fusermount)
    if not (st.st_mode & stat.S_ISUID and st.st_uid == 0):
        return Check("fuse", False, f"{fusermount} is not setuid root (mode {stat.S_IMODE(st.st_mode):o})",
                     f"chown root {fusermount} && chmod u+s {fusermount}, as root")
    return Check("fuse", True, f"{fusermount} is setuid root and {dev_fuse} is read-write")


def check_fuse_conf(path: str = "/etc/fuse.conf") -> Check:
    """Whether user_allow_other is on: informational (a normal user's nodes are then
    reachable by other users too; without it they are the owner's only)."""
    try:
        with open(path, encoding="utf-8") as f:
            on = any(line.split("#")[0].strip() == "user_allow_other" for line in f)
    except OSError:
        on = False
    what = "on: a normal user's devices can be opened by others" if on else \
        "off: a normal user's devices are theirs only (root's are shared as usual)"
    return Check("fuse.conf", True, f"user_allow_other {what}", info=True)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str] | str:
    """The finished command, or why it could not run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def check_state(devroot: Path) -> Check:
    """The driver's state directories for ``devroot`` are the user's own and private (the
    driver's own check, through ``npu-kmd status``)."""
    done = _run([sys.executable, "-m", "kmd_fuse.cli", "status", "--devroot", str(devroot)])
    if isinstance(done, str):
        return Check("state", False, f"npu-kmd status did not run: {done}", "reinstall the package (pip install -e .)")
    if done.returncode == 3:
        return Check("state", True, f"no driver state for {devroot} yet (npu-kmd start creates it)")
    if done.returncode == 0:
        return Check("state", True, f"the driver's state directory for {devroot} is private to uid {os.geteuid()}")
    message = _last_line(done.stderr or done.stdout)
    if os.geteuid() != 0 and "belongs to uid 0" in message:     # root serves this devroot: not ours to fix
        return Check("state", True, f"root serves {devroot} (npu-kmd start/stop on it need root); a device of "
                                    "your own: npu-kmd start --devroot <a directory of yours>", info=True)
    return Check("state", False, message, f"follow the message, then: {start_command(devroot)}")


def check_kernels() -> Check:
    """The chip's compiled C kernels: built (or buildable now) in the kernel cache."""
    if os.environ.get("NPU_NATIVE_KERNELS", "1") == "0":
        return Check("c-kernels", True, "turned off by NPU_NATIVE_KERNELS=0 (the chip uses numpy: slower)",
                     info=True)
    done = _run([sys.executable, "-m", "firmware_sim.kernels.native"])
    if isinstance(done, str):
        return Check("c-kernels", False, f"the build did not run: {done}", "reinstall the package (pip install -e .)")
    if done.returncode == 0:
        lines = done.stdout.strip().splitlines() or [""]
        if "NPU_NATIVE_DNNL=0" in lines[-1]:
            return Check("c-kernels", True, f"built: {lines[0]}; {lines[-1]}", info=True)
        if "missing" in lines[-1]:
            return Check("c-kernels", False, f"built: {lines[0]}, but {lines[-1]}",
                         "apt-get install libdnnl-dev (scripts/bootstrap does), then run npu doctor again")
        return Check("c-kernels", True, f"built: {lines[0]}; {lines[-1]}")
    return Check("c-kernels", False, _last_line(done.stderr),
                 "install a C compiler (apt-get install gcc) and check $NPU_CACHE_DIR is writable; "
                 "without them the chip falls back to numpy")


def _nodes(devroot: Path) -> list[Path]:
    return sorted((p for p in devroot.glob("npu[0-9]*") if p.name[3:].isdigit()), key=lambda p: int(p.name[3:]))


def device_checks(devroot: Path) -> Iterator[Check]:
    """Each device under ``devroot``: its node answers GET_INFO and its attribute tree reads."""
    nodes = _nodes(devroot) if devroot.is_dir() else []
    if not nodes:
        where = f"{devroot} does not exist" if not devroot.is_dir() else f"no device node under {devroot}"
        yield Check("device", False, where, start_command(devroot))
        return
    sysroot = recorded_sysroot(os.path.realpath(devroot)) or default_sysroot(devroot)
    with Session(devroot) as session:
        for node in nodes:
            name = node.name
            try:
                facts = session.open_node(int(name[3:])).info()
            except OSError as exc:
                yield Check(name, False, device_hint(exc, devroot) or f"{node}: {exc}",
                            f"npu-kmd stop --devroot {devroot} && {start_command(devroot)}")
                continue
            yield Check(name, True, f"{node} answers: {facts['model']}, {facts['num_cores']} cores, "
                                    f"{facts['memory_total'] >> 20} MiB")
            try:
                state = read_device(sysroot, name, str(devroot))
            except SysfsError as exc:
                yield Check(f"{name} attributes", False, f"{exc} (under {class_dir(sysroot)})",
                            f"npu-kmd stop --devroot {devroot} && {start_command(devroot)}")
                continue
            yield Check(f"{name} attributes", True, f"{os.path.join(class_dir(sysroot), name)} "
                                                    f"({len(state.attrs)} attributes)")


def doctor(devroot: Path) -> list[Check]:
    """Every check, in order (the device checks last: they need the rest)."""
    return [check_fuse(), check_fuse_conf(), check_state(devroot), check_kernels(), *device_checks(devroot)]
