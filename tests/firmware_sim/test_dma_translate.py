"""The DMA engine's IOTLB: translations of successful accesses are kept per ASID until
the driver invalidates that ASID (as a real IOMMU's TLB); failed ones are never kept.
After an invalidation every access is walked through the page table again."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.dma import IommuFault
from npu_hw import iommu, memory
from tests.support.chip_memory import ASID, BO, ChipMemory


def _table(mem: ChipMemory) -> np.memmap:
    return np.memmap(memory.page_table_path(mem.bus, ASID), dtype=iommu.PTE_DTYPE, mode="r+",
                     shape=(iommu.PT_ENTRIES,))


def test_translations_follow_the_page_table_after_invalidation(tmp_path) -> None:
    mem = ChipMemory(tmp_path, size=1 << 20)
    table, dma = _table(mem), mem.dma
    dma.bind(ASID)
    iova, nbytes = iommu.IOVA_BASE + 100, 3 * iommu.PAGE_SIZE   # spans four pages
    assert dma.translate(iova, nbytes, write=True) == [(BO, 100, nbytes)]
    # Remap the second page to page 40 of the same object: the cached translation stands
    # until the driver invalidates, then the range splits.
    table[1] = iommu.make_ptes(BO, 40, 1, True, True)[0]
    assert dma.translate(iova, nbytes, write=True) == [(BO, 100, nbytes)]
    dma.invalidate(ASID, BO)
    assert dma.translate(iova, nbytes, write=False) == [
        (BO, 100, iommu.PAGE_SIZE - 100), (BO, 40 * iommu.PAGE_SIZE, iommu.PAGE_SIZE),
        (BO, 2 * iommu.PAGE_SIZE, 2 * iommu.PAGE_SIZE - (iommu.PAGE_SIZE - 100))]
    # Read-only third page: writes fault, reads still work; unmapped: both fault.
    table[2] = iommu.make_ptes(BO, 2, 1, True, False)[0]
    dma.invalidate(ASID, BO)
    with pytest.raises(IommuFault) as fault:
        dma.translate(iova, nbytes, write=True)
    assert fault.value.iova == iommu.IOVA_BASE + 2 * iommu.PAGE_SIZE
    assert len(dma.translate(iova, nbytes, write=False)) == 3
    table[2] = 0
    dma.invalidate(ASID)
    dma.bind(ASID)
    with pytest.raises(IommuFault, match="not mapped"):
        dma.translate(iova, nbytes, write=False)
    # Restored: the original single segment again (faults were not cached).
    table[1:3] = iommu.make_ptes(BO, 1, 2, True, True)
    assert dma.translate(iova, nbytes, write=True) == [(BO, 100, nbytes)]


def test_array_views_are_reused_until_invalidated(tmp_path) -> None:
    mem = ChipMemory(tmp_path, size=1 << 20)
    table, dma = _table(mem), mem.dma
    dma.bind(ASID)
    at = mem.put(np.arange(64, dtype=np.int32))
    first = dma.read_array(at, np.int32, (8, 8))
    moved = dma.bytes_moved
    again = dma.read_array(at, np.int32, (8, 8))
    assert again is first and dma.bytes_moved == moved + 256   # a hit still counts its bytes
    assert not again.flags.writeable
    out = dma.write_array(at, np.int32, (64,))
    assert dma.write_array(at, np.int32, (64,)) is out and out.flags.writeable
    out[:] = 7                                                 # views see the memory itself
    assert (first == 7).all()
    table[0] = 0                                               # unmapped, then invalidated
    dma.invalidate(ASID, BO)
    with pytest.raises(IommuFault, match="not mapped"):
        dma.read_array(at, np.int32, (8, 8))


def test_invalidating_one_asid_keeps_the_others(tmp_path) -> None:
    mem = ChipMemory(tmp_path, size=1 << 20)
    dma = mem.dma
    dma.bind(ASID)
    at = mem.put(np.zeros(16, np.int8))
    view = dma.read_array(at, np.int8, (16,))
    dma.invalidate(ASID + 1)
    assert dma.read_array(at, np.int8, (16,)) is view
    dma.invalidate(ASID)
    dma.bind(ASID)
    assert dma.read_array(at, np.int8, (16,)) is not view
