"""IOMMU page-table format.

Each context (address-space id, ASID) has a flat, single-level page table: an
array of little-endian u64 page-table entries, one per page of the IOVA space
[IOVA_BASE, IOVA_BASE + PT_ENTRIES * page size).  Addresses below IOVA_BASE
(NULL and friends) are never mapped.  The table lives in memory the KMD writes
and the chip only reads (a sparse tmpfs file: unmapped ranges cost nothing).

PTE bits:
  0      VALID
  1      READ   (device may read)
  2      WRITE  (device may write)
  12..31 page index within the backing buffer object
  32..63 buffer-object id (the "physical" segment, see spec.memory)
"""
import numpy as np

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
IOVA_BASE = 0x0100_0000
PT_ENTRIES = 1 << 20            # 4 GiB of IOVA space per context
IOVA_LIMIT = IOVA_BASE + PT_ENTRIES * PAGE_SIZE
MAX_ASIDS = 4096

PTE_VALID = 0x1
PTE_READ = 0x2
PTE_WRITE = 0x4
PTE_INDEX_SHIFT = 12
PTE_INDEX_MASK = 0xFFFFF
PTE_BO_SHIFT = 32

PTE_DTYPE = np.dtype("<u8")


def make_ptes(bo_id: int, first_page: int, npages: int, readable: bool, writable: bool) -> np.ndarray:
    """Entries mapping ``npages`` pages of buffer ``bo_id`` starting at page ``first_page``."""
    flags = PTE_VALID | (PTE_READ if readable else 0) | (PTE_WRITE if writable else 0)
    index = np.arange(first_page, first_page + npages, dtype=np.uint64)
    return (np.uint64(bo_id) << np.uint64(PTE_BO_SHIFT)) | (index << np.uint64(PTE_INDEX_SHIFT)) | np.uint64(flags)


def pte_fields(ptes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flags, page index, bo id) arrays of an array of entries."""
    ptes = ptes.astype(np.uint64, copy=False)
    return (ptes & np.uint64(0xFFF),
            (ptes >> np.uint64(PTE_INDEX_SHIFT)) & np.uint64(PTE_INDEX_MASK),
            ptes >> np.uint64(PTE_BO_SHIFT))
