"""The chip's memories, as files on a tmpfs (the emulated physical bus).

A device's "bus directory" holds: the register file, each core's command ring
and completion queue, one page table per ASID, and one entry per buffer object
("physical" memory segment, named by its id).  The KMD creates them; the chip
maps them; user space maps its own buffers (zero copy).

A buffer object's entry is a file, or a symlink to one (the KMD links
``bo<id>`` to a descriptor it holds, ``/proc/<pid>/fd/<n>``): ``open_bo`` opens
either, and for a symlink checks that it still exists once the target is open -
the KMD removes the link before it closes the descriptor, so a descriptor number
reused for another buffer is never mistaken for this one.  Buffer ids are never
reused.
"""
import errno
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


def profile_queue_path(bus: Path, core: int) -> Path:
    return bus / f"pq{core}"


def queue_table_path(bus: Path) -> Path:
    """The user-queue table (spec.queues), a second register page."""
    return bus / "qtab"


def queue_line_path(bus: Path, slot: int, name: int, line: str) -> Path:
    """A user queue's doorbell (``line`` "db": clients write, the core reads) or completion
    line ("cq": the core writes, clients read): named FIFOs the driver makes per
    QUEUE_CREATE (mode 0600, a random ``name``) and removes when the queue is released."""
    if line not in ("db", "cq"):
        raise ValueError(f"queue line {line!r}: 'db' or 'cq'")
    return bus / f"q{slot}-{name:016x}.{line}"


def page_table_path(bus: Path, asid: int) -> Path:
    return bus / f"pt{asid}"


def bo_path(bus: Path, bo_id: int) -> Path:
    return bus / f"bo{bo_id}"


def open_bo(bus: Path, bo_id: int) -> int:
    """A read-write descriptor of buffer object ``bo_id``; FileNotFoundError if it has none."""
    path = bo_path(bus, bo_id)
    try:
        target = os.readlink(path)
    except OSError as exc:
        if exc.errno != errno.EINVAL:    # EINVAL: a plain file, no link to re-check
            raise
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"buffer object {bo_id} was released", str(path)) from None
    try:
        if os.readlink(path) == target:
            return fd
    except FileNotFoundError:
        pass
    os.close(fd)
    raise FileNotFoundError(errno.ENOENT, f"buffer object {bo_id} was released", str(path))
