"""The driver's command table, as Linux accel drivers keep theirs (ivpu_drm_ioctls[]):
per command its handler and who may call it; number and payload struct come from
npu_uapi.h (``uapi.COMMANDS``).  The import fails unless every command of the header
has exactly one line here.

Adding a command: its struct and NPU_CMD_* #define in the header, one line in
``IOCTLS``, its handler.  A handler gets the device, the caller's context and the
``Request`` (payload in today's layout) and fills the payload in; it returns True
when it answers later itself (``request.reply()``), else the reply goes now.
"""
from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kmd_fuse import info, jobs, owner, profiling, recovery, uapi
from kmd_fuse.context import Context, check_fence
from kmd_fuse.device import Device
from kmd_fuse.errors import KmdError
from kmd_fuse.requests import Request, check_header, read_request

log = logging.getLogger("kmd_fuse.ioctls")

Handler = Callable[[Device, Context, Request], "bool | None"]


@dataclass(frozen=True)
class Ioctl:
    name: str                   # NPU_CMD_<name> in the header
    handler: Handler
    owner_only: bool = False    # the device's owner (kmd_fuse.owner): EPERM for anyone else, before the payload


def get_info(device: Device, ctx: Context, request: Request) -> None:
    info.fill_info(device, ctx, request.payload)


def mem_alloc(device: Device, ctx: Context, request: Request) -> None:
    req = request.payload
    bo = device.alloc(ctx, req.size, req.flags)
    req.handle, req.iova, req.alloc_size = bo.handle, bo.iova, bo.size


def mem_map(device: Device, ctx: Context, request: Request) -> None:
    req = request.payload
    bo = device.lookup(ctx, req.handle)
    req.size, req.offset = bo.size, 0
    req.token = device.memory.grants.issue(ctx.space, ctx.uid, bo)
    req.socket_path = device.memory.grants.socket_path


def mem_free(device: Device, ctx: Context, request: Request) -> bool:
    # With a live user queue the reply waits until the buffer is given back (user_queues).
    deferred = device.free(ctx, request.payload.handle)
    if deferred is not None:
        deferred.reply_to = request
    return deferred is not None


def submit(device: Device, ctx: Context, request: Request) -> bool:
    return jobs.submit(device, ctx, request).sync_reply is not None


def submit_batch(device: Device, ctx: Context, request: Request) -> None:
    jobs.submit_batch(device, ctx, request)


def wait(device: Device, ctx: Context, request: Request) -> bool:
    return not jobs.wait(device, ctx, request)


def get_stats(device: Device, ctx: Context, request: Request) -> None:
    info.fill_stats(device, ctx, request.payload)


def reset(device: Device, ctx: Context, request: Request) -> bool:
    if request.payload.flags:
        raise KmdError(errno.EINVAL, f"unknown RESET flags {request.payload.flags:#x}")
    device.spawn(_reset_then_reply, device, ctx, request)
    return True


async def _reset_then_reply(device: Device, ctx: Context, request: Request) -> None:
    result = 0
    try:
        await recovery.reset(device, f"requested by pid {ctx.pid}")
    except KmdError as exc:
        result = -exc.errno
    request.payload.reset_count = device.reset_count
    if not ctx.closed:
        ctx.set_reply(request.reply(result))


def get_param(device: Device, ctx: Context, request: Request) -> None:
    request.payload.value = info.get_param(device, ctx, request.payload.param)


def get_profile(device: Device, ctx: Context, request: Request) -> None:
    req = request.payload
    if req.fence & uapi.NPU_QUEUE_FENCE_BIT:
        device.queues.check_profile_fence(ctx, req.fence)
    else:
        check_fence(ctx, req.fence)
    profiling.fill_profile(ctx, req, uapi.NPU_MAX_PROFILE_TASKS)


def queue_create(device: Device, ctx: Context, request: Request) -> None:
    req = request.payload
    if req.flags:
        raise KmdError(errno.EINVAL, f"unknown QUEUE_CREATE flags {req.flags:#x}")
    queue = device.queues.create(ctx, req.entries, req.priority)
    req.entries, req.queue_id, req.core = queue.entries, queue.slot, queue.core
    req.size, req.iova = queue.bo.size, queue.bo.iova
    req.timeout_cap_ms = device.hw.config.max_job_timeout_ms
    req.memory_token, req.doorbell_token, req.completion_token = device.queues.tokens(queue)
    req.socket_path = device.memory.grants.socket_path


def queue_destroy(device: Device, ctx: Context, request: Request) -> bool:
    # Answered once the chip has let go of the queue and its memory is back (user_queues.poll).
    req = request.payload
    device.queues.destroy(ctx, req.queue_id, req.flags, request)
    return True


IOCTLS: dict[str, Ioctl] = {entry.name: entry for entry in (
    Ioctl("GET_INFO", get_info),
    Ioctl("MEM_ALLOC", mem_alloc),
    Ioctl("MEM_MAP", mem_map),
    Ioctl("MEM_FREE", mem_free),
    Ioctl("SUBMIT", submit),
    Ioctl("WAIT", wait),
    Ioctl("GET_STATS", get_stats),
    Ioctl("RESET", reset, owner_only=True),
    Ioctl("GET_PARAM", get_param),
    Ioctl("SUBMIT_BATCH", submit_batch),
    Ioctl("GET_PROFILE", get_profile),
    Ioctl("QUEUE_CREATE", queue_create),
    Ioctl("QUEUE_DESTROY", queue_destroy),
)}
_HEADER_NAMES = {command.name for command in uapi.COMMANDS.values()}
if set(IOCTLS) != _HEADER_NAMES:
    raise ImportError(f"ioctls.IOCTLS and npu_uapi.h's NPU_CMD_* differ: {sorted(set(IOCTLS) ^ _HEADER_NAMES)}")


def handle_write(device: Device, ctx: Context, frame: bytes) -> None:
    """Accept one request frame (FrameError if the write() itself fails); its reply
    becomes readable now or later."""
    cmd, seq, _ = check_header(ctx, frame)
    ctx.in_flight.add(seq)
    try:
        request = read_request(cmd, seq, frame)
        entry = IOCTLS[request.command.name]
        if entry.owner_only and not owner.is_owner(ctx.uid):
            raise KmdError(errno.EPERM, f"{entry.name} is for the device's owner only (root, or the user "
                                        "running a rootless driver)")
        if not entry.handler(device, ctx, request):
            ctx.set_reply(request.reply())
    except KmdError as exc:
        log.info("context %d: %s", ctx.context_id, exc.strerror)
        ctx.set_reply(uapi.pack_frame_body(cmd, seq, b"", -exc.errno))
