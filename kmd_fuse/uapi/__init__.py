"""The user/kernel ABI of the NPU driver, read from ``npu_uapi.h`` with cffi.

This package is the only part of ``kmd_fuse`` that user space (libnpu) may
import: the ABI here (the header's structs through ``ffi``, its constants as module
attributes, its commands and parameters as read from the header, the frame helpers
both sides use), the sysfs layout (``sysfs_layout``) and the usage-stats format
(``usage_stats``).  It imports nothing else of the driver.
"""
from __future__ import annotations

import errno
import functools
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cffi

HEADER_PATH = Path(__file__).with_name("npu_uapi.h")

_C_ONLY = re.compile(r"^#if !defined\(NPU_UAPI_CDEF\).*?^#endif\n", re.M | re.S)


def _cdef_source(text: str) -> str:
    """The header as cffi's cdef accepts it: no C-only block, no guards/includes."""
    text = _C_ONLY.sub("", text)
    keep = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("#ifndef", "#endif", "#include", "#if", "#else")):
            continue
        if stripped.startswith("#define NPU_UAPI_H"):
            continue
        keep.append(line)
    return "\n".join(keep)


ffi = cffi.FFI()
ffi.cdef(_cdef_source(HEADER_PATH.read_text()))
_lib = ffi.dlopen(None)  # integer constants only; no symbols are looked up

_CONSTANT = re.compile(r"^#define\s+(NPU_[A-Z0-9_]+)\s+(0x[0-9a-fA-F]+|\d+)", re.M)
CONSTANTS: dict[str, int] = {
    name: int(value, 0) for name, value in _CONSTANT.findall(HEADER_PATH.read_text())
}
globals().update(CONSTANTS)

if TYPE_CHECKING:
    def __getattr__(name: str) -> int:
        """Tells type checkers that the header's NPU_* constants, set above, are ints."""

IOC_WRITE, IOC_READ = 1, 2


def iowr(nr: int, struct_name: str) -> int:
    """Linux's _IOWR(NPU_IOC_TYPE, nr, struct) for a struct of this header."""
    size = ffi.sizeof(struct_name)
    if size >= 1 << 14:
        raise ValueError(f"{struct_name} is too large for an ioctl number")
    return ((IOC_READ | IOC_WRITE) << 30) | (size << 16) | (CONSTANTS["NPU_IOC_TYPE"] << 8) | nr


@dataclass(frozen=True)
class Command:
    """One request type as the header defines it: ``NPU_CMD_<name>`` carries ``struct npu_<name>``."""

    number: int                 # the current _IOWR number (its size field is the current struct size)
    name: str
    struct: str
    min_size: int               # the payload size of the command's first version (NPU_<name>_SIZE_VER0)

    @property
    def nr(self) -> int:
        return self.number & 0xFF

    @functools.cached_property
    def payload_size(self) -> int:
        return ffi.sizeof(self.struct)

    @functools.cached_property
    def reserved_ranges(self) -> tuple[tuple[int, int], ...]:
        """(offset, length) of the fields a request must leave zero: every ``pad`` and ``reserved``."""
        return tuple((field.offset, ffi.sizeof(field.type)) for name, field in ffi.typeof(self.struct).fields
                     if name == "pad" or name.startswith("reserved"))


_COMMAND = re.compile(r"^#define\s+NPU_CMD_([A-Z0-9_]+)\s+(0x[0-9a-fA-F]+)", re.M)


def _read_commands(header: str) -> dict[int, Command]:
    """Every NPU_CMD_* of the header, checked: its number is _IOWR of its nr and struct, nrs are unique."""
    commands: dict[int, Command] = {}
    for name, value in _COMMAND.findall(header):
        number, struct_name = int(value, 16), f"struct npu_{name.lower()}"
        if number != iowr(number & 0xFF, struct_name):
            raise ImportError(f"npu_uapi.h: NPU_CMD_{name} is {number:#x}, _IOWR gives "
                              f"{iowr(number & 0xFF, struct_name):#x}")
        if any(c.nr == number & 0xFF for c in commands.values()):
            raise ImportError(f"npu_uapi.h: NPU_CMD_{name} reuses nr {number & 0xFF}")
        size = ffi.sizeof(struct_name)
        min_size = CONSTANTS.get(f"NPU_{name}_SIZE_VER0", size)
        if not 0 < min_size <= size:
            raise ImportError(f"npu_uapi.h: NPU_{name}_SIZE_VER0 is {min_size}, the struct has {size} bytes")
        commands[number] = Command(number, name, struct_name, min_size)
    return commands


COMMANDS: dict[int, Command] = _read_commands(HEADER_PATH.read_text())
COMMANDS_BY_NR: dict[int, Command] = {command.nr: command for command in COMMANDS.values()}
PARAMS: dict[int, str] = {value: name[len("NPU_PARAM_"):] for name, value in CONSTANTS.items()
                          if name.startswith("NPU_PARAM_")}


def match_command(cmd: int) -> tuple[Command | None, int]:
    """The command a request number means, and the payload size it announces, as drm_ioctl
    matches them: by type and nr, whatever the size, so a client built against an older
    (smaller) or newer (larger) struct is still understood.  (None, size) if no command."""
    size = (cmd >> 16) & 0x3FFF
    if cmd >> 30 != IOC_READ | IOC_WRITE or (cmd >> 8) & 0xFF != CONSTANTS["NPU_IOC_TYPE"]:
        return None, size
    return COMMANDS_BY_NR.get(cmd & 0xFF), size


def abi_string(version: int) -> str:
    """NPU_ABI_VERSION (major << 16 | minor) as 'major.minor'."""
    return f"{version >> 16}.{version & 0xFFFF}"


HDR_SIZE = ffi.sizeof("struct npu_frame_hdr")

# The header as a struct.Struct as well: packing and unpacking it on every request is
# then one C call instead of a cffi allocation and copy.  Checked against the
# header's own layout here, so the two can never disagree.
HDR_STRUCT = struct.Struct("<IIIIiI")
_HDR_FIELDS = ("magic", "cmd", "seq", "size", "result", "reserved")
if HDR_STRUCT.size != HDR_SIZE or [name for name, _ in ffi.typeof("struct npu_frame_hdr").fields] != list(
        _HDR_FIELDS) or [ffi.offsetof("struct npu_frame_hdr", f) for f in _HDR_FIELDS] != [0, 4, 8, 12, 16, 20]:
    raise ImportError("npu_uapi.h: struct npu_frame_hdr is not the 6 x 32-bit layout HDR_STRUCT expects")
_MAGIC = CONSTANTS["NPU_FRAME_MAGIC"]
_PAYLOAD_PTR = {number: ffi.typeof(command.struct + " *") for number, command in COMMANDS.items()}


# The hand-over socket's two messages (npu_handover_request / _reply), packed the same
# way and checked against the header at import.
HANDOVER_REQUEST = struct.Struct("<IIQ")   # magic, reserved, token
HANDOVER_REPLY = struct.Struct("<IiQ")     # magic, result, size
for _struct_name, _packer, _fields in (
        ("struct npu_handover_request", HANDOVER_REQUEST, ("magic", "reserved", "token")),
        ("struct npu_handover_reply", HANDOVER_REPLY, ("magic", "result", "size"))):
    if (ffi.sizeof(_struct_name) != _packer.size
            or [name for name, _ in ffi.typeof(_struct_name).fields] != list(_fields)
            or [ffi.offsetof(_struct_name, f) for f in _fields] != [0, 4, 8]):
        raise ImportError(f"npu_uapi.h: {_struct_name} is not the (u32, u32, u64) layout expected")
_HANDOVER_MAGIC = CONSTANTS["NPU_HANDOVER_MAGIC"]


def pack_handover_request(token: int, *, magic: int = _HANDOVER_MAGIC) -> bytes:
    """The message that trades a MEM_MAP token for the buffer's descriptor."""
    return HANDOVER_REQUEST.pack(magic, 0, token)


def pack_handover_reply(result: int, size: int = 0) -> bytes:
    return HANDOVER_REPLY.pack(_HANDOVER_MAGIC, result, size)


def unpack_handover_reply(message: bytes) -> tuple[int, int]:
    """(result, size) of a hand-over reply; ValueError if it is not one."""
    if len(message) != HANDOVER_REPLY.size:
        raise ValueError(f"hand-over reply of {len(message)} bytes, expected {HANDOVER_REPLY.size}")
    magic, result, size = HANDOVER_REPLY.unpack(message)
    if magic != _HANDOVER_MAGIC:
        raise ValueError(f"hand-over reply with bad magic {magic:#x}")
    return result, size


def new_payload(cmd: int):
    """A zeroed payload struct (cffi owned) for command ``cmd``."""
    return ffi.new(_PAYLOAD_PTR[cmd])


def pack_frame(cmd: int, seq: int, payload=None, result: int = 0) -> bytes:
    """Header + payload bytes, ready for one write()/read()."""
    return pack_frame_body(cmd, seq, b"" if payload is None else ffi.buffer(payload)[:], result)


def pack_frame_body(cmd: int, seq: int, body: bytes, result: int = 0) -> bytes:
    """``pack_frame`` for a payload already in bytes (e.g. a request prepared once, sent many times)."""
    return HDR_STRUCT.pack(_MAGIC, cmd, seq, len(body), result, 0) + body


def header_fields(frame: bytes) -> tuple[int, int, int, int, int, int]:
    """(magic, cmd, seq, size, result, reserved) of a frame's header (caller checks them)."""
    if len(frame) < HDR_SIZE:
        raise ValueError(f"frame of {len(frame)} bytes is shorter than its {HDR_SIZE}-byte header")
    return HDR_STRUCT.unpack_from(frame)


def unpack_header(frame: bytes):
    """The header of a frame as a cffi struct copy (caller checks the fields)."""
    if len(frame) < HDR_SIZE:
        raise ValueError(f"frame of {len(frame)} bytes is shorter than its {HDR_SIZE}-byte header")
    hdr = ffi.new("struct npu_frame_hdr *")
    ffi.memmove(hdr, frame[:HDR_SIZE], HDR_SIZE)
    return hdr


def unpack_payload(cmd: int, body: bytes, offset: int = 0):
    """Copy ``body[offset:]`` into a new payload struct of command ``cmd``."""
    payload = ffi.new(_PAYLOAD_PTR[cmd])
    size = COMMANDS[cmd].payload_size
    if len(body) - offset != size:
        raise ValueError(f"{COMMANDS[cmd].name} payload is {len(body) - offset} bytes, expected {size}")
    ffi.memmove(payload, body[offset:] if offset else body, size)
    return payload


def c_string(char_array) -> str:
    """A NUL-terminated char[] field as str."""
    return ffi.string(char_array).decode()


# What ran out, for the errnos of the driver's limits (docs/abi.md, "Limits"): a reply
# carries only the errno, so the message a user sees comes from here.
LIMIT_HINTS = {
    ("OPEN", errno.EMFILE): "this user holds the most contexts allowed (npu-kmd start "
                            "--max-contexts-per-user), or this process is out of file descriptors",
    ("OPEN", errno.ENFILE): "the device has no context left for users (the rest are kept for root)",
    ("MEM_ALLOC", errno.EDQUOT): "this user's device-memory or buffer quota is used up "
                                 "(npu-kmd start --max-memory-per-user / --max-buffers-per-user)",
    ("MEM_ALLOC", errno.ENOMEM): "the device's memory (or its buffer budget) is full",
    ("MEM_MAP", errno.EACCES): "the driver's hand-over socket admits only users who may open the "
                               "device node, and this user may not (now)",
    ("MEM_MAP", errno.EBUSY): "the driver's hand-over socket serves as many connections as it "
                              "takes (from this user, or in all); try again when some close",
}


# What a system call on a node answers once its driver is gone (the daemon stopped or
# died: the FUSE connection is aborted, or the node is a placeholder no one serves).
DRIVER_GONE = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV})


class NpuError(OSError):
    """A request the driver answered with -errno (``payload``: the reply's payload, if any),
    or one whose system call on the node failed (``filename``: the node)."""

    payload = None

    def __init__(self, err: int, command: str, detail: str = "", *, node: str | None = None):
        message = f"{command}: {errno.errorcode.get(err, err)} ({os.strerror(err)})"
        detail = detail or LIMIT_HINTS.get((command, err), "")
        if detail:
            message += f": {detail}"
        super().__init__(err, message)
        self.command = command
        if node is not None:
            self.filename = node
