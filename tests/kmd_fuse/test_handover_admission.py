"""Who may use the buffer hand-over socket, and what a flood of refusals costs (issue 24,
findings 2 and 3): only users who may open the node get a connection, a connection that
presents no valid token is closed, strangers cannot take the connections root needs, and
refused messages leave the driver's log bounded (one line per uid per interval, with a
count of the rest; the file itself capped)."""
from __future__ import annotations

import errno
import os
import secrets
import signal
import socket

import pytest

import libnpu
from kmd_fuse import handover, paths, uapi
from libnpu.transport import BufferSocket
from tests.support.device import start_npu, stop_npu, wait_until
from tests.support.users import NOBODY, UserProcess, as_user

# uids that are nobody's on this machine: strangers to the node (not in its group)
STRANGERS = (NOBODY, 65533, 65532, 65531)


@pytest.fixture
def quiet_device(quiet_npu):
    """root's device on ``quiet_npu``: its first hand-over connection is made at its first
    alloc_mem, so a test can queue it behind other peers' connections."""
    with libnpu.initialize(quiet_npu.devroot) as session:
        yield session.open(0)


# ---- helpers (they run as root, or in a child as another user) ----

def socket_path(npu) -> str:
    return str(paths.handover_socket(npu.devroot, 0))


def connect(path: str) -> socket.socket:
    """A connection (connect blocks while the driver's backlog is full), reads time out after 30 s."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
    sock.settimeout(30)
    return sock


def reply_of(sock: socket.socket) -> int | None:
    """The result of the next reply, None at end of file; drops a descriptor that came with it."""
    try:
        message, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
    except ConnectionResetError:      # reported before a reply still queued (docs/abi.md): read that
        message, ancillary, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
    for _, _, data in ancillary:
        os.close(int.from_bytes(data[:4], "little"))
    return uapi.unpack_handover_reply(message)[0] if message else None


def send_and_read(path: str, message: bytes) -> tuple[int | None, int | None]:
    """On a new connection: the reply to ``message``, and what comes after it (None: the
    connection was closed)."""
    with connect(path) as sock:
        try:
            sock.send(message, socket.MSG_NOSIGNAL)
        except BrokenPipeError:
            pass                       # closed before it read anything: its reply says why
        first = reply_of(sock)
        return first, reply_of(sock)


def flood(path: str, count: int, message: bytes) -> dict[str, int]:
    """``count`` connections, each sending ``message``: how often each reply came
    ("connect EACCES": the kernel refused the connection itself)."""
    seen: dict[str, int] = {}
    for _ in range(count):
        try:
            first, _ = send_and_read(path, message)
            name = errno.errorcode.get(-first, str(first)) if first else str(first)
        except PermissionError:
            name = "connect EACCES"
        seen[name] = seen.get(name, 0) + 1
    return seen


def open_socket_to_all(npu) -> None:
    """Make the socket file connectable by anyone, as a rootless driver's stays when it
    cannot give it the node's owner: then only the driver's check at accept stands."""
    os.chmod(socket_path(npu), 0o666)


def mem_map(device, handle: int) -> int:
    req = uapi.new_payload(uapi.NPU_CMD_MEM_MAP)
    req.handle = handle
    return device.file.request(uapi.NPU_CMD_MEM_MAP, req).token


def stop_daemon_and_read_log(npu) -> str:
    """SIGTERM the daemon as `npu-kmd stop` does, wait for it to end (it logs what it
    still counts on the way out), and the log then (`npu-kmd stop` removes it)."""
    pid = int(paths.pid_file(npu.devroot, 0).read_text())
    os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=60)
    return paths.log_file(npu.devroot, 0).read_text()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def refusal_lines(log: str, uid: int) -> list[str]:
    return [line for line in log.splitlines()
            if f"refused uid {uid}:" in line or f"refusals of uid {uid} " in line
            or f"hand-over to uid {uid} refused" in line]          # the unbounded lines of old


def node_group(npu) -> int:
    return os.stat(npu.node).st_gid


# ---- finding 2: the log stays bounded ----

def test_a_flood_of_refused_messages_is_logged_once_per_uid_with_a_count(quiet_npu):
    path, n, member, stranger = socket_path(quiet_npu), 300, NOBODY, STRANGERS[1]
    assert flood(path, n, b"x") == {"EINVAL": n}                        # root: admitted, no valid token
    assert as_user(member, flood, path, n, b"x", groups=[node_group(quiet_npu)]) == {"EINVAL": n}
    assert as_user(stranger, flood, path, n, b"x") == {"connect EACCES": n}   # the kernel says no: no line
    open_socket_to_all(quiet_npu)
    assert as_user(stranger, flood, path, n, b"x") == {"EACCES": n}     # the driver says no, at accept
    log = stop_daemon_and_read_log(quiet_npu)
    for uid, reason in ((0, "request of 1 bytes"), (member, "request of 1 bytes"),
                        (stranger, "may not open the node")):
        lines = refusal_lines(log, uid)
        assert len(lines) == 2, "\n".join(lines[:5])
        assert reason in lines[0]                                       # the first, with why
        assert f"{n - 1} more refusals of uid {uid} " in lines[1]       # the rest, counted


def test_the_log_is_capped_even_when_every_refusal_is_logged(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_HANDOVER_LOG_INTERVAL_S", "0")              # no rate limit: a line each
    monkeypatch.setenv("NPU_LOG_MAX", "64K")
    npu = start_npu(tmp_path)
    try:
        log = paths.log_file(npu.devroot, 0)
        older = log.with_name(log.name + ".1")
        path, n = socket_path(npu), 1500                               # ~150 KB of lines
        assert flood(path, n, b"x") == {"EINVAL": n}
        sizes = log.stat().st_size, older.stat().st_size
        assert sum(sizes) <= (64 << 10) + 1024, sizes                   # the cap, give or take a line
        assert "refused uid 0: request of 1 bytes" in log.read_text().splitlines()[-1]   # the newest kept
        assert older.read_text().count("refused uid 0:") > 100
        assert send_and_read(path, b"y")[0] == -errno.EINVAL           # and the driver still serves
    finally:
        stop_npu(npu)


# ---- finding 3: admission ----

def test_the_socket_admits_only_users_who_may_open_the_node(quiet_npu, quiet_device):
    """The socket file follows the node (owner, group, access), so the kernel refuses a
    stranger at connect; where the file is open to all, the driver refuses it at accept
    (an unsolicited EACCES, then the end), logging one line for all of it."""
    path, group = socket_path(quiet_npu), node_group(quiet_npu)
    device = quiet_device
    token = mem_map(device, device.alloc_mem(4096).handle)
    request = uapi.pack_handover_request(token)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, group, 0o660)

    def stranger(path: str, token: int) -> dict:
        try:
            BufferSocket().receive(path, token)
            message = "handed over"
        except libnpu.NpuError as exc:
            message = str(exc)
        try:
            with connect(path) as sock:             # told why at once, then closed, without asking
                unasked = reply_of(sock), reply_of(sock)
        except PermissionError:
            unasked = "connect EACCES"
        try:
            asked = send_and_read(path, uapi.pack_handover_request(token))
        except PermissionError:
            asked = "connect EACCES"
        return {"unasked": unasked, "asked": asked, "libnpu": message}

    seen = as_user(NOBODY, stranger, path, token)
    assert seen["unasked"] == seen["asked"] == "connect EACCES"
    assert "EACCES" in seen["libnpu"] and "may not" in seen["libnpu"]
    open_socket_to_all(quiet_npu)
    seen = as_user(NOBODY, stranger, path, token)
    assert seen["unasked"] == seen["asked"] == (-errno.EACCES, None)
    assert "EACCES" in seen["libnpu"] and "may not" in seen["libnpu"]
    lines = refusal_lines(paths.log_file(quiet_npu.devroot, 0).read_text(), NOBODY)
    assert len(lines) == 1 and "may not open the node (mode 660" in lines[0]   # 3 refusals, one line
    # a member of the node's group is admitted (its token is someone else's: EPERM)
    assert as_user(NOBODY, send_and_read, path, request, groups=[group]) == (-errno.EPERM, None)
    # the node opened to all (chmod through the node, as a udev rule does): the socket follows
    os.chmod(quiet_npu.node, 0o666)
    try:
        assert os.stat(path).st_mode & 0o777 == 0o666
        assert as_user(STRANGERS[1], send_and_read, path, request) == (-errno.EPERM, None)
    finally:
        os.chmod(quiet_npu.node, 0o660)
    assert os.stat(path).st_mode & 0o777 == 0o660
    fd, size = device.buffer_socket.receive(str(path), token)              # the owner's token still good
    os.close(fd)
    assert size == 4096


def test_a_connection_that_presents_no_valid_token_is_closed(quiet_npu, quiet_device):
    path = socket_path(quiet_npu)
    device = quiet_device
    token = mem_map(device, device.alloc_mem(4096).handle)
    good = uapi.pack_handover_request(token)
    for bad in (uapi.pack_handover_request(secrets.randbits(64) | 1), good[:7], b"\xff" * 16,
                uapi.pack_handover_request(token, magic=1)):
        with connect(path) as sock:
            sock.send(bad)
            assert reply_of(sock) in (-errno.ENOENT, -errno.EINVAL)
            try:                                    # the good token on the same connection: no answer
                sock.send(good, socket.MSG_NOSIGNAL)
                assert reply_of(sock) is None
            except BrokenPipeError:
                pass
    # the token of another uid: EPERM, and closed too
    assert as_user(NOBODY, send_and_read, path, good, groups=[node_group(quiet_npu)]) == (-errno.EPERM, None)
    with connect(path) as sock:                     # none of that spent the token
        sock.send(good)
        assert reply_of(sock) == 0


def _hold(conn, path: str, count: int):
    """Hold ``count`` connections (as many as connect); when asked, say how many the driver
    has closed, with which reply."""
    held = []
    for _ in range(count):
        try:
            held.append(connect(path))
        except OSError:
            break
    conn.send(len(held))
    conn.recv()                                     # the test has acted meanwhile
    refused: dict[str, int] = {}
    for sock in held:
        sock.setblocking(False)
        try:
            result = reply_of(sock)
        except BlockingIOError:
            continue                                # still open: no reply, no end of file
        name = errno.errorcode.get(-result, str(result)) if result else str(result)
        refused[name] = refused.get(name, 0) + 1
    return refused


def test_strangers_holding_connections_do_not_stop_root_from_mapping(quiet_npu, quiet_device):
    """Four uids with no access to the node try to hold 64 connections each (the whole
    socket before): even with the socket file open to all, each is refused at accept,
    and root maps a buffer."""
    path = socket_path(quiet_npu)
    open_socket_to_all(quiet_npu)
    holders = [UserProcess(uid, _hold, path, 64) for uid in STRANGERS]
    try:
        assert [h.recv() for h in holders] == [64] * 4
        mem = quiet_device.alloc_mem(4096)     # its first connection queues behind all of theirs
        mem.view[:] = 5
        for h in holders:
            h.send("count")
        assert [h.recv() for h in holders] == [{"EACCES": 64}] * 4
    finally:
        for h in holders:
            h.close()


def test_members_of_the_group_cannot_take_the_connections_kept_for_root(quiet_npu, quiet_device):
    """Eight uids of the node's group hold all they may (32 each, 256 in all): they get the
    224 the group may take, the last 32 are refused (EBUSY), and root still maps."""
    path, group = socket_path(quiet_npu), node_group(quiet_npu)
    per_uid = handover.MAX_CONNECTIONS_PER_UID
    uids = [NOBODY - i for i in range(handover.MAX_CONNECTIONS // per_uid)]
    holders = [UserProcess(uid, _hold, path, per_uid, groups=[group]) for uid in uids]
    try:
        assert [h.recv() for h in holders] == [per_uid] * len(uids)
        quiet_device.alloc_mem(4096).view[:] = 5
        for h in holders:
            h.send("count")
        refused = [h.recv() for h in holders]
        assert sum(r.get("EBUSY", 0) for r in refused) == \
            handover.MAX_CONNECTIONS - handover.MAX_CONNECTIONS_BY_CLASS[handover.GROUP]
        assert all(set(r) <= {"EBUSY"} for r in refused), refused
    finally:
        for h in holders:
            h.close()


def test_connections_beyond_the_caps_are_refused_with_ebusy(quiet_npu, quiet_device):
    """A member of the node's group holds at most MAX_CONNECTIONS_PER_UID; root (not capped
    per uid) the whole socket; the next connection is refused with EBUSY and closed."""
    path, per_uid = socket_path(quiet_npu), handover.MAX_CONNECTIONS_PER_UID
    with UserProcess(NOBODY, _hold, path, per_uid + 1, groups=[node_group(quiet_npu)]) as member:
        assert member.recv() == per_uid + 1
        quiet_device.alloc_mem(4096)                # root's connection queues behind the member's
        member.send("count")
        assert member.recv() == {"EBUSY": 1}
    quiet_device.buffer_socket.close()
    held = [connect(path) for _ in range(handover.MAX_CONNECTIONS)]
    try:
        with connect(path) as extra:
            assert reply_of(extra) == -errno.EBUSY and reply_of(extra) is None
        for sock in held:                           # every one of root's held connections was kept
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(64)
    finally:
        for sock in held:
            sock.close()
    assert wait_until(lambda: _maps(quiet_device), timeout=60)     # once they are gone, root maps again


def _maps(device) -> bool:
    try:
        device.alloc_mem(4096)
        return True
    except libnpu.NpuError as exc:
        assert exc.errno == errno.EBUSY             # closed connections take a moment to leave the count
        return False
