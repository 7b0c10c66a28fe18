"""Request frames: parse, validate, dispatch to the device, build replies.

Frame-level faults (short frame, bad magic, nonzero reserved fields, more than
MAX_OUTSTANDING requests in flight) fail the write() itself with an errno, since
there is no trustworthy request to answer (or no room to queue one).  Everything past a valid header gets
a reply frame whose result is 0 or -errno: unknown command -> ENOTTY, payload of
the wrong size -> EINVAL, unknown handle -> ENOENT, and so on.
"""
from __future__ import annotations

import errno
import logging

from kmd_fuse import uapi
from kmd_fuse.context import MAX_OUTSTANDING, Context
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError

log = logging.getLogger("kmd_fuse.requests")


class FrameError(OSError):
    """The write() itself fails with this errno."""


def handle_write(device: Device, ctx: Context, frame: bytes) -> None:
    """Accept one request frame; its reply becomes readable now or later."""
    if ctx.outstanding >= MAX_OUTSTANDING:
        raise FrameError(errno.EBUSY, f"{MAX_OUTSTANDING} requests outstanding: read replies first")
    if len(frame) < uapi.HDR_SIZE:
        raise FrameError(errno.EINVAL, f"short frame: {len(frame)} bytes")
    magic, cmd, seq, size, result, reserved = uapi.header_fields(frame)
    if magic != uapi.NPU_FRAME_MAGIC:
        raise FrameError(errno.EINVAL, f"bad magic {magic:#x}")
    if result or reserved:
        raise FrameError(errno.EINVAL, "result/reserved fields of a request must be 0")
    if size != len(frame) - uapi.HDR_SIZE:
        raise FrameError(errno.EINVAL, f"header says {size} payload bytes, frame has "
                                       f"{len(frame) - uapi.HDR_SIZE}")
    ctx.outstanding += 1
    try:
        command = uapi.COMMANDS.get(cmd)
        if command is None:
            raise KmdError(errno.ENOTTY, f"unknown command {cmd:#x}")
        if size != command.payload_size:
            raise KmdError(errno.EINVAL, f"{command.name} payload is {size} bytes, expected "
                                         f"{command.payload_size}")
        payload = uapi.unpack_payload(cmd, frame, uapi.HDR_SIZE)
        if _dispatch(device, ctx, command.name, seq, payload):
            ctx.set_reply(uapi.pack_frame(cmd, seq, payload))
    except KmdError as exc:
        log.info("context %d: %s", ctx.context_id, exc.strerror)
        ctx.set_reply(uapi.pack_frame(cmd, seq, result=-exc.errno))


def _dispatch(device: Device, ctx: Context, name: str, seq: int, req) -> bool:
    """Run a request; True when its reply (``req``) is complete now."""
    if name == "SUBMIT":                        # the hot path first
        job = device.submit(ctx, req, seq)
        req.fence = job.fence
        return job.sync_reply is None
    if name == "GET_INFO":
        device.fill_info(ctx, req)
    elif name == "MEM_ALLOC":
        bo = device.alloc(ctx, req.size, req.flags)
        req.handle, req.iova, req.alloc_size = bo.handle, bo.iova, bo.size
    elif name == "MEM_MAP":
        bo = device.lookup(ctx, req.handle)
        req.size, req.offset = bo.size, 0
        req.token = device.memory.grants.issue(ctx.space, ctx.uid, bo)
        req.socket_path = device.memory.grants.socket_path
    elif name == "MEM_FREE":
        device.free(ctx, req.handle)
    elif name == "WAIT":
        return device.wait(ctx, seq, req)
    elif name == "GET_STATS":
        device.fill_stats(ctx, req)
    elif name == "RESET":
        if ctx.uid != 0:
            raise KmdError(errno.EPERM, "RESET is for root only")
        if req.flags:
            raise KmdError(errno.EINVAL, f"unknown RESET flags {req.flags:#x}")
        device.spawn(_reset_then_reply, device, ctx, seq, req)
        return False
    return True


async def _reset_then_reply(device: Device, ctx: Context, seq: int, req) -> None:
    result = 0
    try:
        await device.reset(f"requested by pid {ctx.pid}")
    except KmdError as exc:
        result = -exc.errno
    req.reset_count = device.reset_count
    if not ctx.closed:
        ctx.set_reply(uapi.pack_frame(uapi.NPU_CMD_RESET, seq, req, result=result))
