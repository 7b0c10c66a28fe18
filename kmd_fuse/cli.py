"""``npu-kmd``: start, stop and inspect the driver daemons (one per device);
``udev-test`` shows what the udev rules do to a device, ``monitor`` prints its uevents;
``cdi`` and ``device-plugin`` hand the devices to containers and Kubernetes (cli_engines)."""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kmd_fuse import cli_engines, paths, pidfile, uapi
from kmd_fuse.cli_errors import (
    OneLineParser,
    count_argument,
    debug_wanted,
    mode_argument,
    run_reporting_errors,
    size_argument,
)
from kmd_fuse.fork_server import ForkedDaemon, ForkServer
from kmd_fuse.limits import Limits
from kmd_fuse.uapi.sysfs_layout import recorded_sysroot
from kmd_fuse.udev import hotplug
from kmd_fuse.udev.rules import UdevRulesError, load_rules
from kmd_fuse.udev.udevadm import print_events
from kmd_fuse.udev.uevent import Uevent, UeventError, UeventLog
from npu_console import run_main
from npu_hw import profiles, regs

START_TIMEOUT_S = 120.0    # per device, from its daemon's spawn until its node answers (> the chip's 60 s power-on)
# Daemons coming up at once: enough to keep the CPUs busy while some wait, few enough that
# none starves (128 spawned at once on 2 CPUs: their chips missed their 20 s power-on).
STARTING_AT_ONCE = max(4, 2 * (os.cpu_count() or 1))
STOP_TIMEOUT_S = 15.0      # a daemon still there this long after SIGTERM is killed


def probe(node: Path, timeout: float = 2.0) -> dict:
    """One raw GET_INFO round trip on the node (what 'the node answers' means)."""
    fd = os.open(node, os.O_RDWR)
    try:
        os.write(fd, uapi.pack_frame(uapi.NPU_CMD_GET_INFO, 1, uapi.new_payload(uapi.NPU_CMD_GET_INFO)))
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            raise TimeoutError(f"{node}: no reply to GET_INFO")
        frame = os.read(fd, uapi.NPU_MAX_FRAME)
    finally:
        os.close(fd)
    hdr = uapi.unpack_header(frame)
    if hdr.result:
        raise OSError(-hdr.result, f"{node}: GET_INFO failed")
    info = uapi.unpack_payload(uapi.NPU_CMD_GET_INFO, frame[uapi.HDR_SIZE:])
    return {"cores": info.num_cores, "memory_total": info.memory_total, "model": uapi.c_string(info.model)}


def _daemon_pid(root: Path, index: int) -> int | None:
    """The pid of the device's daemon if it is alive (it holds its pid file's lock)."""
    return pidfile.running_pid(paths.pid_file(root, index))


def _indices(root: Path) -> list[int]:
    state = paths.check_state_dir(root)
    if state is None:
        return []
    # a device with a pid file (alive or killed) or with mounts still recorded
    return sorted({int(p.stem[3:]) for pattern in ("npu*.pid", "npu*.mounts") for p in state.glob(pattern)
                   if p.stem[3:].isdigit()})


MAX_JOB_TIMEOUT_LIMIT_S = 0xFFFFFFFF / 1000     # SUBMIT's timeout_ms is a u32


def job_timeout_seconds(text: str) -> float:
    """A --max-job-timeout value: seconds, > 0 and representable in SUBMIT's u32 milliseconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.001 <= seconds <= MAX_JOB_TIMEOUT_LIMIT_S:
        raise argparse.ArgumentTypeError(f"{text} s: must be between 0.001 and {MAX_JOB_TIMEOUT_LIMIT_S:.0f}")
    return seconds


def sysroot_of(root: Path, value: str | None = None) -> Path:
    """The sysroot a devroot's daemons serve: argument, else what `start` recorded, else the default."""
    return paths.sysroot(root, value or recorded_sysroot(root))


def start(args) -> int:
    root = paths.devroot(args.devroot)
    sys_root = paths.sysroot(root, args.sysroot)
    try:
        # every directory the daemons create or mount on, checked (no link followed, none
        # another user may change) before any is used: a clear refusal, not a daemon's log
        devroot_fd = paths.open_devroot(root, create=True)
    except paths.UnsafePathError as exc:
        print(f"npu-kmd start: {exc}", file=sys.stderr)
        return 1
    lock_fd = -1
    try:
        lock_fd = _wait_for_other_starts(devroot_fd, root)
        try:
            paths.private_state_dir(root, note=lambda text: print(f"npu-kmd start: {text}", file=sys.stderr))
            os.close(paths.open_dir(Path(paths.class_dir(sys_root)), 0o755, hint="give another --sysroot"))
        except paths.UnsafePathError as exc:
            print(f"npu-kmd start: {exc}", file=sys.stderr)
            return 1
        paths.record_in_devroot(root, paths.SYSROOT_MARKER, f"{sys_root}\n")   # where tools (npu smi) find the tree
        return _start_locked(args, root, sys_root)
    finally:
        if lock_fd >= 0:
            _release_start_lock(devroot_fd, lock_fd)     # lets the next start of this devroot go
        os.close(devroot_fd)


#: The file a running `npu-kmd start` holds an flock on, in the devroot: made by the driver's
#: user with mode 0600, so no other user can open it and hold the lock (an flock on the
#: devroot itself could be taken by anyone who can read it: /dev, every user), and removed by
#: the start that holds it as it ends (the devroot is left as it was).
START_LOCK = ".npu-start.lock"


def _wait_for_other_starts(devroot_fd: int, root: Path) -> int:
    """One start of a devroot at a time: an exclusive flock on the devroot's START_LOCK,
    held until this start ends (the descriptor returned; ``_release_start_lock``). Two at
    once each spawned npu0's daemon, and the one whose daemon lost the pid file stopped the
    other's in its undo: nothing was served. The holder removes the file before it lets go,
    so a waiter that then gets the lock checks it still holds the file the name leads to,
    and opens it again if not."""
    told = False
    while True:
        lock_fd = os.open(START_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=devroot_fd)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not told:
                    print(f"npu-kmd start: waiting for another start of {root} to end", file=sys.stderr, flush=True)
                    told = True
                fcntl.flock(lock_fd, fcntl.LOCK_EX)      # Ctrl-C ends the wait (KeyboardInterrupt)
            held = os.fstat(lock_fd)
            try:
                named = os.stat(START_LOCK, dir_fd=devroot_fd, follow_symlinks=False)
            except FileNotFoundError:
                named = None
        except BaseException:
            os.close(lock_fd)
            raise
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            return lock_fd
        os.close(lock_fd)          # its holder removed it as it ended: the lock is the next file's


def _release_start_lock(devroot_fd: int, lock_fd: int) -> None:
    """Remove START_LOCK (while holding it: a waiter then opens a new one) and let it go."""
    try:
        os.unlink(START_LOCK, dir_fd=devroot_fd)
    except FileNotFoundError:
        pass
    os.close(lock_fd)


def _start_locked(args, root: Path, sys_root: Path) -> int:
    started: list[tuple[int, Path, ForkedDaemon]] = []
    servers: list[ForkServer] = []        # the daemons' fork server, started with the first one
    # SIGTERM ends a start as Ctrl-C does: the daemons it spawned (in sessions of their own,
    # which no signal to this one reaches) are stopped, not left running half set up. That
    # holds until the start has ended, its fork server too: one that says "interrupted"
    # (exit 130) has left nothing running (a SIGTERM while the server exited left all up).
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = _start_devices(args, root, sys_root, started, servers)
        if code:
            _undo_start(root, sys_root, started, remove_state=False)     # the logs stay, for the reason
        with _interrupts_deferred():         # a stop meanwhile undoes the start all the same (below)
            _close_servers(servers)
        signal.signal(signal.SIGTERM, before)    # done: a SIGTERM now ends this process, not the devices
    except KeyboardInterrupt:
        with _interrupts_deferred():         # a second Ctrl-C does not cut the clean-up short
            _undo_start(root, sys_root, started, remove_state=True)
            _close_servers(servers)
        raise
    except BaseException:
        with _interrupts_deferred():
            _close_servers(servers)
        raise
    return code


def _close_servers(servers: list[ForkServer]) -> None:
    for server in servers:
        server.close()


def _start_devices(args, root: Path, sys_root: Path, started: list[tuple[int, Path, ForkedDaemon]],
                   servers: list[ForkServer]) -> int:
    """Start a daemon per device not yet served (each one recorded in ``started`` as soon as
    it exists), at most STARTING_AT_ONCE coming up at a time, each given START_TIMEOUT_S
    from its spawn, and wait until every node answers; the exit code."""
    wanted = []
    for index in range(args.devices):
        node = paths.node_path(root, index)
        pid = _daemon_pid(root, index)
        if pid and hotplug.attached(root, sys_root, index, node):
            print(f"{node}: already served")
            continue
        if pid:
            print(f"{node}: daemon {pid} runs but the node is not mounted: `npu-kmd stop` first", file=sys.stderr)
            return 1
        try:
            hotplug.unmount_all(root, sys_root, index)    # stale mounts of a dead daemon (what it recorded)
        except hotplug.MountError as exc:
            print(f"npu-kmd start: {exc.strerror}", file=sys.stderr)
            return 1
        taken = hotplug.foreign_mount(root, sys_root, index)
        if taken is not None:
            print(f"{node}: {taken}: give this devroot its own --sysroot (or unmount it)", file=sys.stderr)
            return 1
        wanted.append(index)
    coming: dict[int, float] = {}         # index in ``started`` -> its deadline
    while wanted or coming:
        while wanted and len(coming) < STARTING_AT_ONCE:
            if not servers:
                with _interrupts_deferred():      # never a server running that `servers` does not hold
                    servers.append(ForkServer(root, sys_root))
            _spawn_daemon(args, servers[0], root, sys_root, wanted.pop(0), started)
            coming[len(started) - 1] = time.monotonic() + START_TIMEOUT_S
        for at, deadline in list(coming.items()):
            index, node, proc = started[at]
            if proc.poll() is not None:
                print(f"{node}: daemon exited with status {proc.returncode}; log "
                      f"{paths.log_file(root, index)}:", file=sys.stderr)
                try:
                    print(paths.log_file(root, index).read_text()[-3000:], file=sys.stderr)
                except OSError as exc:      # `npu-kmd stop` meanwhile removed the state, logs too
                    print(f"  ({exc.strerror})", file=sys.stderr)
                return 1
            info = None
            if paths.ready_file(root, index).exists():
                try:
                    info = probe(node)
                except OSError:
                    pass
            if info is not None:
                del coming[at]
                print(f"{node}: up (pid {proc.pid}, {info['cores']} cores, {info['memory_total'] >> 20} MiB, "
                      f"profile {args.profile}{', paced' if args.pacing else ''})", flush=True)
            elif time.monotonic() > deadline:
                print(f"{node}: did not answer within {START_TIMEOUT_S:.0f} s", file=sys.stderr)
                return 1
        if coming:
            time.sleep(0.05)
    return 0


def _spawn_daemon(args, server: ForkServer, root: Path, sys_root: Path, index: int,
                  started: list[tuple[int, Path, ForkedDaemon]]) -> None:
    """Fork device ``index``'s daemon (``kmd_fuse.fork_server``), recorded in ``started``."""
    node = paths.node_path(root, index)
    paths.ready_file(root, index).unlink(missing_ok=True)
    argv = ["--devroot", str(root), "--sysroot", str(sys_root),
           "--index", str(index), "--memory", str(args.memory), "--cores", str(args.cores),
           "--watchdog-ms", str(args.watchdog_ms), "--max-job-timeout", str(args.max_job_timeout),
           "--mode", args.mode, "--profile", args.profile, *(["--pacing"] if args.pacing else []),
           "--max-contexts-per-user", str(args.max_contexts_per_user), "--root-contexts", str(args.root_contexts),
           "--max-memory-per-user", str(args.max_memory_per_user),
           "--max-buffers-per-user", str(args.max_buffers_per_user),
           "--max-queues-per-context", str(args.max_queues_per_context),
           "--max-queues-per-user", str(args.max_queues_per_user)]
    with _interrupts_deferred():          # never a daemon running that `started` does not hold
        started.append((index, node, server.fork(argv, paths.log_file(root, index))))


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C (or a SIGTERM that ``start`` turned into one) inside the block raises
    KeyboardInterrupt only at its end.  (A Python-level handler, not a blocked signal: a
    daemon spawned meanwhile gets the default action.)"""
    caught: list[int] = []
    interrupting = [signum for signum in (signal.SIGINT, signal.SIGTERM)
                    if signal.getsignal(signum) is signal.default_int_handler or signum == signal.SIGINT]
    previous = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in interrupting}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        raise KeyboardInterrupt


def _undo_start(root: Path, sys_root: Path, started: list[tuple[int, Path, ForkedDaemon]], *,
                remove_state: bool) -> None:
    """Stop the daemons this ``start`` spawned and undo what they set up (an interrupted or
    failed start leaves nothing running, nothing mounted); with ``remove_state``, the
    devroot's state too once no other daemon serves it."""
    for _, _, proc in started:          # all at once, then each waited for
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for _, _, proc in started:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # A daemon killed before its clean-up leaves its bus (the chip's memories, its
    # self-test's files): its chip died with it (PR_SET_PDEATHSIG, SIGKILL at its exit).
    # A device another daemon serves now (not one of ours: they are all gone) stays as it is.
    ours = [index for index, _, _ in started if _daemon_pid(root, index) is None]
    _stop_devices(root, sys_root, ours)
    for index in ours:
        shutil.rmtree(paths.bus_dir(root, index), ignore_errors=True)
    if remove_state and not any(_daemon_pid(root, index) for index in _indices(root)):
        _remove_state(root)


def _announce_removal(root: Path, sys_root: Path, index: int) -> None:
    """A daemon died without saying goodbye: send its "remove" and undo its udev links."""
    try:
        with UeventLog(paths.state_dir(root)) as events:
            event = events.emit(**hotplug.device_event("remove", index, {"REASON": "driver-died"}))
        hotplug.apply_rules(load_rules(), event, root, sys_root)
    except (UdevRulesError, UeventError, OSError) as exc:
        print(f"npu{index}: could not announce the removal: {exc}", file=sys.stderr)


def stop(args) -> int:
    root = paths.devroot(args.devroot)
    sys_root = sysroot_of(root, args.sysroot)
    try:
        indices = _indices(root)
    except paths.StateDirError as exc:
        print(f"npu-kmd stop: {exc}", file=sys.stderr)
        return 1
    status = 0
    mounts_left = False
    with _interrupts_deferred():       # a Ctrl-C ends it once the devices are stopped (exit 130)
        for index, (killed, left) in zip(indices, _stop_devices(root, sys_root, indices)):
            status |= killed | left
            mounts_left |= bool(left)
            print(f"{paths.node_path(root, index)}: stopped")
        if not mounts_left:            # else the state (and its mount record) stays for the next stop
            _remove_state(root)
    return status


def _stop_devices(root: Path, sys_root: Path, indices: list[int]) -> list[tuple[int, int]]:
    """Stop the daemons of ``indices`` together (SIGTERM to all, then SIGKILL to those still
    there after STOP_TIMEOUT_S) and undo what each left (``_clean_up_device``); per device
    (1 if it had to be killed, 1 if a mount could not be undone)."""
    pids = {index: _daemon_pid(root, index) for index in indices}
    for pid in pids.values():
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(pid and _daemon_pid(root, index) for index, pid in pids.items()) and time.monotonic() < deadline:
        time.sleep(0.05)
    results = []
    for index, pid in pids.items():
        killed = 0
        if pid and _daemon_pid(root, index) == pid:
            print(f"{paths.node_path(root, index)}: daemon {pid} ignored SIGTERM; killing it", file=sys.stderr)
            os.kill(pid, signal.SIGKILL)
            killed = 1
        results.append((killed, _clean_up_device(root, sys_root, index)))
    return results


def _clean_up_device(root: Path, sys_root: Path, index: int) -> int:
    """Undo what device ``index``'s daemon (stopped) left: mounts, the node's placeholder,
    its attribute directory, pid and ready files; 1 if a mount could not be undone (it
    says why)."""
    node = paths.node_path(root, index)
    mounts_left = 0
    try:
        hotplug.unmount_all(root, sys_root, index)
    except hotplug.MountError as exc:
        print(f"npu-kmd stop: {exc.strerror}", file=sys.stderr)
        mounts_left = 1
    hotplug.remove_node_placeholder(node)
    if paths.ready_file(root, index).exists():
        _announce_removal(root, sys_root, index)
    try:
        paths.device_dir(sys_root, index).rmdir()
    except OSError:
        pass
    paths.pid_file(root, index).unlink(missing_ok=True)
    paths.ready_file(root, index).unlink(missing_ok=True)
    return mounts_left


def _remove_state(root: Path) -> None:
    """Remove the devroot's state directory and its records (every device is stopped)."""
    state = paths.check_state_dir(root)
    if state is not None:
        # rmtree never follows a symlink (it unlinks the link); the directory itself was
        # checked to be ours and private, so nobody else put anything in it.
        for leftover in state.iterdir():
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        state.rmdir()
    for marker in (paths.SYSROOT_MARKER, paths.STATE_MARKER):
        paths.remove_from_devroot(root, marker)


def status(args) -> int:
    root = paths.devroot(args.devroot)
    try:
        indices = _indices(root)
    except paths.StateDirError as exc:
        print(f"npu-kmd status: {exc}", file=sys.stderr)
        return 1
    if not indices:
        print(f"no devices served under {root}")
        return 3
    code = 0
    for index in indices:
        node = paths.node_path(root, index)
        pid = _daemon_pid(root, index)
        if pid is None:          # its state says started, but no daemon holds the pid file: it died
            code = 3
        sys_root = sysroot_of(root, args.sysroot)
        mounted = hotplug.attached(root, sys_root, index, node)
        line = f"{node}: pid {pid or '-, driver not running'}, {'mounted' if mounted else 'not mounted'}"
        tree = paths.device_dir(sys_root, index)
        line += f", attributes {tree}" if hotplug.attached(root, sys_root, index, tree) else ", no attributes"
        if pid and mounted:
            try:
                info = probe(node)
                line += f", {info['model']}, {info['cores']} cores, {info['memory_total'] >> 20} MiB"
            except OSError as exc:
                line += f", not answering ({exc})"
        print(line)
    if code:
        print(f"the driver is not running; `npu-kmd stop --devroot {root}` cleans up after it, "
              f"`npu-kmd start --devroot {root}` starts it")
    return code


def udev_test(args) -> int:
    """Print what the rules do to a device's uevent, like `udevadm test` (changes nothing)."""
    root = paths.devroot(args.devroot)
    sys_root = sysroot_of(root, args.sysroot)
    extra = {"RESET_COUNT": args.reset_count} if args.reset_count is not None else {}
    event = Uevent(**hotplug.device_event(args.action, args.index, {k: str(v) for k, v in extra.items()}))
    try:
        rules = load_rules(*args.rules)
        sys.stdout.write(rules.explain(event, devroot=str(root), sysroot=str(sys_root)))
    except UdevRulesError as exc:
        print(f"npu-kmd udev-test: {exc}", file=sys.stderr)
        return 1
    return 0


def monitor(args) -> int:
    """Print the devroot's uevents as they happen, like `udevadm monitor --kernel --property`."""
    root = paths.devroot(args.devroot)
    try:
        return print_events(paths.state_dir(root), count=args.count, from_start=args.all,
                            subsystem=paths.SUBSYSTEM, timeout=args.timeout)
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    debug, argv = debug_wanted(argv)
    parser = OneLineParser(prog="npu-kmd", description="The emulated NPU's kernel-mode driver")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or NPU_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "stop", "status", "udev-test", "monitor"):
        p = sub.add_parser(name)
        p.add_argument("--devroot", default=None, help="directory of the nodes (default $NPU_DEVROOT or /dev)")
        if name != "monitor":
            p.add_argument("--sysroot", default=None,
                           help="root of the attribute tree (default $NPU_SYSROOT, else <devroot>/../sys, "
                                "or /run/npu-emu/sys for /dev)")
        if name == "udev-test":
            p.add_argument("-i", "--index", type=int, default=0, help="device number (default 0)")
            p.add_argument("--action", choices=("add", "change", "remove"), default="add")
            p.add_argument("--reset-count", type=int, help="RESET_COUNT of a 'change' event")
            p.add_argument("--rules", action="append", default=[], help="rules file or directory (repeatable; "
                                                                         "default udev/70-npu.rules)")
        if name == "monitor":
            p.add_argument("--all", action="store_true", help="print the events logged so far too")
            p.add_argument("--timeout", type=float, help="stop after this many seconds without an event")
            p.add_argument("-n", "--count", type=int, help="stop after this many events")
        if name == "start":
            p.add_argument("--devices", type=count_argument, default=1)
            p.add_argument("--memory", type=size_argument, default="1G", help="device memory, e.g. 512M, 2G")
            p.add_argument("--cores", type=count_argument, default=2)
            p.add_argument("--profile", choices=sorted(profiles.PROFILES), default=profiles.DEFAULT_PROFILE,
                           help="hardware profile: the timing model's clock, MACs/cycle, memory bandwidth and "
                                "SRAM (" + "; ".join(f"{prof.name}: {prof.description}"
                                                     for prof in profiles.PROFILES.values()) + "; default %(default)s)")
            p.add_argument("--pacing", action="store_true",
                           help="a job completes no earlier than its modeled device time, so applications see "
                                "the modeled chip's latency rather than the emulator's")
            p.add_argument("--watchdog-ms", type=int, default=regs.DEFAULT_JOB_TIMEOUT_MS,
                           help="timeout of a job whose SUBMIT gives none, in ms of the chip's time: the CPU "
                                "time its core gets, not the host's wall time (default %(default)s)")
            p.add_argument("--max-job-timeout", type=job_timeout_seconds, default=10.0, metavar="SECONDS",
                           help="longest a job may hold a core, in seconds of the chip's time (its core's CPU "
                                "time; default 10): a SUBMIT timeout above it, or the default, is clamped to it "
                                "(not refused); the chip's watchdog then fails the job with ETIMEDOUT and restarts "
                                "the core, like drm_sched's timeout (a core that gets no CPU: at 10 times the "
                                "timeout of wall time)")
            p.add_argument("--mode", type=mode_argument, default="0660",
                           help="node mode (octal) before udev rules apply")
            p.add_argument("--max-contexts-per-user", type=int, default=Limits.max_contexts_per_user,
                           help="contexts (open files) one non-root user may hold (EMFILE beyond; default "
                                "%(default)s)")
            p.add_argument("--root-contexts", type=int, default=Limits.root_contexts,
                           help="contexts kept free for root whatever other users hold (default %(default)s)")
            p.add_argument("--max-memory-per-user", type=size_argument, default="0",
                           help="device memory one non-root user may hold, e.g. 256M (EDQUOT beyond; "
                                "default 0: the whole device)")
            p.add_argument("--max-buffers-per-user", type=int, default=Limits.max_buffers_per_user,
                           help="buffers one non-root user may hold (EDQUOT beyond; default %(default)s)")
            p.add_argument("--max-queues-per-context", type=int, default=Limits.max_queues_per_context,
                           help="user-mode submission queues one context may create (EMFILE beyond; 0: none; "
                                "default %(default)s)")
            p.add_argument("--max-queues-per-user", type=int, default=Limits.max_queues_per_user,
                           help="user queues one non-root user may hold (EMFILE beyond; default %(default)s)")
    engines = cli_engines.add_parsers(sub)
    args = parser.parse_args(argv)
    return run_reporting_errors(args.command, {"start": start, "stop": stop, "status": status,
                                               "udev-test": udev_test, "monitor": monitor, **engines}[args.command],
                                args, debug)


if __name__ == "__main__":
    sys.exit(run_main("npu-kmd", main))
