"""Random and mutated request frames for every command, and the errnos the ABI documents.

``FrameGenerator.next()`` makes one frame: a well-formed request of any command whose
fields are drawn from values that break things (0, 1, all ones, sign bits, page sizes
plus or minus one, the handles, fences and device addresses this context really owns,
random numbers), a payload of random bytes of the right size, or a valid frame mutated
(truncated, extended, bad magic, wrong size field, non-zero result or reserved, flipped
bits, unknown command numbers), or random bytes.  ``observe()`` learns handles, fences
and addresses from the replies so later frames name real objects.

``documented_errnos()`` reads the errno names set in bold in docs/abi.md: the driver
promises nothing else.
"""
from __future__ import annotations

import errno
import random
import re
import struct
from pathlib import Path

from kmd_fuse import uapi

PAGE = 4096
_U64, _U32 = (1 << 64) - 1, (1 << 32) - 1
ABI_DOC = Path(__file__).resolve().parents[1] / "docs" / "abi.md"


def documented_errnos(doc: Path = ABI_DOC) -> set[int]:
    """Every errno docs/abi.md names in bold (**EINVAL**, ...)."""
    names = set(re.findall(r"\*\*(E[A-Z0-9]+)\*\*", doc.read_text()))
    names |= set(re.findall(r"\|\s*(E[A-Z0-9]+)\s*\|", doc.read_text()))     # the errors table
    return {getattr(errno, name) for name in names if hasattr(errno, name)}


def _interesting(rng: random.Random, bits: int, known: list[int]) -> int:
    """A value for an integer field of ``bits`` bits (two's complement for signed ones)."""
    top = (1 << bits) - 1
    choice = rng.random()
    if known and choice < 0.35:
        value = rng.choice(known) + rng.choice((0, 0, 0, 1, -1, PAGE, -PAGE, 8, -8))
    elif choice < 0.7:
        value = rng.choice((0, 1, 2, 7, 8, PAGE - 1, PAGE, PAGE + 1, 1 << 20, 1 << 30, 1 << 31, (1 << 31) - 1,
                            1 << 32, 1 << 40, 1 << 63, (1 << 63) - 1, top, top - 1, -1, -2))
    else:
        value = rng.getrandbits(bits)
    return value & top


class FrameGenerator:
    """Frames for one context; feed the replies back with ``observe``."""

    def __init__(self, seed: int, max_held: int = 48):
        self.rng = random.Random(seed)
        self.handles: list[int] = []
        self.iovas: list[int] = []
        self.fences: list[int] = []
        self.max_held = max_held
        self.commands = list(uapi.COMMANDS.values())
        self.seq = 0

    # ---- payloads ----
    def _fill(self, cdata, type_) -> None:
        """Set every integer field (and array element) of a struct to a chosen value."""
        rng = self.rng
        for name, field in type_.fields:
            ftype = field.type
            if ftype.kind == "array":
                if ftype.item.kind == "primitive" and ftype.item.cname != "char":
                    known = self._known_for(name)
                    bits = uapi.ffi.sizeof(ftype.item) * 8
                    count = min(ftype.length, rng.choice((1, 2, 4, ftype.length)))
                    for i in range(count):
                        setattr_item(cdata, name, i, _interesting(rng, bits, known), ftype.item.cname)
                continue
            if ftype.kind == "primitive":
                bits = uapi.ffi.sizeof(ftype) * 8
                value = _interesting(rng, bits, self._known_for(name))
                if ftype.cname.startswith("int") and value >= 1 << (bits - 1):
                    value -= 1 << bits
                setattr(cdata, name, value)

    def _known_for(self, field: str) -> list[int]:
        if "handle" in field:
            return self.handles
        if "iova" in field:
            return self.iovas
        if "fence" in field:
            return self.fences
        return []

    def _plausible(self, command: uapi.Command) -> bytes:
        """A request of ``command`` with hostile field values."""
        payload = uapi.new_payload(command.number)
        self._fill(payload, uapi.ffi.typeof(command.struct))
        rng = self.rng
        if command.name == "MEM_ALLOC" and rng.random() < 0.6:
            payload.size = rng.choice((1, PAGE, 3 * PAGE + 1, 1 << 16, 1 << 20))   # often one that fits
            payload.flags = rng.choice((0, 1, 2, 3))
        if command.name == "MEM_FREE" and self.handles and (len(self.handles) > self.max_held or rng.random() < .5):
            payload.handle = rng.choice(self.handles)
        if command.name == "SUBMIT" and rng.random() < 0.5:
            payload.num_bos = min(payload.num_bos & 0x7F, uapi.NPU_MAX_SUBMIT_BOS + 1)
            payload.flags &= rng.choice((0, uapi.NPU_SUBMIT_WAIT, _U32))
            payload.priority &= rng.choice((0, 3, _U32))
            payload.timeout_ms = rng.choice((0, 1, 100, 1000, payload.timeout_ms))
            payload.cmd_size = rng.choice((0, 8, 16, 64, 4096, payload.cmd_size))
        if command.name == "SUBMIT" and self.handles and rng.random() < 0.4:   # a job that runs
            index = rng.randrange(len(self.handles))
            payload.cmd_iova = self.iovas[index] + rng.choice((0, 8, 64))
            payload.cmd_size = rng.choice((0, 8, 16, 64, 256))
            payload.num_bos, payload.bo_handles[0] = 1, self.handles[index]
            payload.priority, payload.timeout_ms = rng.randrange(3), rng.choice((0, 1, 100, 1000))
            payload.flags = rng.choice((0, uapi.NPU_SUBMIT_WAIT))
        if command.name == "SUBMIT" and rng.random() < 0.3:                   # profiled: the chip's profile queue
            payload.flags = (payload.flags & uapi.NPU_SUBMIT_WAIT) | uapi.NPU_SUBMIT_PROFILE
        if command.name == "GET_PROFILE" and rng.random() < 0.6:             # fences that exist, any page
            payload.fence = rng.choice(self.fences) if self.fences and rng.random() < 0.7 else payload.fence
            payload.first = rng.choice((0, 1, uapi.NPU_MAX_PROFILE_TASKS, 4095, _U32, payload.first))
        if command.name == "GET_PARAM" and rng.random() < 0.6:               # the ids around the known ones
            payload.param = rng.randrange(32)
            if rng.random() < 0.8:
                payload.pad = payload.reserved[0] = payload.reserved[1] = 0
        if command.name == "WAIT" and self.fences and rng.random() < 0.4:     # fences that exist
            payload.count = rng.randrange(1, min(len(self.fences), 8) + 1)
            for i, fence in enumerate(rng.sample(self.fences, payload.count)):
                payload.fences[i] = fence
            payload.timeout_ns = rng.choice((0, 1_000_000, 100_000_000))
        elif command.name == "WAIT" and rng.random() < 0.5:
            payload.count = rng.choice((0, 1, 2, uapi.NPU_MAX_WAIT_FENCES, uapi.NPU_MAX_WAIT_FENCES + 1,
                                        payload.count))
            payload.timeout_ns = rng.choice((0, 1_000_000, 100_000_000, -1, payload.timeout_ns))
        return uapi.ffi.buffer(payload)[:]

    # ---- frames ----
    def next(self) -> bytes:
        """One frame to write."""
        rng = self.rng
        self.seq = (self.seq + 1) & _U32
        command = rng.choice(self.commands)
        roll = rng.random()
        if roll < 0.55:
            body = self._plausible(command)
        elif roll < 0.7:
            body = rng.randbytes(command.payload_size)
        else:
            return self._mutated(command)
        return uapi.pack_frame_body(command.number, self.seq, body)

    def _mutated(self, command: uapi.Command) -> bytes:
        rng = self.rng
        frame = bytearray(uapi.pack_frame_body(command.number, self.seq, self._plausible(command)))
        how = rng.randrange(9)
        if how == 0:                                    # truncated anywhere, header included
            del frame[rng.randrange(len(frame)):]
        elif how == 1:                                  # extended
            frame += rng.randbytes(rng.randrange(1, 64))
        elif how == 2:                                  # bad magic
            struct.pack_into("<I", frame, 0, rng.getrandbits(32))
        elif how == 3:                                  # size field disagreeing
            struct.pack_into("<I", frame, 12, _interesting(rng, 32, [command.payload_size]))
        elif how == 4:                                  # non-zero result / reserved
            struct.pack_into("<i", frame, 16, rng.choice((1, -1, -(1 << 31))))
            if rng.random() < 0.5:
                struct.pack_into("<I", frame, 16, 0)
                struct.pack_into("<I", frame, 20, rng.getrandbits(32) or 1)
        elif how == 5:                                  # bit flips
            for _ in range(rng.randrange(1, 8)):
                i = rng.randrange(len(frame))
                frame[i] ^= 1 << rng.randrange(8)
        elif how == 6:                                  # unknown or mis-sized command number
            nr = rng.choice((rng.randrange(256), len(uapi.COMMANDS)))
            size = rng.choice((command.payload_size, rng.randrange(1 << 14)))
            struct.pack_into("<I", frame, 4, (3 << 30) | (size << 16) | (uapi.NPU_IOC_TYPE << 8) | nr)
        elif how == 7:                                  # header only, or header claiming the payload
            frame = frame[:uapi.HDR_SIZE]
        else:                                           # random bytes, up to past the largest frame
            frame = bytearray(rng.randbytes(rng.randrange(uapi.NPU_MAX_FRAME + 128)))
        return bytes(frame)

    def observe(self, frame: bytes) -> None:
        """Learn from a reply: new buffers (handle, address), fences, frees."""
        if len(frame) < uapi.HDR_SIZE:
            return
        _, cmd, _, size, result, _ = uapi.header_fields(frame)
        command = uapi.COMMANDS.get(cmd)
        if result or command is None or size != command.payload_size or len(frame) != uapi.HDR_SIZE + size:
            return
        reply = uapi.unpack_payload(cmd, frame, uapi.HDR_SIZE)
        if command.name == "MEM_ALLOC":
            self.handles.append(reply.handle)
            self.iovas.append(reply.iova)
        elif command.name == "MEM_FREE" and reply.handle in self.handles:
            index = self.handles.index(reply.handle)
            del self.handles[index], self.iovas[index]
        elif command.name == "SUBMIT":
            self.fences.append(reply.fence)
            del self.fences[:-64]


def setattr_item(cdata, name: str, index: int, value: int, cname: str) -> None:
    bits = uapi.ffi.sizeof(cname) * 8
    if cname.startswith("int") and value >= 1 << (bits - 1):
        value -= 1 << bits
    getattr(cdata, name)[index] = value
