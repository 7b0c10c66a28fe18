"""One device's driver process: powers the chip on, mounts its FUSE filesystem
(node + attribute tree), bind-mounts them (rootless mode: symlinks them) to
<devroot>/npuN and <sysroot>/class/npu/npuN, announces the device (uevent "add", udev rules) and
serves it.

Run by ``npu-kmd start``, forked from its fork server (``python -m kmd_fuse.daemon
--fork-server``, ``kmd_fuse.fork_server``), or by hand as ``python -m kmd_fuse.daemon``;
SIGTERM/SIGINT send "remove", unmount everything and power the chip off. One that comes
while the device is still being brought up (the chip powering on: up to its deadline,
mostly the chip's imports) stops it there: the chip killed and reaped, what was mounted
unmounted, the bus directory and the pid file removed, at once.
"""
from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import sys
from pathlib import Path

import pyfuse3
import trio

from kmd_fuse import fork_server, fusermount, irq, logs, mounts, owner, paths, pidfile
from kmd_fuse.cli import job_timeout_seconds
from kmd_fuse.device import Device
from kmd_fuse.fuse_ops import DeviceFs
from kmd_fuse.handover import HandoverServer, check_socket_path
from kmd_fuse.hw import ChipConfig
from kmd_fuse.limits import Limits
from kmd_fuse.mounts import MountRecord
from kmd_fuse.sysfs import AttributeTree
from kmd_fuse.tasks import BackgroundTasks
from kmd_fuse.uapi.usage_stats import parse_size
from kmd_fuse.udev.presence import Presence
from npu_hw import profiles, regs

log = logging.getLogger("kmd_fuse.daemon")


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE as far as allowed; returns the new soft limit.

    The daemon holds one descriptor per live buffer (its memfd), so this limit,
    less memory.FDS_RESERVED kept for everything else, bounds the buffers a device
    holds across all its contexts.  With CAP_SYS_RESOURCE the hard limit is lifted
    to fs.nr_open (1,048,576); otherwise the hard limit holds (20,000 on these
    machines, where even root lacks CAP_SYS_RESOURCE: 19,488 buffers)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        nr_open = hard
    for limit in dict.fromkeys((max(hard, nr_open), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            return limit
        except (ValueError, OSError):
            continue          # not allowed to lift the hard limit: try the next
    return soft


class StopRequested(Exception):
    """SIGTERM or SIGINT while the daemon brings its device up: it undoes what it made and exits."""


def _raise_stop(signum: int, frame: object) -> None:
    _ignore_stops()
    raise StopRequested(f"signal {signum} before the device was served: stopping")


def _ignore_stops() -> None:
    """The undo of a bring-up runs to its end: a second SIGTERM (``npu-kmd stop`` after the
    start's) must not cut it short. (Only until the process exits: no chip is started after.)"""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)


async def serve(device: Device, presence: Presence, ready_file: Path, handover: HandoverServer,
                stops: list[int]) -> None:
    """Serve until SIGTERM or SIGINT (or at once if one came before: ``stops``)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        if stops:        # between the bring-up and this receiver (main's last handler noted it)
            log.info("signal %d before serving: shutting down", stops[0])
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(device.tasks.run)
            await nursery.start(irq.run, device)
            await nursery.start(handover.run)     # before any request: MEM_MAP names its socket
            nursery.start_soon(pyfuse3.main)
            await nursery.start(presence.run)
            device.reset_hooks.append(presence.after_reset)
            await presence.add()
            ready_file.write_text(f"{os.getpid()}\n")
            log.info("device announced")
            async for signum in signals:
                log.info("signal %d: shutting down", signum)
                break
            with trio.move_on_after(10):
                await presence.remove()
            ready_file.unlink(missing_ok=True)
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmd_fuse.daemon")
    parser.add_argument("--devroot", default=None)
    parser.add_argument("--sysroot", default=None)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--memory", type=parse_size, default=parse_size("1G"))
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--ring-entries", type=int, default=256)
    parser.add_argument("--profile", choices=sorted(profiles.PROFILES), default=profiles.DEFAULT_PROFILE)
    parser.add_argument("--pacing", action="store_true")
    parser.add_argument("--watchdog-ms", type=int, default=regs.DEFAULT_JOB_TIMEOUT_MS)
    parser.add_argument("--max-job-timeout", type=job_timeout_seconds, default=10.0,
                        help="seconds (see npu-kmd start --help)")
    parser.add_argument("--mode", type=lambda s: int(s, 8), default=0o660)
    parser.add_argument("--max-contexts-per-user", type=int, default=Limits.max_contexts_per_user)
    parser.add_argument("--root-contexts", type=int, default=Limits.root_contexts)
    parser.add_argument("--max-memory-per-user", type=parse_size, default=Limits.max_memory_per_user)
    parser.add_argument("--max-buffers-per-user", type=int, default=Limits.max_buffers_per_user)
    parser.add_argument("--max-queues-per-context", type=int, default=Limits.max_queues_per_context)
    parser.add_argument("--max-queues-per-user", type=int, default=Limits.max_queues_per_user)
    parser.add_argument("--fork-server", action="store_true",
                        help="fork the daemons npu-kmd start asks for (kmd_fuse.fork_server)")
    args = parser.parse_args(argv)
    if args.fork_server:
        return fork_server.serve(main)
    root = paths.devroot(args.devroot)
    logs.setup(paths.log_file(root, args.index), os.environ.get("NPU_LOG", "INFO"),
               parse_size(os.environ.get("NPU_LOG_MAX", str(logs.DEFAULT_MAX_BYTES))))
    sys_root = paths.sysroot(root, args.sysroot)
    node = paths.node_path(root, args.index)
    try:
        paths.private_state_dir(root)
        check_socket_path(paths.handover_socket(root, args.index))
        pid_lock = pidfile.acquire(paths.pid_file(root, args.index))
    except OSError as exc:     # StateDirError, ENAMETOOLONG, AlreadyRunning
        log.error("%s", exc)
        return 1
    mountpoint = paths.fuse_dir(root, args.index)
    state = paths.state_dir(root)
    record = MountRecord(paths.mount_record(root, args.index))
    ready_file = paths.ready_file(root, args.index)
    fd_limit = raise_fd_limit()

    device = Device(args.index, paths.bus_dir(root, args.index), args.memory,
                    ChipConfig(cores=args.cores, ring_entries=args.ring_entries, watchdog_ms=args.watchdog_ms,
                               profile=args.profile, pacing=args.pacing,
                               max_job_timeout_ms=round(args.max_job_timeout * 1000)),
                    Limits(max_contexts_per_user=args.max_contexts_per_user, root_contexts=args.root_contexts,
                           max_memory_per_user=args.max_memory_per_user,
                           max_buffers_per_user=args.max_buffers_per_user,
                           max_queues_per_context=args.max_queues_per_context,
                           max_queues_per_user=args.max_queues_per_user),
                    tasks=BackgroundTasks())
    # A stop while the chip powers on (its imports may build the C kernels) or while the
    # device is mounted ends the bring-up where it is, undone below, not at its deadline.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise_stop)
    try:
        device.power_on()
    except (OSError, StopRequested) as exc:     # nothing of the chip stays (its bus, its process)
        _ignore_stops()
        (log.info if isinstance(exc, StopRequested) else log.error)("%s", exc)
        device.power_off()
        paths.pid_file(root, args.index).unlink(missing_ok=True)
        return 0 if isinstance(exc, StopRequested) else 1
    try:
        presence = Presence(root, sys_root, args.index)
        # Rootless: the node and the tree are the user's own (root's uid 0 otherwise), so the
        # kernel's permission checks let the owner apply the rules and write `reset`.
        uid, gid = (os.geteuid(), os.getegid()) if owner.rootless() else (0, 0)
        tree = AttributeTree(device, on_uevent_write=_synthetic_uevent(presence), uid=uid, gid=gid)
        source = paths.mount_source(root, args.index)
        with paths.opened_dir(state) as state_fd:      # checked private by private_state_dir
            os.close(mounts.make_tree_dir(state_fd, mountpoint.name, mountpoint, 0o700))
            options = mount_options(root, args.index)
            record.add(mountpoint, source)
            # rootless: fusermount3 mounts, libfuse serves the descriptor it hands back
            served = f"/dev/fd/{fusermount.mount(mountpoint, options)}" if owner.rootless() else str(mountpoint)
            fs = DeviceFs(device, mode=args.mode, uid=uid, gid=gid, tree=tree)
            pyfuse3.init(fs, served, options)
            mounts.check(state_fd, mountpoint.name, mountpoint, source, record)
            stops: list[int] = []     # from here on a stop is noted, and serve() stops at once
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda signum, frame: stops.append(signum))
    except Exception as exc:
        _ignore_stops()
        record.unmount()
        device.power_off()
        paths.pid_file(root, args.index).unlink(missing_ok=True)
        if isinstance(exc, StopRequested):
            log.info("%s", exc)
            return 0
        if isinstance(exc, (fusermount.FusermountError, mounts.MountError)):
            log.error("%s", exc)      # says what to do; no traceback
            return 1
        raise
    log.info("serving %s, attributes in %s (%d cores, %d MiB, up to %d descriptors)", node,
             paths.device_dir(sys_root, args.index), device.hw.num_cores, args.memory >> 20, fd_limit)
    # the socket admits whom the node admits: its mode, owner and group as they are now
    handover = HandoverServer(paths.handover_socket(root, args.index), device.memory.grants, fs,
                              others_reach="allow_other" in options)
    fs.attribute_hooks.append(handover.follow_node)      # udev's rules chown/chmod the node
    profile_path = os.environ.get("NPU_PROFILE_KMD")   # developer aid: cProfile the daemon's loop
    try:
        if profile_path:
            import cProfile
            cProfile.runctx("trio.run(serve, device, presence, ready_file, handover, stops)", globals(),
                            locals(), f"{profile_path}.{args.index}")
        else:
            trio.run(serve, device, presence, ready_file, handover, stops)
    finally:
        presence.unmount()           # a no-op after a clean remove
        pyfuse3.close(unmount=True)   # rootless: libfuse did not mount it, so it does not unmount it
        try:
            record.unmount()         # what is left of what this daemon mounted, and nothing else
        except mounts.MountError as exc:
            log.error("%s", exc)     # a mount it did not make sits on one of its own: npu-kmd stop retries
        presence.close()
        device.power_off()
        paths.pid_file(root, args.index).unlink(missing_ok=True)
        os.close(pid_lock)
        log.info("stopped %s", node)
    return 0


def mount_options(root: Path, index: int) -> set[str]:
    """The FUSE mount's options. default_permissions (in pyfuse3.default_options) +
    allow_other: the kernel enforces the node's mode/owner/group for every user, as udev's
    rules set them. A normal user gets allow_other only when /etc/fuse.conf has
    user_allow_other; without it only that user reaches the device. The source name
    tells this device's mounts from any other's."""
    options = set(pyfuse3.default_options) | {f"fsname={paths.mount_source(root, index)}", f"subtype=npu{index}"}
    if owner.may_allow_other():
        options.add("allow_other")
    return options


def _synthetic_uevent(presence: Presence):
    """The owner writing an ACTION to the `uevent` attribute re-sends that event (udevadm trigger)."""
    async def write(action: str) -> None:
        presence.emit(action)
        await presence.settle()
    return write


if __name__ == "__main__":
    sys.exit(main())
