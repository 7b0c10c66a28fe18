"""Request frames: check a frame, read its payload as the client's version of the struct.

Frame-level faults (short frame, bad magic, nonzero reserved fields, more than
MAX_OUTSTANDING requests in flight, a seq already in flight) fail the write() itself with an errno, since
there is no trustworthy request to answer (or no room to queue one).  Everything
past a valid header gets a reply frame (``ioctls.py`` dispatches it).

Payload sizes follow drm_ioctl (docs/abi.md, "Growing the ABI"): the command number
says how large the client's struct is; anything from the command's first version up
to today's is taken, zero-extended, and answered with as many bytes as were sent.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass

from kmd_fuse import uapi
from kmd_fuse.context import MAX_OUTSTANDING, Context
from kmd_fuse.errors import KmdError


class FrameError(OSError):
    """The write() itself fails with this errno."""


@dataclass(eq=False)
class Request:
    """One accepted request: what the client sent, and its payload in today's layout."""

    command: uapi.Command
    cmd: int            # the number as the client sent it: replies echo it
    seq: int
    size: int           # payload bytes the client sent: replies carry as many
    payload: object     # cffi struct of today's layout, zero-extended

    def reply(self, result: int = 0) -> bytes:
        """The reply frame, payload cut (or zero-extended) to the client's struct size."""
        body = uapi.ffi.buffer(self.payload)[:self.size]
        if len(body) < self.size:
            body += bytes(self.size - len(body))
        return uapi.pack_frame_body(self.cmd, self.seq, body, result)


def check_header(ctx: Context, frame: bytes) -> tuple[int, int, int]:
    """(cmd, seq, payload size) of a frame whose header is sound; FrameError otherwise."""
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
    if seq in ctx.in_flight:
        # Two replies with one seq could not be told apart (nor read by seq): refuse the second.
        raise FrameError(errno.EEXIST, f"seq {seq} is in flight already (its reply has not been read)")
    return cmd, seq, size


def read_request(cmd: int, seq: int, frame: bytes) -> Request:
    """The request a sound frame carries; KmdError (answered in a reply frame) if it is not one."""
    command, announced = uapi.match_command(cmd)
    if command is None:
        raise KmdError(errno.ENOTTY, f"unknown command {cmd:#x}")
    body = frame[uapi.HDR_SIZE:]
    if len(body) != announced:
        raise KmdError(errno.EINVAL, f"{command.name}: command number {cmd:#x} announces {announced} "
                                     f"payload bytes, the frame carries {len(body)}")
    if len(body) < command.min_size:
        raise KmdError(errno.EINVAL, f"{command.name} payload is {len(body)} bytes, at least "
                                     f"{command.min_size} expected")
    current = command.payload_size
    if len(body) > current:
        if any(body[current:]):
            raise KmdError(errno.E2BIG, f"{command.name}: bytes past the {current} this driver knows are "
                                        "not zero (a newer client using a field this driver lacks)")
        body = body[:current]
    else:
        body = body + bytes(current - len(body))
    for offset, length in command.reserved_ranges:
        if any(body[offset:offset + length]):
            raise KmdError(errno.EINVAL, f"{command.name}: reserved or pad bytes at offset {offset} must be 0")
    payload = uapi.new_payload(command.number)
    uapi.ffi.memmove(payload, body, current)
    return Request(command, cmd, seq, len(frame) - uapi.HDR_SIZE, payload)
