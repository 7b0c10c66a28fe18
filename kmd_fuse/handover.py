"""Buffer hand-over: a per-device Unix socket that trades MEM_MAP tokens for memfds.

FUSE cannot carry file descriptors, so MEM_MAP answers with a one-shot 64-bit
token bound to (context, buffer) and the path of this socket; the client sends
the token in a ``struct npu_handover_request`` and gets a ``struct
npu_handover_reply`` with the buffer's sealed memfd attached (SCM_RIGHTS), as DRM
hands out dma-buf descriptors.  The socket is SOCK_SEQPACKET, so a message is
always whole (no partial-read state, a short or long one is just EINVAL) and a
connection never loses its framing.

Who may connect: only a user who may open the node.  The socket file takes the node's
owner, group and access (``follow_node``), so the kernel refuses anyone else at connect
(EACCES) without waking the driver; and at accept the driver checks again
(``access_class``: the kernel's rule for the node's mode, owner and group, with the peer's
uid, gid and supplementary groups as SO_PEERCRED / SO_PEERGROUPS recorded them at
connect), for whatever the file's mode cannot say: a peer refused there gets an
unsolicited EACCES reply and the connection is closed at once.  Connections are capped
so that nobody can starve root and the node's owner (``MAX_CONNECTIONS_BY_CLASS``, EBUSY).

Who gets a descriptor: the peer's uid must be the uid that opened the context - root's
too, no exceptions - and the token must be outstanding.  A token is forgotten when
used, when its buffer is freed, when its context goes away, and when its context has
more than TOKENS_PER_CONTEXT outstanding (oldest first).  Errors: unknown or used token
ENOENT, wrong peer uid EPERM, malformed message EINVAL; after any error reply the daemon
closes the connection (a peer with no valid token has no reason to stay).

The server runs in the daemon's trio loop and never blocks it: every admitted
connection is its own task, dropped after IDLE_TIMEOUT_S without a request
($NPU_HANDOVER_IDLE_S, for tests) or when a reply cannot be sent within SEND_TIMEOUT_S;
a refusal costs a few system calls and no task.  Refusals are logged at most once per
peer uid per LOG_INTERVAL_S, with a count of the rest (``RefusalLog``), so a flood
cannot fill the log.  Whatever a peer does ends at its own connection: every handler
catches everything.
"""
from __future__ import annotations

import array
import collections
import errno
import logging
import os
import secrets
import socket as pysocket
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import trio

from kmd_fuse import uapi
from kmd_fuse.errors import KmdError

if TYPE_CHECKING:
    from kmd_fuse.mmu import AddressSpace


class Handable(Protocol):
    """What a token buys: a buffer object, or a user queue's eventfd (user_queues.HandedFd)."""

    fd: int              # the daemon's descriptor (the reply carries a dup)
    size: int            # bytes of the buffer (0 for an eventfd)
    freed: bool          # gone: the token is refused


class NodeAttributes(Protocol):
    """The device node's attributes as they are now (fuse_ops.DeviceFs; udev's rules set them)."""

    mode: int
    uid: int
    gid: int


log = logging.getLogger("kmd_fuse.handover")

TOKENS_PER_CONTEXT = 32
# Peers' classes, by the node's permission bits that admit them (access_class)
OWNER, GROUP, OTHER = 0, 1, 2
MAX_CONNECTIONS = 256           # within memory.FDS_RESERVED, with room to spare
# Connections open in all past which a new one of each class is refused: the last 32 are
# kept for root and the node's owner, the 32 before them for those and the node's group.
MAX_CONNECTIONS_BY_CLASS = {OWNER: MAX_CONNECTIONS, GROUP: MAX_CONNECTIONS - 32, OTHER: MAX_CONNECTIONS - 64}
MAX_CONNECTIONS_PER_UID = 32    # for every uid but root and the node's owner
IDLE_TIMEOUT_S = float(os.environ.get("NPU_HANDOVER_IDLE_S", "10"))
SEND_TIMEOUT_S = 2.0
LOG_INTERVAL_S = float(os.environ.get("NPU_HANDOVER_LOG_INTERVAL_S", "10"))   # tests shorten or lengthen it
ACCEPT_BATCH = 8                # connections taken per wake-up before the loop serves others
_PEERCRED = struct.Struct("3i")    # struct ucred: pid, uid, gid
# SO_PEERGROUPS (Linux 4.13): Python does not name it; 59 in asm-generic (x86, arm, riscv)
_SO_PEERGROUPS = getattr(pysocket, "SO_PEERGROUPS", 59)
_PEERGROUPS_BYTES = 1024           # CPython's getsockopt buffer limit: 256 groups
_SUN_PATH_MAX = 108                # sizeof(struct sockaddr_un.sun_path) on Linux


@dataclass(frozen=True)
class Peer:
    """A connected process's credentials, recorded by the kernel at connect, in the
    daemon's user namespace (an id not mapped there reads as the overflow id 65534)."""

    pid: int
    uid: int
    gid: int
    groups: frozenset[int]

    @classmethod
    def of(cls, sock: pysocket.socket) -> Peer:
        pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(pysocket.SOL_SOCKET, pysocket.SO_PEERCRED,
                                                         _PEERCRED.size))
        try:
            groups = frozenset(array.array("I", sock.getsockopt(pysocket.SOL_SOCKET, _SO_PEERGROUPS,
                                                                _PEERGROUPS_BYTES)))
        except OSError:       # ERANGE: over 256 groups; ENOPROTOOPT: an old kernel. The primary gid still counts
            groups = frozenset()
        return cls(pid, uid, gid, groups)


def access_class(peer: Peer, node: NodeAttributes, *, others_reach: bool, driver_uid: int) -> int | None:
    """OWNER, GROUP or OTHER when ``peer`` may open the node read-write, else None.

    The kernel's rule for the node (the FUSE mount has default_permissions): without
    allow_other (``others_reach`` False) only the driver's own user reaches the mount;
    root may (CAP_DAC_OVERRIDE); the node's owner by the owner bits, a member of its group
    (primary or supplementary) by the group bits, anyone else by the other bits."""
    if not others_reach and peer.uid != driver_uid:
        return None
    if peer.uid == 0:
        return OWNER
    if peer.uid == node.uid:
        bits, kind = node.mode >> 6, OWNER
    elif node.gid == peer.gid or node.gid in peer.groups:
        bits, kind = node.mode >> 3, GROUP
    else:
        bits, kind = node.mode, OTHER
    return kind if bits & 0o6 == 0o6 else None


@dataclass
class _Window:
    start: float          # when this uid's last refusal line was written
    unlogged: int = 0     # refusals since, not logged
    last: str = ""        # the last of them


class RefusalLog:
    """Refusals written to the log at most once per peer uid per ``interval`` seconds.

    The first refusal of a uid is logged with its reason; the ones after it within the
    interval are counted, and the count (with the last reason) is logged when the interval
    ends (``flush``, which the server calls every interval) or with the uid's next logged
    refusal.  Every refusal is thus accounted for, in one line per uid per interval.
    At most MAX_UIDS uids are tracked apart; refusals of further uids share one window."""

    MAX_UIDS = 1024
    MANY = -1             # the shared window's key

    def __init__(self, interval: float = LOG_INTERVAL_S) -> None:
        self.interval = interval
        self._windows: dict[int, _Window] = {}

    def refused(self, uid: int, reason: str) -> None:
        now = time.monotonic()
        if uid not in self._windows and len(self._windows) >= self.MAX_UIDS:
            self.flush()
            if len(self._windows) >= self.MAX_UIDS:
                uid = self.MANY
        window = self._windows.get(uid)
        if window is not None and now - window.start < self.interval:
            window.unlogged += 1
            window.last = reason
            return
        who = "a uid beyond those tracked" if uid == self.MANY else f"uid {uid}"
        earlier = f" (and {window.unlogged} earlier refusals of {who} not logged)" if window and window.unlogged else ""
        log.info("hand-over: refused %s: %s%s", who, reason, earlier)
        self._windows[uid] = _Window(now)

    @property
    def pending(self) -> bool:
        """Whether a window is open (a later flush may have a count to log or a uid to forget)."""
        return bool(self._windows)

    def flush(self, everything: bool = False) -> None:
        """Log the counts of the windows that ended (all of them if ``everything``); forget idle uids."""
        now = time.monotonic()
        for uid, window in list(self._windows.items()):
            if not everything and now - window.start < self.interval:
                continue
            if window.unlogged:
                who = "uids beyond those tracked" if uid == self.MANY else f"uid {uid}"
                log.info("hand-over: %d more refusals of %s in the last %.0f s, not logged one by one "
                         "(the last: %s)", window.unlogged, who, now - window.start, window.last)
                window.start, window.unlogged = now, 0      # this line opens the next interval
            if everything or not window.unlogged and now - window.start >= self.interval:
                del self._windows[uid]


class Grants:
    """Outstanding hand-over tokens: token -> (address space, owner uid, buffer).

    Kept per address space (one per context) by DeviceMemory, which forgets a buffer's
    tokens when it releases the buffer and a context's when it destroys its space; a
    buffer freed while a job still holds it is refused at redemption (``bo.freed``)."""

    def __init__(self) -> None:
        self._owner: dict[int, AddressSpace] = {}
        # per address space, oldest first: token -> (uid, buffer)
        self._by_space: dict[AddressSpace, collections.OrderedDict[int, tuple[int, Handable]]] = {}
        self.socket_path = b""             # set once the server listens (MEM_MAP's reply carries it)

    def issue(self, space: AddressSpace, uid: int, bo: Handable) -> int:
        """A fresh one-shot token for ``bo`` of the context whose address space is ``space``."""
        token = secrets.randbits(64)
        while token == 0 or token in self._owner:
            token = secrets.randbits(64)
        grants = self._by_space.setdefault(space, collections.OrderedDict())
        grants[token] = (uid, bo)
        self._owner[token] = space
        while len(grants) > TOKENS_PER_CONTEXT:
            oldest, _ = grants.popitem(last=False)
            del self._owner[oldest]
        return token

    def redeem(self, token: int, peer_uid: int) -> Handable:
        """The buffer a token buys, forgetting the token; KmdError ENOENT / EPERM otherwise.

        A token presented by the wrong uid stays valid for its owner."""
        space = self._owner.get(token)
        if space is None:
            raise KmdError(errno.ENOENT, "unknown or already used token")
        uid, bo = self._by_space[space][token]
        if peer_uid != uid:
            raise KmdError(errno.EPERM, f"token belongs to uid {uid}'s context, peer is uid {peer_uid}")
        del self._owner[token], self._by_space[space][token]
        if bo.freed:
            raise KmdError(errno.ENOENT, "the token's buffer was freed")
        return bo

    def forget_buffer(self, space: AddressSpace, bo: Handable) -> None:
        grants = self._by_space.get(space)
        if grants:
            for token in [t for t, (_, held) in grants.items() if held is bo]:
                del grants[token], self._owner[token]

    def forget_space(self, space: AddressSpace) -> None:
        for token in self._by_space.pop(space, {}):
            del self._owner[token]

    def __len__(self) -> int:
        return len(self._owner)


class HandoverServer:
    """Serves one device's hand-over socket at ``path``: who may connect is decided by the
    socket file's mode (``follow_node``) and again at accept by the peer's credentials
    against ``node``; who gets what by SO_PEERCRED and the token.  ``others_reach``: the
    node's mount has allow_other (otherwise only the driver's own user reaches the node)."""

    def __init__(self, path: Path, grants: Grants, node: NodeAttributes, *, others_reach: bool = True):
        check_socket_path(path)
        self.path, self.grants, self.node = path, grants, node
        self.others_reach = others_reach
        self.driver_uid = os.geteuid()
        self.connections = 0
        self._per_uid: collections.Counter[int] = collections.Counter()
        self.refusals = RefusalLog()
        self._refused = trio.Event()      # set at each refusal: the flusher's timer runs again

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; the socket file is removed on the way out."""
        # A plain non-blocking socket, not trio's: a wake-up takes every pending connection
        # (up to ACCEPT_BATCH) and a refused one never becomes a task.
        listener = pysocket.socket(pysocket.AF_UNIX,
                                   pysocket.SOCK_SEQPACKET | pysocket.SOCK_CLOEXEC | pysocket.SOCK_NONBLOCK)
        try:
            _remove_stale_socket(self.path)
            listener.bind(os.fspath(self.path))
            self.follow_node()
            listener.listen(64)
            self.grants.socket_path = os.fsencode(self.path)
            log.info("buffer hand-over on %s", self.path)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._flush_refusals)
                task_status.started()
                while True:
                    await trio.lowlevel.wait_readable(listener)
                    for _ in range(ACCEPT_BATCH):
                        try:
                            conn, _ = listener.accept()
                        except BlockingIOError:
                            break
                        except OSError as exc:    # EMFILE, ECONNABORTED...: back off, keep serving
                            log.warning("hand-over accept: %s", exc)
                            await trio.sleep(0.1)
                            break
                        uid = self._admit(conn)
                        if uid is not None and not self._answer_at_once(conn, uid):
                            nursery.start_soon(self._serve, trio.socket.from_stdlib_socket(conn), uid)
        finally:
            listener.close()
            self.refusals.flush(everything=True)
            self.grants.socket_path = b""
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def follow_node(self) -> None:
        """Give the socket file the node's owner and group, and write access for each class
        that may open the node read-write (``access_class``'s rule in the file's bits): the
        kernel then refuses everyone else at connect (EACCES), at no cost to the driver.
        Called at listen and after every chmod/chown of the node. Where the file cannot
        take the node's owner (a rootless driver, a node given to another user), it stays
        open to all (0666) and the check at accept alone decides."""
        mode = 0
        for shift in (6, 3, 0):
            if (self.node.mode >> shift) & 0o6 == 0o6:
                mode |= 0o6 << shift
        if not self.others_reach:
            mode &= 0o600
        try:
            try:
                os.chown(self.path, self.node.uid, self.node.gid)
            except FileNotFoundError:
                raise
            except OSError as exc:    # EPERM: not ours to give away; EINVAL: an id this namespace lacks
                log.warning("hand-over: %s cannot take the node's owner %d and group %d (%s): open to all, "
                            "admission checked at accept only", self.path, self.node.uid, self.node.gid,
                            exc.strerror)
                mode = 0o666
            os.chmod(self.path, mode)
        except FileNotFoundError:
            pass                      # not listening (yet, or any more)

    async def _flush_refusals(self) -> None:
        """Flush every interval while refusals are counted; sleep without a timer otherwise."""
        while True:
            if not self.refusals.pending:
                self._refused = trio.Event()
                await self._refused.wait()
            await trio.sleep(max(self.refusals.interval, 1.0))    # 0 (log every refusal): nothing to flush
            self.refusals.flush()

    def _admit(self, conn: pysocket.socket) -> int | None:
        """The peer's uid, counted in, if it may hold a connection; otherwise the
        connection is refused (EACCES or EBUSY) and closed, and None."""
        try:
            peer = Peer.of(conn)
        except OSError as exc:            # the peer is gone already
            log.debug("hand-over: no credentials: %s", exc)
            conn.close()
            return None
        kind = access_class(peer, self.node, others_reach=self.others_reach, driver_uid=self.driver_uid)
        if kind is None:
            reason = "may not open the node" if self.others_reach else "the node's mount has no allow_other"
            self._refuse(conn, peer.uid, errno.EACCES, f"{reason} (mode {self.node.mode:o}, owner "
                                                       f"{self.node.uid}, group {self.node.gid})")
            return None
        held = self._per_uid[peer.uid]
        if self.connections >= MAX_CONNECTIONS_BY_CLASS[kind] or (kind != OWNER and held >= MAX_CONNECTIONS_PER_UID):
            self._refuse(conn, peer.uid, errno.EBUSY, f"too many connections ({self.connections} open, "
                                                      f"{held} of that uid)")
            return None
        self.connections += 1
        self._per_uid[peer.uid] += 1
        return peer.uid

    def _answer_at_once(self, conn: pysocket.socket, uid: int) -> bool:
        """Answer the request that came with the connection, if one did, before it costs a
        task; True when that ended the connection (an error reply, or the peer left), so a
        peer with no valid token never gets a task. A good token's descriptor goes at once
        (a new connection's buffer has room) and the connection is kept for the next."""
        try:
            message = conn.recv(uapi.HANDOVER_REQUEST.size + 1, pysocket.MSG_DONTWAIT)
        except BlockingIOError:
            return False                  # nothing sent yet: the connection's task waits for it
        except OSError:
            message = b""
        fd = -1
        try:
            if message:
                reply, fd = self.answer(message, uid)
                ancillary = [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS, array.array("i", [fd]))] if fd >= 0 else []
                conn.sendmsg([reply], ancillary, pysocket.MSG_DONTWAIT | pysocket.MSG_NOSIGNAL)
                if fd >= 0:
                    return False
        except OSError:
            pass                          # the peer is gone, or its buffer full: it ends here
        finally:
            if fd >= 0:
                os.close(fd)
        self._release(uid)
        conn.close()
        return True

    def _release(self, uid: int) -> None:
        self.connections -= 1
        self._per_uid[uid] -= 1
        if not self._per_uid[uid]:
            del self._per_uid[uid]

    def _refuse(self, conn: pysocket.socket, uid: int, err: int, reason: str) -> None:
        """Tell the peer why (an unsolicited reply), then close: nothing here waits."""
        self.refusals.refused(uid, reason)
        self._refused.set()
        try:
            conn.send(uapi.pack_handover_reply(-err), pysocket.MSG_DONTWAIT | pysocket.MSG_NOSIGNAL)
            # take what the peer sent already: closing on unread data would make its next
            # read fail with ECONNRESET before it could read the reply
            for _ in range(4):
                conn.recv(uapi.HANDOVER_REQUEST.size + 1, pysocket.MSG_DONTWAIT)
        except OSError:
            pass                          # nothing (more) to read, or the peer is gone
        conn.close()

    async def _serve(self, conn: trio.socket.SocketType, uid: int) -> None:
        try:
            with conn:
                await self._converse(conn, uid)
        except OSError as exc:                   # the peer went away mid-reply: its loss only
            log.debug("hand-over connection of uid %d: %s", uid, exc)
        except Exception:
            log.exception("hand-over connection of uid %d failed", uid)
        finally:
            self._release(uid)

    async def _converse(self, conn: trio.socket.SocketType, uid: int) -> None:
        # recv() takes no ancillary data: descriptors a peer sends are closed by the
        # kernel, never installed in the daemon
        while True:
            message = None
            with trio.move_on_after(IDLE_TIMEOUT_S):
                # one byte more than a request, so a longer message shows as too long
                message = await conn.recv(uapi.HANDOVER_REQUEST.size + 1)
            if not message:
                return          # idle for too long (None), or the peer closed (b"")
            reply, fd = self.answer(message, uid)
            try:
                with trio.move_on_after(SEND_TIMEOUT_S) as sending:
                    if fd >= 0:
                        await conn.sendmsg([reply], [(pysocket.SOL_SOCKET, pysocket.SCM_RIGHTS,
                                                      array.array("i", [fd]))])
                    else:
                        await conn.send(reply)
            finally:
                if fd >= 0:
                    os.close(fd)
            if sending.cancelled_caught or fd < 0:
                return          # an error reply ends the connection: no token, no reason to stay

    def answer(self, message: bytes, uid: int) -> tuple[bytes, int]:
        """(reply, descriptor to attach or -1) for one request message from a peer of ``uid``.

        The descriptor is a dup made now, so a buffer freed while the reply waits
        for room in the socket can never have its fd number reused under us."""
        try:
            if len(message) != uapi.HANDOVER_REQUEST.size:
                raise KmdError(errno.EINVAL, f"request of {len(message)} bytes, expected "
                                             f"{uapi.HANDOVER_REQUEST.size}")
            magic, reserved, token = uapi.HANDOVER_REQUEST.unpack(message)
            if magic != uapi.NPU_HANDOVER_MAGIC or reserved:
                raise KmdError(errno.EINVAL, f"bad magic {magic:#x} or non-zero reserved field")
            bo = self.grants.redeem(token, uid)
            return uapi.pack_handover_reply(0, bo.size), os.dup(bo.fd)
        except KmdError as exc:
            self.refusals.refused(uid, exc.strerror)
            self._refused.set()
            return uapi.pack_handover_reply(-exc.errno), -1
        except OSError as exc:                   # dup: out of descriptors
            log.warning("hand-over to uid %d failed: %s", uid, exc)
            return uapi.pack_handover_reply(-(exc.errno or errno.EIO)), -1


def check_socket_path(path: Path) -> None:
    """OSError(ENAMETOOLONG) unless ``path`` fits in a Unix socket address."""
    if len(os.fsencode(path)) >= _SUN_PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, f"hand-over socket path {path} is longer than a Unix socket "
                                          f"address takes ({_SUN_PATH_MAX - 1} bytes): shorten NPU_SHM_ROOT")


def _remove_stale_socket(path: Path) -> None:
    """A socket left by a daemon that died is replaced; anything else there is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
    os.unlink(path)
