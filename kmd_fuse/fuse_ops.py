"""One device's FUSE filesystem: a directory holding the device node and its
attribute tree, each bind-mounted where users look for them (<devroot>/npuN and
<sysroot>/class/npu/npuN).

The node: open = new context, write = request, read = reply, poll = reply ready,
release = context teardown. The attribute tree is kmd_fuse.sysfs."""
from __future__ import annotations

import errno
import functools
import logging
import os
import select
import stat
import time
from collections.abc import Callable

import pyfuse3
import trio

from kmd_fuse import jobs, sysfs, uapi
from kmd_fuse.context import MAX_OUTSTANDING
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from kmd_fuse.ioctls import handle_write
from kmd_fuse.paths import NPU_MAJOR
from kmd_fuse.requests import FrameError

log = logging.getLogger("kmd_fuse.fuse")

READ_WAIT_S = 0.05   # a read() never blocks longer than this (SIGKILLed readers must not hang)
NODE_INODE = pyfuse3.ROOT_INODE + 1
TREE_NAME = b"device"  # the attribute tree's directory in the root


def contain_errors(cls: type) -> type:
    """Make every FUSE handler ``cls`` defines answer EIO on an unexpected exception.

    pyfuse3 lets any exception other than FUSEError escape its main loop, which ends the
    daemon (and with it every context's buffers and jobs): a request must never do that.
    The traceback goes to the log; the client sees EIO; the daemon keeps serving."""
    for name, method in list(vars(cls).items()):
        if name.startswith("_") or not hasattr(pyfuse3.Operations, name):
            continue

        def guard(method):
            @functools.wraps(method)
            async def handler(self, *args, **kwargs):
                try:
                    return await method(self, *args, **kwargs)
                except pyfuse3.FUSEError:
                    raise
                except Exception:
                    log.exception("FUSE %s failed: answering EIO", method.__name__)
                    raise pyfuse3.FUSEError(errno.EIO) from None
            return handler
        setattr(cls, name, guard(method))
    return cls


def reply_wanted(offset: int) -> tuple[int | None, bool]:
    """(seq, wait) a read at ``offset`` asks for: below NPU_REPLY_BY_SEQ (read()'s own file
    position) the first reply completed (seq None); above, the reply to one seq, waited for
    unless NPU_REPLY_NOWAIT is added.  EINVAL for an offset that names no seq."""
    if offset < uapi.NPU_REPLY_BY_SEQ:
        return None, True
    rest = offset - uapi.NPU_REPLY_BY_SEQ
    wait = not rest & uapi.NPU_REPLY_NOWAIT
    seq = rest & ~uapi.NPU_REPLY_NOWAIT
    if seq > 0xFFFFFFFF:
        raise pyfuse3.FUSEError(errno.EINVAL)
    return seq, wait


@contain_errors
class DeviceFs(pyfuse3.Operations):
    """Root directory: `npu<N>` (the node) and `device/` (the attribute tree)."""

    def __init__(self, device: Device, mode: int = 0o660, uid: int = 0, gid: int = 0,
                 tree: sysfs.AttributeTree | None = None):
        super().__init__()
        self.device = device
        self.mode, self.uid, self.gid = mode, uid, gid
        self.attribute_hooks: list[Callable[[], None]] = []   # called after a chmod/chown of the node
        self.ctime_ns = time.time_ns()
        self.files: dict[int, object] = {}      # fh (= context id) -> context of an open node
        self.tree = tree or sysfs.AttributeTree(device)
        self.node_name = f"npu{device.index}".encode()

    async def getattr(self, inode, ctx=None):
        if inode != NODE_INODE:
            return self._other_attr(inode)
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = inode
        attrs.st_mode = stat.S_IFREG | self.mode
        attrs.st_nlink = 1
        attrs.st_uid, attrs.st_gid = self.uid, self.gid
        attrs.st_rdev = os.makedev(NPU_MAJOR, self.device.index)
        attrs.st_size = 0
        attrs.st_blksize = 4096
        attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = self.ctime_ns
        attrs.attr_timeout = attrs.entry_timeout = 5  # no GETATTR round trip per write
        return attrs

    def _other_attr(self, inode: int) -> pyfuse3.EntryAttributes:
        if inode == pyfuse3.ROOT_INODE:
            attrs = pyfuse3.EntryAttributes()
            attrs.st_ino, attrs.st_mode, attrs.st_nlink = inode, stat.S_IFDIR | 0o755, 2
            attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = self.ctime_ns
            attrs.attr_timeout = attrs.entry_timeout = 5
            return attrs
        if self.tree.owns(inode):
            return self.tree.getattr(inode)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == pyfuse3.ROOT_INODE:
            if name == self.node_name:
                return await self.getattr(NODE_INODE)
            if name == TREE_NAME:
                return self.tree.getattr(sysfs.DIR_INODE)
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.tree.lookup(parent_inode, name)

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE and not self.tree.owns(inode):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        if fh == pyfuse3.ROOT_INODE:
            entries = [(1, self.node_name, NODE_INODE), (2, TREE_NAME, sysfs.DIR_INODE)]
        else:
            entries = self.tree.entries(fh)
        for next_id, name, inode in entries:
            if next_id <= start_id:
                continue
            try:
                attrs = await self.getattr(inode)
            except pyfuse3.FUSEError:
                continue     # a client that closed meanwhile
            if not pyfuse3.readdir_reply(token, name, attrs, next_id):
                break

    async def releasedir(self, fh):
        pass

    async def setattr(self, inode, attr, fields, fh, ctx):
        if inode != NODE_INODE:
            raise pyfuse3.FUSEError(errno.EPERM)
        # The kernel (default_permissions) has already checked who may chmod/chown.
        if fields.update_size:
            raise pyfuse3.FUSEError(errno.EINVAL)
        if fields.update_mode:
            self.mode = stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            self.uid = attr.st_uid
        if fields.update_gid:
            self.gid = attr.st_gid
        self.ctime_ns = time.time_ns()
        for hook in self.attribute_hooks:
            hook()
        return await self.getattr(inode)

    async def open(self, inode, flags, ctx):
        if inode != NODE_INODE:
            return self.tree.open(inode, flags, ctx.uid)
        if flags & os.O_TRUNC:
            raise pyfuse3.FUSEError(errno.EINVAL)
        try:
            context = self.device.open_context(ctx.pid, ctx.uid, ctx.gid)
        except KmdError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        self.files[context.context_id] = context
        return pyfuse3.FileInfo(fh=context.context_id, direct_io=True)  # pread/pwrite allowed: see transport.py

    async def write(self, fh, off, buf):
        context = self.files.get(fh)
        if context is None:
            return await self.tree.write(fh, off, buf)
        try:
            handle_write(self.device, context, bytes(buf))
        except FrameError as exc:
            log.info("context %d: write refused: %s", fh, exc.strerror)
            raise pyfuse3.FUSEError(exc.errno) from None
        return len(buf)

    async def read(self, fh, off, size):
        ctx = self.files.get(fh)
        if ctx is None:
            return self.tree.read(fh, off, size)
        seq, wait = reply_wanted(off)
        if seq is None and not ctx.in_flight or seq is not None and seq not in ctx.in_flight:
            raise pyfuse3.FUSEError(errno.ENOMSG)   # no such request outstanding
        if ctx.ready_reply(seq) is None:
            jobs.service_completions(self.device)    # the job may be done before its interrupt is handled
        if ctx.ready_reply(seq) is None and wait:
            await jobs.poll_for_reply(self.device, ctx, seq)   # a short job: poll for it rather than sleep
        if ctx.ready_reply(seq) is None and wait:
            with trio.move_on_after(READ_WAIT_S):
                while ctx.ready_reply(seq) is None and not ctx.closed:
                    await ctx.reply_added.wait()
        frame = ctx.ready_reply(seq)
        if frame is None or ctx.closed:
            raise pyfuse3.FUSEError(errno.EAGAIN)
        if size < len(frame):
            raise pyfuse3.FUSEError(errno.EOVERFLOW)   # the reply stays for a read with room for it
        return ctx.take_reply(seq)

    async def poll(self, inode, fh, poll_handle, ctx):
        context = self.files.get(fh)
        if context is None:
            return select.POLLIN | select.POLLOUT     # attribute files are always ready
        mask = select.POLLOUT if context.outstanding < MAX_OUTSTANDING else 0
        if context.replies:
            mask |= select.POLLIN
        elif poll_handle is not None:
            context.poll_handle = poll_handle
        return mask

    async def flush(self, fh):
        pass

    async def release(self, fh):
        ctx = self.files.pop(fh, None)
        if ctx is not None:
            self.device.close_context(ctx)
        else:
            self.tree.release(fh)

    async def statfs(self, ctx):
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_blocks = self.device.memory.total // 4096
        data.f_bfree = data.f_bavail = (self.device.memory.total - self.device.memory.used) // 4096
        data.f_namemax = 255
        return data
