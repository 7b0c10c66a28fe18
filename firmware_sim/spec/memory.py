"""The chip's memories, as files on a tmpfs (the emulated physical bus).

A device's "bus directory" holds: the register file, each core's command ring
and completion queue, one page table per ASID, and one file per buffer object
("physical" memory segment, named by its id).  The KMD creates them; the chip
maps them; user space maps its own buffer files (zero copy).
"""
import mmap
import os
from pathlib import Path


def map_file(path: Path) -> mmap.mmap:
    """Map one of the chip's memories (shared, read-write, whole file)."""
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def regs_path(bus: Path) -> Path:
    return bus / "regs"


def ring_path(bus: Path, core: int) -> Path:
    return bus / f"ring{core}"


def cq_path(bus: Path, core: int) -> Path:
    return bus / f"cq{core}"


def page_table_path(bus: Path, asid: int) -> Path:
    return bus / f"pt{asid}"


def bo_path(bus: Path, bo_id: int) -> Path:
    return bus / f"bo{bo_id}"
