"""Parts of the driver on their own: its background tasks and its MMU bookkeeping."""
import errno

import pytest
import trio
import trio.testing

from kmd_fuse.errors import KmdError
from kmd_fuse.mmu import AddressSpaces, IovaAllocator
from kmd_fuse.tasks import BackgroundTasks
from npu_hw import iommu


async def test_work_spawned_before_the_tasks_run_starts_when_they_do():
    tasks, ran = BackgroundTasks(), []

    async def record(value):
        ran.append(value)

    tasks.spawn(record, "early")             # a handler may spawn before the daemon's loop serves tasks
    async with trio.open_nursery() as nursery:
        await nursery.start(tasks.run)
        tasks.spawn(record, "late")
        await trio.testing.wait_all_tasks_blocked()
        assert ran == ["early", "late"]
        nursery.cancel_scope.cancel()


async def test_a_failing_task_is_logged_and_the_others_go_on(caplog):
    tasks, ran = BackgroundTasks(), []

    async def fail():
        raise RuntimeError("boom")

    async def record():
        ran.append(1)

    async with trio.open_nursery() as nursery:
        await nursery.start(tasks.run)
        tasks.spawn(fail)
        tasks.spawn(record)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert ran == [1] and "fail failed" in caplog.text


def test_iova_allocator_is_best_fit_and_merges_freed_ranges():
    iova = IovaAllocator(pages=16)
    a, b, c = iova.alloc(4), iova.alloc(4), iova.alloc(4)
    assert [a, b, c] == [iommu.IOVA_BASE + n * iommu.PAGE_SIZE for n in (0, 4, 8)]
    iova.free(a, 4)
    assert iova.alloc(2) == a                # the smallest free range that fits (4 pages, not 4+)
    iova.free(a, 2)
    iova.free(b, 4)                          # merges with [a, a + 4 pages)
    assert iova.alloc(8) == a
    with pytest.raises(KmdError) as exc:
        iova.alloc(5)
    assert exc.value.errno == errno.ENOMEM


def test_address_spaces_run_out_of_asids_with_emfile(tmp_path):
    spaces = AddressSpaces(tmp_path)
    made = [spaces.create() for _ in range(iommu.MAX_ASIDS - 1)]
    assert sorted(s.asid for s in made) == list(range(1, iommu.MAX_ASIDS))   # ASID 0 is the chip's
    with pytest.raises(KmdError) as exc:
        spaces.create()
    assert exc.value.errno == errno.EMFILE
    spaces.destroy(made[5])
    again = spaces.create()
    assert again.asid == made[5].asid and again.table.path.exists()
    for space in made[:5] + made[6:] + [again]:
        spaces.destroy(space)
    assert not list(tmp_path.iterdir())      # every page table file removed


def test_a_page_table_holds_the_chips_entries_for_each_mapping(tmp_path):
    """The driver writes the entries the chip decodes (spec.iommu.make_ptes), and
    unmapping clears exactly the buffer's pages."""
    import numpy as np

    spaces = AddressSpaces(tmp_path)
    space = spaces.create()
    table = space.table
    at = iommu.IOVA_BASE + 3 * iommu.PAGE_SIZE
    table.map(at, 9, 1000, readable=True, writable=False)
    table.map(at + 1000 * iommu.PAGE_SIZE, 10, 2, readable=True, writable=True)
    seen = np.fromfile(table.path, dtype=iommu.PTE_DTYPE)
    assert (seen[3:1003] == iommu.make_ptes(9, 0, 1000, True, False)).all()
    assert (seen[1003:1005] == iommu.make_ptes(10, 0, 2, True, True)).all()
    assert not seen[:3].any() and not seen[1005:].any()
    table.unmap(at, 1000)
    seen = np.fromfile(table.path, dtype=iommu.PTE_DTYPE)
    assert not seen[:1003].any() and (seen[1003:1005] == iommu.make_ptes(10, 0, 2, True, True)).all()
    spaces.destroy(space)
    assert not list(tmp_path.iterdir())
