"""The device node as a FUSE file: open = new context, write = request,
read = reply, poll = reply ready, release = context teardown."""
from __future__ import annotations

import errno
import logging
import os
import select
import stat
import time

import pyfuse3
import trio

from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from kmd_fuse.requests import FrameError, handle_write

log = logging.getLogger("kmd_fuse.fuse")

READ_WAIT_S = 0.05   # a read() never blocks longer than this (SIGKILLed readers must not hang)
NPU_MAJOR = 261      # like the accel subsystem's major


class NodeOps(pyfuse3.Operations):
    """A FUSE filesystem whose root is the device node itself."""

    def __init__(self, device: Device, mode: int = 0o660, uid: int = 0, gid: int = 0):
        super().__init__()
        self.device = device
        self.mode, self.uid, self.gid = mode, uid, gid
        self.ctime_ns = time.time_ns()
        self.files: dict[int, object] = {}

    async def getattr(self, inode, ctx=None):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
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

    async def setattr(self, inode, attr, fields, fh, ctx):
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
        return await self.getattr(inode)

    async def open(self, inode, flags, ctx):
        if flags & os.O_TRUNC:
            raise pyfuse3.FUSEError(errno.EINVAL)
        try:
            context = self.device.open_context(ctx.pid, ctx.uid, ctx.gid)
        except KmdError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        self.files[context.context_id] = context
        return pyfuse3.FileInfo(fh=context.context_id, direct_io=True, nonseekable=True)

    async def write(self, fh, off, buf):
        try:
            handle_write(self.device, self.files[fh], bytes(buf))
        except FrameError as exc:
            log.info("context %d: write refused: %s", fh, exc.strerror)
            raise pyfuse3.FUSEError(exc.errno) from None
        return len(buf)

    async def read(self, fh, off, size):
        ctx = self.files[fh]
        if not ctx.busy:
            raise pyfuse3.FUSEError(errno.ENOMSG)   # no request outstanding
        if ctx.reply is None:
            self.device.service_completions()    # the job may be done before its interrupt is handled
        if ctx.reply is None:
            with trio.move_on_after(READ_WAIT_S):
                await ctx.reply_ready.wait()
            if ctx.reply is None or ctx.closed:
                raise pyfuse3.FUSEError(errno.EAGAIN)
        if size < len(ctx.reply):
            raise pyfuse3.FUSEError(errno.EOVERFLOW)
        return ctx.take_reply()

    async def poll(self, inode, fh, poll_handle, ctx):
        context = self.files[fh]
        mask = 0 if context.busy else select.POLLOUT
        if context.reply is not None:
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

    async def statfs(self, ctx):
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_blocks = self.device.memory.total // 4096
        data.f_bfree = data.f_bavail = (self.device.memory.total - self.device.memory.used) // 4096
        data.f_namemax = 255
        return data
