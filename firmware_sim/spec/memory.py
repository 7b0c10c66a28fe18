"""The chip's memories, as files on a tmpfs (the emulated physical bus).

A device's "bus directory" holds: the register file, each core's command ring
and completion queue, one page table per ASID, and one file per buffer object
("physical" memory segment, named by its id).  The KMD creates them; the chip
maps them; user space maps its own buffer files (zero copy).
"""
from pathlib import Path


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
