"""The DMA engine's translation cache never serves a stale mapping: a range translated
before is walked again as soon as one of its PTEs changes."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_sim.dma import IommuFault
from firmware_sim.spec import iommu, memory

from .chip_memory import ASID, BO, ChipMemory


def test_translations_follow_page_table_changes(tmp_path) -> None:
    mem = ChipMemory(tmp_path, size=1 << 20)
    table = np.memmap(memory.page_table_path(tmp_path, ASID), dtype=iommu.PTE_DTYPE, mode="r+",
                      shape=(iommu.PT_ENTRIES,))
    dma = mem.dma
    dma.bind(ASID)
    iova, nbytes = iommu.IOVA_BASE + 100, 3 * iommu.PAGE_SIZE   # spans four pages
    for _ in range(2):                                          # walked, then cached
        assert dma.translate(iova, nbytes, write=True) == [(BO, 100, nbytes)]
    # Remap the second page to page 40 of the same object: the range splits.
    table[1] = iommu.make_ptes(BO, 40, 1, True, True)[0]
    assert dma.translate(iova, nbytes, write=False) == [
        (BO, 100, iommu.PAGE_SIZE - 100), (BO, 40 * iommu.PAGE_SIZE, iommu.PAGE_SIZE),
        (BO, 2 * iommu.PAGE_SIZE, 2 * iommu.PAGE_SIZE - (iommu.PAGE_SIZE - 100))]
    # Read-only third page: writes fault, reads still work; unmapped: both fault.
    table[2] = iommu.make_ptes(BO, 2, 1, True, False)[0]
    with pytest.raises(IommuFault) as fault:
        dma.translate(iova, nbytes, write=True)
    assert fault.value.iova == iommu.IOVA_BASE + 2 * iommu.PAGE_SIZE
    assert len(dma.translate(iova, nbytes, write=False)) == 3
    table[2] = 0
    with pytest.raises(IommuFault, match="not mapped"):
        dma.translate(iova, nbytes, write=False)
    # Restored: the original single segment again.
    table[1:3] = iommu.make_ptes(BO, 1, 2, True, True)
    assert dma.translate(iova, nbytes, write=True) == [(BO, 100, nbytes)]
