"""The udev rules' MODE/OWNER/GROUP as the kernel enforces them (allow_other +
default_permissions) for a real other uid: 'nobody' with and without the group."""
import pytest

from tests.support.device import open_to_others
from tests.support.shell import NOBODY, attr_dir, kv, sh


@pytest.fixture(scope="module")
def shared(npu):
    open_to_others(npu.devroot)
    return npu


def test_node_has_the_rules_owner_group_and_mode(shared):
    assert sh('stat -c "%a %U %G" "$N"', N=str(shared.node)).stdout.split() == ["660", "root", "render"]


def test_a_user_outside_the_group_cannot_open_the_node(shared):
    # The venv's interpreter lives under /root (0700): the frame writer drops root's privileges itself.
    out = sh('"$PY" "$FRAME" --user nobody "$N" info', N=str(shared.node), check=False)
    assert (out.returncode, out.stdout.strip()) == (2, "ERROR=EACCES"), out.stderr
    out = sh('exec 3<>"$N"', uid=NOBODY, N=str(shared.node), check=False)
    assert out.returncode and "Permission denied" in out.stderr


def test_a_member_of_the_group_can_open_the_node(shared):
    out = sh('exec 3<>"$N"; id -u; id -Gn', uid=NOBODY, groups=("render",), N=str(shared.node))
    assert out.stdout.split() == [str(NOBODY), "nogroup", "render"]
    info = kv(sh('"$PY" "$FRAME" --user nobody --groups render "$N" info', N=str(shared.node)).stdout)
    assert info["MODEL"] == "npu-emu" and int(info["CONTEXT_ID"]) > 0


@pytest.mark.recovery
def test_anyone_reads_attributes_but_only_root_resets(shared):
    d = str(attr_dir(shared))
    before = sh('cat "$D/reset_count"', D=d).stdout
    out = sh('cat "$D/model" "$D/cores"', uid=NOBODY, D=d)
    assert out.stdout.split() == ["npu-emu", "2"]
    for attr, value in (("reset", "1"), ("uevent", "change")):
        out = sh(f'echo {value} > "$D/{attr}"', uid=NOBODY, D=d, check=False)
        assert out.returncode == 1 and "Permission denied" in out.stderr, attr
    assert sh('cat "$D/reset_count"', D=d).stdout == before
    out = sh('cat "$D/reset"', D=d, check=False)       # write-only, even for root
    assert out.returncode == 1 and "Permission denied" in out.stderr
    out = sh('echo 2 > "$D/reset"', D=d, check=False)   # only "1" resets
    assert out.returncode == 1 and "Invalid argument" in out.stderr
    out = sh('echo x > "$D/model"', D=d, check=False)
    assert out.returncode == 1 and "Permission denied" in out.stderr


@pytest.mark.recovery
def test_only_root_may_reset_through_the_node(shared):
    """RESET is root-only in the driver's command table: a member of the group gets EPERM."""
    before = sh('cat "$D/reset_count"', D=str(attr_dir(shared))).stdout
    out = sh('"$PY" "$FRAME" --user nobody --groups render "$N" reset', N=str(shared.node), check=False)
    assert (out.returncode, out.stdout.strip()) == (1, "ERROR=EPERM"), out.stderr
    assert sh('cat "$D/reset_count"', D=str(attr_dir(shared))).stdout == before
