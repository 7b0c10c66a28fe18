"""Buffer hand-over: a per-device Unix socket that trades MEM_MAP tokens for memfds.

FUSE cannot carry file descriptors, so MEM_MAP answers with a one-shot 64-bit
token bound to (context, buffer) and the path of this socket; the client sends
the token in a ``struct npu_handover_request`` and gets a ``struct
npu_handover_reply`` with the buffer's sealed memfd attached (SCM_RIGHTS), as DRM
hands out dma-buf descriptors.  The socket is SOCK_SEQPACKET, so a message is
always whole (no partial-read state, a short or long one is just EINVAL) and a
connection never loses its framing.

Who gets a descriptor: the peer's uid (SO_PEERCRED, taken at connect) must be
the uid that opened the context - root's too, no exceptions - and the token must
be outstanding.  A token is forgotten when used, when its buffer is freed, when
its context goes away, and when its context has more than TOKENS_PER_CONTEXT
outstanding (oldest first).  Errors: unknown or used token ENOENT, wrong peer uid
EPERM, malformed message EINVAL, too many connections EBUSY (then the daemon
closes the connection).

The server runs in the daemon's trio loop and never blocks it: every connection
is its own task, at most MAX_CONNECTIONS in all and MAX_CONNECTIONS_PER_UID per
uid, dropped after IDLE_TIMEOUT_S without a request ($NPU_HANDOVER_IDLE_S, for
tests) or when a reply cannot be sent within SEND_TIMEOUT_S.  Whatever a peer does ends at its own connection:
every handler catches everything.
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

log = logging.getLogger("kmd_fuse.handover")

TOKENS_PER_CONTEXT = 32
MAX_CONNECTIONS = 256           # within memory.FDS_RESERVED, with room to spare
MAX_CONNECTIONS_PER_UID = 64
IDLE_TIMEOUT_S = float(os.environ.get("NPU_HANDOVER_IDLE_S", "10"))
SEND_TIMEOUT_S = 2.0
_PEERCRED = struct.Struct("3i")    # struct ucred: pid, uid, gid
_SUN_PATH_MAX = 108                # sizeof(struct sockaddr_un.sun_path) on Linux


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
    """Serves one device's hand-over socket at ``path`` (mode 0666: connect needs write
    permission; who gets what is decided by SO_PEERCRED and the token)."""

    def __init__(self, path: Path, grants: Grants):
        check_socket_path(path)
        self.path, self.grants = path, grants
        self.connections = 0
        self._per_uid: collections.Counter[int] = collections.Counter()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; the socket file is removed on the way out."""
        listener = trio.socket.socket(pysocket.AF_UNIX, pysocket.SOCK_SEQPACKET | pysocket.SOCK_CLOEXEC)
        try:
            _remove_stale_socket(self.path)
            await listener.bind(os.fspath(self.path))
            os.chmod(self.path, 0o666)
            listener.listen(64)
            self.grants.socket_path = os.fsencode(self.path)
            log.info("buffer hand-over on %s", self.path)
            async with trio.open_nursery() as nursery:
                task_status.started()
                while True:
                    try:
                        conn, _ = await listener.accept()
                    except OSError as exc:        # EMFILE, ECONNABORTED...: back off, keep serving
                        log.warning("hand-over accept: %s", exc)
                        await trio.sleep(0.1)
                        continue
                    nursery.start_soon(self._serve, conn)
        finally:
            listener.close()
            self.grants.socket_path = b""
            try:
                os.unlink(self.path)
            except OSError:
                pass

    async def _serve(self, conn: trio.socket.SocketType) -> None:
        uid = -1
        try:
            with conn:
                _, uid, _ = _PEERCRED.unpack(conn.getsockopt(pysocket.SOL_SOCKET, pysocket.SO_PEERCRED,
                                                             _PEERCRED.size))
                if self.connections >= MAX_CONNECTIONS or self._per_uid[uid] >= MAX_CONNECTIONS_PER_UID:
                    log.warning("hand-over: refusing a connection of uid %d (%d open, %d of that uid)",
                                uid, self.connections, self._per_uid[uid])
                    with trio.move_on_after(SEND_TIMEOUT_S):
                        await conn.send(uapi.pack_handover_reply(-errno.EBUSY))
                    uid = -1
                    return
                self.connections += 1
                self._per_uid[uid] += 1
                await self._converse(conn, uid)
        except OSError as exc:                   # the peer went away mid-reply: its loss only
            log.debug("hand-over connection of uid %d: %s", uid, exc)
        except Exception:
            log.exception("hand-over connection of uid %d failed", uid)
        finally:
            if uid >= 0:
                self.connections -= 1
                self._per_uid[uid] -= 1
                if not self._per_uid[uid]:
                    del self._per_uid[uid]

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
            if sending.cancelled_caught:
                return

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
            log.info("hand-over to uid %d refused: %s", uid, exc.strerror)
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
