"""Per-user limits (issue 11, finding 9): one user of the node's group cannot take every
context or all device memory; each limit fails with its own errno; root keeps contexts."""
import errno
import textwrap

import pytest

from kmd_fuse.errors import KmdError
from kmd_fuse.limits import Limits, Quotas
from tests.support.device import open_to_others, start_npu, stop_npu
from tests.support.shell import REPO, sh

OTHER_USERS = (65534, 65533)
HOG = textwrap.dedent("""
    import errno, grp, os, sys
    from kmd_fuse import uapi
    from tests.support.npu_frame import request
    uid = int(sys.argv.pop(1))
    if uid:                       # drop root's privileges: that user, in the node's group
        os.setgroups([grp.getgrnam("render").gr_gid])
        os.setgid(uid)
        os.setuid(uid)
    fds = []
    try:
        while len(fds) < int(sys.argv[2]):
            fds.append(os.open(sys.argv[1], os.O_RDWR))
        print("opened", len(fds))
    except OSError as exc:
        print("opened", len(fds), errno.errorcode[exc.errno])
    for size in sys.argv[3:]:
        req = uapi.new_payload(uapi.NPU_CMD_MEM_ALLOC)
        req.size = int(size)
        result, _ = request(fds[0], uapi.NPU_CMD_MEM_ALLOC, req)
        print("alloc", size, errno.errorcode.get(-result, "OK"))
""")


@pytest.fixture(scope="module")
def limited_npu(tmp_path_factory):
    npu = start_npu(tmp_path_factory.mktemp("limits"), extra=("--max-contexts-per-user", "4",
                                                              "--max-memory-per-user", "8M"))
    open_to_others(npu.devroot)
    yield npu
    stop_npu(npu)


def hog(npu, uid: int, opens: int, *sizes: int) -> list[str]:
    """As ``uid`` (0: root), open the node ``opens`` times, then allocate ``sizes`` in the first context."""
    out = sh('"$PY" -c "$HOG" ' + " ".join(map(str, [uid, npu.node, opens, *sizes])), HOG=HOG,
             PYTHONPATH=str(REPO))
    return out.stdout.splitlines()


def test_a_user_gets_emfile_past_its_contexts_and_others_still_open(limited_npu):
    assert hog(limited_npu, OTHER_USERS[0], 10) == ["opened 4 EMFILE"]
    assert hog(limited_npu, OTHER_USERS[1], 4) == ["opened 4"]
    assert hog(limited_npu, 0, 10) == ["opened 10"]        # root is not limited per user


def test_device_memory_quota_per_user_is_edquot(limited_npu):
    lines = hog(limited_npu, OTHER_USERS[0], 1, 4 << 20, 4 << 20, 4096, 64 << 20)
    assert lines[1:] == [f"alloc {4 << 20} OK", f"alloc {4 << 20} OK", "alloc 4096 EDQUOT",
                         f"alloc {64 << 20} EDQUOT"]
    assert hog(limited_npu, 0, 1, 64 << 20)[1:] == [f"alloc {64 << 20} OK"]
    assert hog(limited_npu, OTHER_USERS[0], 1, 8 << 20)[1:] == [f"alloc {8 << 20} OK"]   # freed at close


def test_root_keeps_contexts_when_users_took_all_the_others():
    quotas = Quotas(Limits(max_contexts_per_user=100, root_contexts=2), max_contexts=10, memory_total=1 << 20)
    for uid in (1000, 1000, 1000, 1001, 1001, 1001, 1002, 1002):
        quotas.open_context(uid)
    with pytest.raises(KmdError) as refused:
        quotas.open_context(1003)
    assert refused.value.errno == errno.ENFILE and "kept for root" in refused.value.strerror
    quotas.open_context(0)
    quotas.open_context(0)
    with pytest.raises(KmdError) as full:
        quotas.open_context(0)
    assert full.value.errno == errno.ENFILE
    quotas.close_context(1000)
    quotas.open_context(1003)


def test_buffer_count_quota_is_edquot_and_released_on_discharge():
    quotas = Quotas(Limits(max_buffers_per_user=2), max_contexts=10, memory_total=1 << 20)
    quotas.charge(1000, 4096)
    quotas.charge(1000, 4096)
    with pytest.raises(KmdError) as refused:
        quotas.charge(1000, 4096)
    assert refused.value.errno == errno.EDQUOT and "buffers" in refused.value.strerror
    quotas.discharge(1000, 4096)
    quotas.charge(1000, 4096)
    for _ in range(5):
        quotas.charge(0, 4096)                                  # root is not limited per user


def test_libnpu_says_what_ran_out():
    from kmd_fuse.uapi import NpuError
    assert "quota" in str(NpuError(errno.EDQUOT, "MEM_ALLOC"))
    assert "kept for root" in str(NpuError(errno.ENFILE, "OPEN"))
    assert "--max-contexts-per-user" in str(NpuError(errno.EMFILE, "OPEN"))


def test_a_rootless_owner_is_limited_like_root():
    quotas = Quotas(Limits(max_contexts_per_user=1, root_contexts=2, max_buffers_per_user=1), max_contexts=4,
                    memory_total=1 << 20, owner_uid=1000)
    for _ in range(4):
        quotas.open_context(1000)          # past the per-user limit and into the reserve
    for _ in range(3):
        quotas.charge(1000, 4096)
    with pytest.raises(KmdError) as full:
        quotas.open_context(1001)
    assert full.value.errno == errno.ENFILE
