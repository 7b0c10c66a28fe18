"""Per-user limits: no one user of the node's group can take every context, every byte of
device memory or every buffer, and root always finds a context free.

Each limit has its own errno (docs/abi.md, "Limits"), and the driver's log says which
limit ran out for whom:

    EMFILE   the user has max_contexts_per_user contexts open
    ENFILE   the device has no context left (non-root users also leave root_contexts free)
    EDQUOT   the user's buffers would exceed max_memory_per_user bytes or max_buffers_per_user
    EMFILE   (QUEUE_CREATE) the context has max_queues_per_context user queues, or the user
             max_queues_per_user; ENOSPC: the chip's queue table is full
    ENOMEM   the device's memory is full (kmd_fuse.memory, unchanged)

The device's owner is never limited per user: root, and in rootless mode also the user
the driver runs as (``owner_uid``), who then gets root's reserved contexts too.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field

from kmd_fuse.errors import KmdError


@dataclass(frozen=True)
class Limits:
    """Set at `npu-kmd start`; 0 for a per-user limit means "the device's own size"."""

    max_contexts_per_user: int = 256
    root_contexts: int = 16
    max_memory_per_user: int = 0
    max_buffers_per_user: int = 4096
    max_queues_per_context: int = 2
    max_queues_per_user: int = 4


@dataclass
class _Usage:
    contexts: int = 0
    memory: int = 0
    buffers: int = 0
    queues: int = 0


@dataclass
class Quotas:
    """What each user holds on one device, checked against its Limits."""

    limits: Limits
    max_contexts: int              # contexts the device has in all
    memory_total: int              # the device's memory
    owner_uid: int = 0             # the driver's own user (rootless mode), unlimited like root
    users: dict[int, _Usage] = field(default_factory=dict)
    contexts: int = 0              # open, everyone's
    user_contexts: int = 0         # open, non-root users'

    def _limited(self, uid: int) -> bool:
        return uid not in (0, self.owner_uid)

    def _usage(self, uid: int) -> _Usage:
        usage = self.users.get(uid)
        if usage is None:
            usage = self.users[uid] = _Usage()
        return usage

    def _forget_if_idle(self, uid: int) -> None:
        if self.users.get(uid) == _Usage():
            del self.users[uid]

    def open_context(self, uid: int) -> None:
        """Count a context for ``uid``, or raise KmdError(EMFILE / ENFILE)."""
        usage = self._usage(uid)
        if self._limited(uid):
            if usage.contexts >= self.limits.max_contexts_per_user:
                self._forget_if_idle(uid)
                raise KmdError(errno.EMFILE, f"uid {uid} has {usage.contexts} contexts open, the most allowed "
                                             f"per user (npu-kmd start --max-contexts-per-user)")
            if self.user_contexts >= self.max_contexts - self.limits.root_contexts or \
                    self.contexts >= self.max_contexts:
                self._forget_if_idle(uid)
                raise KmdError(errno.ENFILE, f"users hold {self.user_contexts} contexts, all the device has for "
                                             f"them ({self.limits.root_contexts} are kept for root)")
        elif self.contexts >= self.max_contexts:
            raise KmdError(errno.ENFILE, f"all {self.max_contexts} contexts of the device are open")
        usage.contexts += 1
        self.contexts += 1
        self.user_contexts += self._limited(uid)

    def close_context(self, uid: int) -> None:
        self._usage(uid).contexts -= 1
        self.contexts -= 1
        self.user_contexts -= self._limited(uid)
        self._forget_if_idle(uid)

    def charge(self, uid: int, size: int) -> None:
        """Count a buffer of ``size`` bytes for ``uid``, or raise KmdError(EDQUOT)."""
        usage = self._usage(uid)
        if self._limited(uid):
            quota = self.limits.max_memory_per_user or self.memory_total
            if usage.memory + size > quota:
                raise KmdError(errno.EDQUOT, f"uid {uid} holds {usage.memory} bytes of device memory; {size} more "
                                             f"would pass its quota of {quota} (npu-kmd start --max-memory-per-user)")
            if usage.buffers >= self.limits.max_buffers_per_user:
                raise KmdError(errno.EDQUOT, f"uid {uid} holds {usage.buffers} buffers, the most allowed per user "
                                             f"(npu-kmd start --max-buffers-per-user)")
        usage.memory += size
        usage.buffers += 1

    def discharge(self, uid: int, size: int) -> None:
        usage = self._usage(uid)
        usage.memory -= size
        usage.buffers -= 1
        self._forget_if_idle(uid)

    def add_queue(self, uid: int, context_queues: int) -> None:
        """Count a user queue for ``uid`` (whose context holds ``context_queues``), or raise
        KmdError(EMFILE). The per-context bound holds for everyone, the owner included."""
        if context_queues >= self.limits.max_queues_per_context:
            raise KmdError(errno.EMFILE, f"the context has {context_queues} user queues, the most allowed "
                                         "(npu-kmd start --max-queues-per-context)")
        usage = self._usage(uid)
        if self._limited(uid) and usage.queues >= self.limits.max_queues_per_user:
            raise KmdError(errno.EMFILE, f"uid {uid} has {usage.queues} user queues, the most allowed per user "
                                         "(npu-kmd start --max-queues-per-user)")
        usage.queues += 1

    def remove_queue(self, uid: int) -> None:
        self._usage(uid).queues -= 1
        self._forget_if_idle(uid)
