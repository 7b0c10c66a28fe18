"""The loadable's binary layout: magic and version, section kinds, the fixed-size records'
numpy dtypes, and the errors a reader raises (the file format itself: libnpu/loadable.py's
docstring).  Kept apart from the model's classes so that a reader of the bytes finds every
field's offset and width in one short module."""
from __future__ import annotations

import enum
import struct

import numpy as np

MAGIC = b"NPULOAD\0"
VERSION = (1, 3)
PAGE = 4096
MAX_RANK = 8


class LoadableError(ValueError):
    """A loadable file cannot be used; subclasses say why."""


class BadMagicError(LoadableError):
    """Not a loadable file at all."""


class VersionError(LoadableError):
    """Written by an incompatible format version."""


class TruncatedError(LoadableError):
    """The file ends before the data it declares."""


class ChecksumError(LoadableError):
    """A header or section CRC does not match its bytes."""


class FormatError(LoadableError):
    """The file is well-formed bytes but its contents are inconsistent."""


class EmptyLoadableError(LoadableError):
    """A well-formed loadable with no tasks or no outputs."""


class Section(enum.IntEnum):
    META = 1
    STRINGS = 2
    TENSORS = 3
    REGIONS = 4
    TASKS = 5
    INDICES = 6
    QUANT_SCALE = 7
    QUANT_ZP = 8
    PAYLOAD = 9
    WEIGHTS = 10
    RELOCS = 11
    DATA_RELOCS = 12
    HOST = 13
    HOST_DATA = 14


OPTIONAL_SECTIONS = (Section.HOST, Section.HOST_DATA)   # absent from 1.0 files


class RegionKind(enum.IntEnum):
    """What a memory region holds; WEIGHTS regions carry their initial contents, STATE
    regions (one per variable of a stateful model, per inference request) their initial
    value, kept from one inference to the next."""
    WEIGHTS = 1
    ACTIVATIONS = 2
    INPUT = 3
    OUTPUT = 4
    SCRATCH = 5
    STATE = 6


class TensorFlags(enum.IntFlag):
    NONE = 0
    INPUT = 1
    OUTPUT = 2
    CONSTANT = 4
    STATE = 8      # a variable kept between inferences (its region is a STATE region)


DTYPES = ["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]

# magic, major, minor, flags, header size, sections, file size, table offset, table CRC,
# reserved, header CRC
HEADER = struct.Struct("<8sHHIIIQQI16sI")
SECTION = struct.Struct("<IIQQII")
assert HEADER.size == 64 and SECTION.size == 32

TENSOR_DT = np.dtype([
    ("name_off", "<u4"), ("name_len", "<u4"), ("dtype", "u1"), ("rank", "u1"), ("flags", "<u2"),
    ("region", "<i4"), ("offset", "<u8"), ("size", "<u8"),
    ("shape", "<u4", (MAX_RANK,)), ("strides", "<u8", (MAX_RANK,)),
    ("q_index", "<u4"), ("q_count", "<u4"), ("q_axis", "<i4"), ("_pad", "<u4"),
])
REGION_DT = np.dtype([
    ("name_off", "<u4"), ("name_len", "<u4"), ("kind", "<u4"), ("alignment", "<u4"),
    ("size", "<u8"), ("content_off", "<u8"), ("content_size", "<u8"),
])
RELOC_DT = np.dtype([
    ("task", "<u4"), ("offset", "<u4"), ("region", "<u4"), ("_pad", "<u4"), ("addend", "<u8"),
])
DATA_RELOC_DT = np.dtype([
    ("region", "<u4"), ("target", "<u4"), ("offset", "<u8"), ("addend", "<u8"),
])
TASK_DT = np.dtype([
    ("name_off", "<u4"), ("name_len", "<u4"), ("op_off", "<u4"), ("op_len", "<u4"),
    ("meta_off", "<u4"), ("meta_len", "<u4"), ("opcode", "<u4"), ("core", "<i4"),
    ("payload_off", "<u8"), ("payload_size", "<u8"),
    ("deps_index", "<u4"), ("deps_count", "<u4"), ("tensors_index", "<u4"), ("tensors_count", "<u4"),
    ("macs", "<u8"), ("bytes_moved", "<u8"),
])


def align_up(n: int, a: int) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return (n + a - 1) // a * a


class Strings:
    """The STRINGS section being written: each string's (offset, length) in it."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def add(self, s: str) -> tuple[int, int]:
        b = s.encode()
        off = len(self.buf)
        self.buf += b
        return off, len(b)
