"""A device's presence for its daemon: its mounts, its uevents, and the udev rules applied
to each event in order by a trio task.

The helpers it uses are kmd_fuse.udev.hotplug's; this part is apart from them so that
``npu-kmd``, which uses them in every start and stop, imports no trio (see hotplug)."""
from __future__ import annotations

import errno
import logging
import math
import os
from pathlib import Path

import trio

from kmd_fuse import mounts, owner, paths
from kmd_fuse.mounts import MountError
from kmd_fuse.udev.hotplug import (
    apply_rules,
    device_event,
    foreign_mount,
    link_targets,
    make_link,
    mount_record,
    remove_links,
    remove_node_placeholder,
)
from kmd_fuse.udev.rules import RuleSet, UdevRulesError, load_rules
from kmd_fuse.udev.uevent import Uevent, UeventError, UeventLog

log = logging.getLogger("kmd_fuse.udev.hotplug")
SETTLE_TIMEOUT_S = 30.0


class Presence:
    """One device's mounts, uevents and udev handling, for its daemon."""

    def __init__(self, root: Path, sys_root: Path, index: int, rules: RuleSet | None = None):
        self.root, self.sys_root, self.index = root, sys_root, index
        self.events = UeventLog(paths.state_dir(root))
        self.rules = rules if rules is not None else load_rules()
        self._send, self._recv = trio.open_memory_channel(math.inf)
        self.emitted = self.applied = 0    # events sent / events the rules have been applied to

    # ---- mounts (blocking; run in a thread while the FUSE loop serves) ----
    def _mount(self) -> None:
        fuse = paths.fuse_dir(self.root, self.index)
        node, tree = paths.node_path(self.root, self.index), paths.device_dir(self.sys_root, self.index)
        taken = foreign_mount(self.root, self.sys_root, self.index)
        if taken is not None:
            raise MountError(errno.EBUSY, f"{taken}: give this devroot its own --sysroot")
        if owner.rootless():
            for link, target in link_targets(self.root, self.sys_root, self.index).items():
                make_link(link, target)
            return
        source, record = paths.mount_source(self.root, self.index), mount_record(self.root, self.index)
        with paths.opened_dir(self.root, hint="give a --devroot of your own") as dev:
            mounts.bind(fuse / node.name, dev, node.name, node, source, record)
        try:
            with paths.opened_dir(tree.parent, create_mode=0o755, hint="give another --sysroot") as parent:
                mounts.bind(fuse / "device", parent, tree.name, tree, source, record)
        except BaseException:
            record.unmount(only=(node, tree))
            raise

    def unmount(self) -> None:
        """Detach the node and tree bind mounts (blocking; a no-op when they are gone)."""
        node, tree = paths.node_path(self.root, self.index), paths.device_dir(self.sys_root, self.index)
        mount_record(self.root, self.index).unmount(only=(node, tree))
        remove_links(self.root, self.sys_root, self.index)
        remove_node_placeholder(node)
        try:
            with paths.opened_dir(tree.parent) as parent:
                os.rmdir(tree.name, dir_fd=parent)     # as the sysfs directory vanishes
        except OSError:
            pass

    # ---- the daemon's lifecycle ----
    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Apply the rules to each emitted event, in order, for the daemon's lifetime."""
        task_status.started()
        async for event in self._recv:
            try:
                await trio.to_thread.run_sync(apply_rules, self.rules, event, self.root, self.sys_root)
            except (UdevRulesError, OSError) as exc:
                log.error("udev rules on %s %s: %s", event.action, event.kernel, exc)
            self.applied += 1

    def emit(self, action: str, extra: dict[str, object] | None = None) -> Uevent | None:
        """Log a uevent now and queue the rules for it; None if the log refused it."""
        try:
            event = self.events.emit(**device_event(action, self.index, extra))
        except (UeventError, OSError) as exc:
            log.error("uevent %s npu%d not sent: %s", action, self.index, exc)
            return None
        self.emitted += 1
        self._send.send_nowait(event)
        return event

    async def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until the rules were applied to every event emitted so far (udevadm settle)."""
        target = self.emitted
        with trio.move_on_after(timeout):
            while self.applied < target:
                await trio.sleep(0.005)
        if self.applied < target:
            log.warning("udev rules still pending after %.0f s", timeout)

    async def add(self) -> None:
        """Bind-mount node and tree, send "add", apply the rules."""
        await trio.to_thread.run_sync(self._mount)
        self.emit("add")
        await self.settle()

    def after_reset(self, reset_count: int) -> None:
        """Device hook: a reset happened."""
        self.emit("change", {"RESET_COUNT": reset_count})

    async def remove(self) -> None:
        """Send "remove", undo the rules' links, unmount node and tree."""
        self.emit("remove")
        await self.settle()
        await trio.to_thread.run_sync(self.unmount)

    def close(self) -> None:
        self.events.close()
