"""A device's sysfs-like attribute tree, served by its daemon's FUSE filesystem.

    dev model abi_version cores clock_mhz memory_total_bytes memory_used_bytes
    busy_time_us jobs_completed jobs_failed reset_count
    profile macs_per_cycle dma_bytes_per_cycle sram_bytes
    pacing uuid                                              read-only, one value a line
    uevent                                                   MAJOR/MINOR/DEVNAME; the owner (kmd_fuse.owner) may write
                                                             an ACTION to synthesize an event
    reset                                                    write-only, the owner only: "1" resets
    trace                                                    the device's trace as JSON lines (kmd_fuse.profiling);
                                                             the owner writes 1 to start it afresh, 0 to stop it
    clients/<client_id>                                      DRM usage stats of an open context

Every value is rendered when a read starts at offset 0 (as sysfs does), from the very
counters GET_INFO and GET_STATS report: the tree calls `Device.fill_info`/`fill_stats`
itself. Files are opened with direct_io, so `cat` always sees fresh values.
"""
from __future__ import annotations

import errno
import itertools
import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pyfuse3

from kmd_fuse import info as info_facts
from kmd_fuse import owner, paths, profiling, recovery, uapi
from kmd_fuse.context import Context
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from kmd_fuse.uapi import usage_stats

DRIVER_NAME = "npu_emu"
DIR_INODE = pyfuse3.ROOT_INODE + 2        # the device directory (ROOT + 1 is the node)
CLIENTS_INODE = DIR_INODE + 1
ATTR_INODE_BASE = 16
CLIENT_INODE_BASE = 1 << 32               # + context id; ids are never reused, nor are inodes
FH_BASE = 1 << 48                         # file handles of the tree, above any context id
ATTR_TIMEOUT_S = 1.0                      # attributes of the fixed files; values are never cached

UeventWriter = Callable[[str], Awaitable[None]]


class _NoContext:
    """fill_info wants the caller's context; the tree reports context 0."""

    context_id = 0


@dataclass
class _Handle:
    inode: int
    text: bytes | None = None
    uid: int = 0


def client_id(name: bytes) -> int | None:
    """The context id a clients/ entry name stands for: canonical decimal (no sign, no
    leading zero) and small enough that its inode stays below the tree's file handles
    (names are user input: `stat clients/18446744069414584320` must be a plain ENOENT)."""
    if not name.isdigit() or len(name) > 15 or (name.startswith(b"0") and name != b"0"):
        return None
    value = int(name)
    return value if CLIENT_INODE_BASE + value < FH_BASE else None


class AttributeTree:
    """The files of <sysroot>/class/npu/npuN (see the module doc)."""

    READ_ONLY = ("dev", "model", "abi_version", "cores", "clock_mhz", "memory_total_bytes",
                 "memory_used_bytes", "busy_time_us", "jobs_completed", "jobs_failed", "reset_count",
                 "profile", "macs_per_cycle", "dma_bytes_per_cycle", "sram_bytes", "pacing", "uuid")
    PARAM_ATTRS = {"macs_per_cycle": "MACS_PER_CYCLE", "dma_bytes_per_cycle": "DMA_BYTES_PER_CYCLE",
                   "sram_bytes": "SRAM_BYTES", "pacing": "PACING"}   # GET_PARAM's values, as they are

    def __init__(self, device: Device, on_uevent_write: UeventWriter | None = None, uid: int = 0, gid: int = 0):
        self.device = device
        self.uid, self.gid = uid, gid     # the attributes' owner: root, or a rootless driver's user
        self.on_uevent_write = on_uevent_write
        self.ctime_ns = time.time_ns()
        names = (*self.READ_ONLY, "uevent", "reset", "trace")
        self.inodes = {name.encode(): ATTR_INODE_BASE + i for i, name in enumerate(names)}
        self.names = {ino: name.decode() for name, ino in self.inodes.items()}
        self.handles: dict[int, _Handle] = {}
        self._fhs = itertools.count(FH_BASE)

    # ---- rendering ----
    def _info(self):
        info = uapi.new_payload(uapi.NPU_CMD_GET_INFO)
        info_facts.fill_info(self.device, _NoContext, info)
        return info

    def render_attr(self, name: str) -> str:
        """One attribute's text, from the counters GET_INFO reports."""
        index = self.device.index
        if name == "dev":
            return f"{paths.NPU_MAJOR}:{index}\n"
        if name == "uevent":
            return f"MAJOR={paths.NPU_MAJOR}\nMINOR={index}\nDEVNAME=npu{index}\n"
        if name == "trace":
            return self.device.trace.render()
        if name in self.PARAM_ATTRS:
            return f"{info_facts.PARAMS[self.PARAM_ATTRS[name]](self.device, _NoContext)}\n"
        if name == "profile":
            profile = self.device.hw.profile
            return f"{profile.name if profile else 'unknown'}\n"
        if name == "uuid":
            return f"{info_facts.device_uuid(self.device)}\n"
        info = self._info()
        values = {
            "model": uapi.c_string(info.model),
            "abi_version": uapi.abi_string(info.abi_version),
            "cores": info.num_cores,
            "clock_mhz": info.clock_mhz,
            "memory_total_bytes": info.memory_total,
            "memory_used_bytes": info.memory_used,
            "busy_time_us": info.busy_time_ns // 1000,
            "jobs_completed": info.jobs_completed,
            "jobs_failed": info.jobs_failed,
            "reset_count": info.reset_count,
        }
        return f"{values[name]}\n"

    def client_stats(self, ctx: Context) -> usage_stats.ClientStats:
        """A context's usage stats, from the counters GET_STATS reports."""
        st = uapi.new_payload(uapi.NPU_CMD_GET_STATS)
        info_facts.fill_stats(self.device, ctx, st)
        return usage_stats.ClientStats(
            driver=DRIVER_NAME, client_id=ctx.context_id, pid=ctx.pid, comm=ctx.comm,
            pdev=f"platform:npu-emu.{self.device.index}",
            engines={"npu": st.busy_time_ns}, engine_capacity={"npu": self.device.hw.num_cores},
            memory={"device": {"total": st.memory_allocated, "resident": st.memory_allocated}},
            extra={f"{DRIVER_NAME}-buffers": str(st.buffers),
                   f"{DRIVER_NAME}-memory-peak": str(st.memory_peak),
                   f"{DRIVER_NAME}-jobs-submitted": str(st.jobs_submitted),
                   f"{DRIVER_NAME}-jobs-completed": str(st.jobs_completed),
                   f"{DRIVER_NAME}-jobs-failed": str(st.jobs_failed)})

    def _render(self, inode: int) -> bytes:
        if inode >= CLIENT_INODE_BASE:
            ctx = self.device.contexts.get(inode - CLIENT_INODE_BASE)
            if ctx is None:
                return b""   # closed while open: reads see an empty file, like a removed sysfs attr
            return usage_stats.render(self.client_stats(ctx)).encode()
        if self.names[inode] == "trace":
            return self.device.trace.snapshot()      # shared by the readers, not a copy each
        return self.render_attr(self.names[inode]).encode()

    # ---- FUSE side ----
    def owns(self, inode: int) -> bool:
        return inode in (DIR_INODE, CLIENTS_INODE) or inode in self.names or inode >= CLIENT_INODE_BASE

    def getattr(self, inode: int) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = inode
        attrs.st_uid, attrs.st_gid = self.uid, self.gid
        attrs.st_blksize = 4096
        attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = self.ctime_ns
        attrs.attr_timeout = attrs.entry_timeout = ATTR_TIMEOUT_S
        if inode in (DIR_INODE, CLIENTS_INODE):
            attrs.st_mode, attrs.st_nlink = stat.S_IFDIR | 0o755, 2
        elif inode in self.names:
            name = self.names[inode]
            mode = 0o200 if name == "reset" else 0o644 if name in ("uevent", "trace") else 0o444
            attrs.st_mode, attrs.st_nlink, attrs.st_size = stat.S_IFREG | mode, 1, 4096
        elif inode >= CLIENT_INODE_BASE and inode - CLIENT_INODE_BASE in self.device.contexts:
            ctx = self.device.contexts[inode - CLIENT_INODE_BASE]
            attrs.st_mode, attrs.st_nlink, attrs.st_size = stat.S_IFREG | 0o444, 1, 4096
            attrs.st_uid, attrs.st_gid = ctx.uid, ctx.gid
            attrs.attr_timeout = attrs.entry_timeout = 0   # gone the moment the context closes
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return attrs

    def lookup(self, parent: int, name: bytes) -> pyfuse3.EntryAttributes:
        if parent == DIR_INODE:
            if name == b"clients":
                return self.getattr(CLIENTS_INODE)
            if name in self.inodes:
                return self.getattr(self.inodes[name])
        elif parent == CLIENTS_INODE:
            context_id = client_id(name)
            if context_id is not None:
                return self.getattr(CLIENT_INODE_BASE + context_id)
        raise pyfuse3.FUSEError(errno.ENOENT)

    def entries(self, inode: int) -> list[tuple[int, bytes, int]]:
        """(offset id, name, inode) of a directory's entries, ids increasing."""
        if inode == DIR_INODE:
            out = [(i + 1, name, ino) for i, (name, ino) in enumerate(self.inodes.items())]
            return out + [(len(out) + 1, b"clients", CLIENTS_INODE)]
        if inode == CLIENTS_INODE:
            return [(cid, str(cid).encode(), CLIENT_INODE_BASE + cid) for cid in sorted(self.device.contexts)]
        raise pyfuse3.FUSEError(errno.ENOTDIR)

    def open(self, inode: int, flags: int, uid: int) -> pyfuse3.FileInfo:
        if inode in (DIR_INODE, CLIENTS_INODE):
            raise pyfuse3.FUSEError(errno.EISDIR)
        self.getattr(inode)    # ENOENT for a client that is gone
        name = self.names.get(inode)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing and name not in ("reset", "uevent", "trace"):
            raise pyfuse3.FUSEError(errno.EACCES)
        if writing and not owner.is_owner(uid):
            raise pyfuse3.FUSEError(errno.EACCES)   # the kernel checks the mode first; this is a backstop
        if name == "reset" and not writing:
            raise pyfuse3.FUSEError(errno.EACCES)
        if name == "trace" and not writing and sum(
                h.inode == inode and h.uid == uid for h in self.handles.values()) >= profiling.TRACE_READERS_PER_USER:
            raise pyfuse3.FUSEError(errno.EMFILE)   # anyone may read it: each open handle holds a snapshot
        fh = next(self._fhs)
        self.handles[fh] = _Handle(inode, uid=uid)
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)

    def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self.handles[fh]
        if off == 0 or handle.text is None:
            handle.text = self._render(handle.inode)
        return handle.text[off:off + size]

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        name = self.names.get(self.handles[fh].inode)
        value = bytes(buf).strip()
        if name == "reset":
            if value != b"1":
                raise pyfuse3.FUSEError(errno.EINVAL)
            try:
                await recovery.reset(self.device, "requested through sysfs")
            except KmdError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
        elif name == "trace":
            if value not in (b"0", b"1"):
                raise pyfuse3.FUSEError(errno.EINVAL)
            if value == b"1":
                self.device.trace.start()
                self.device.kick_housekeeping()
            else:
                self.device.trace.stop()
            self.device.queues.set_tracing(value == b"1")
        elif name == "uevent":
            action = value.decode(errors="replace").split(" ", 1)[0]
            if action not in ("add", "change", "remove") or self.on_uevent_write is None:
                raise pyfuse3.FUSEError(errno.EINVAL)
            await self.on_uevent_write(action)
        else:
            raise pyfuse3.FUSEError(errno.EBADF)
        return len(buf)

    def release(self, fh: int) -> None:
        self.handles.pop(fh, None)
