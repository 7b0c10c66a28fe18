"""How the chip opens a buffer object on its bus: a plain file, or the KMD's symlink to a
descriptor it holds, re-checked so that a descriptor number reused for another buffer
is never taken for the one that was released."""
import os

import pytest

from npu_hw import memory


def test_a_plain_file_and_a_link_both_open(tmp_path):
    memory.bo_path(tmp_path, 1).write_bytes(b"one")
    (tmp_path / "backing").write_bytes(b"two")
    os.symlink(tmp_path / "backing", memory.bo_path(tmp_path, 2))
    for bo_id, content in ((1, b"one"), (2, b"two")):
        fd = memory.open_bo(tmp_path, bo_id)
        try:
            assert os.pread(fd, 3, 0) == content
        finally:
            os.close(fd)


def test_a_missing_or_dangling_buffer_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        memory.open_bo(tmp_path, 3)
    os.symlink(tmp_path / "gone", memory.bo_path(tmp_path, 3))
    with pytest.raises(FileNotFoundError):
        memory.open_bo(tmp_path, 3)


def test_a_buffer_released_while_being_opened_is_not_opened(tmp_path, monkeypatch):
    """The KMD removes the link, then closes (and may reuse) the descriptor: a link gone
    after the target was opened means the target may be someone else's memory."""
    (tmp_path / "reused").write_bytes(b"another buffer's data")
    link = memory.bo_path(tmp_path, 4)
    os.symlink(tmp_path / "reused", link)
    real_open = os.open

    def open_then_release(path, flags, *args):
        fd = real_open(path, flags, *args)
        if os.fspath(path) == str(tmp_path / "reused"):
            link.unlink()                            # the KMD released bo4 meanwhile
        return fd
    monkeypatch.setattr(memory.os, "open", open_then_release)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        memory.open_bo(tmp_path, 4)
    assert len(os.listdir("/proc/self/fd")) == before   # the descriptor it opened was closed
