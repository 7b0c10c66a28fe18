"""What running the udev rules on one event decided, and the errors of the rule engine.

The bottom of the engine: ``rules`` (parse, evaluate) produces an ``Outcome``,
``apply`` carries one out on the device node; both import this, neither the other's
internals.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from kmd_fuse.udev.uevent import Uevent


class UdevRulesError(Exception):
    """Base of every error the rule engine (rules, apply) raises."""


@dataclass
class Outcome:
    """The result of running the rules on one event (what `udevadm test` reports)."""

    event: Uevent
    devroot: str
    mode: int
    owner: str
    group: str
    symlinks: list[str]
    properties: dict[str, str]
    matched: list = field(default_factory=list)           # the rules.Rule objects that matched
    trace: list[str] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # key -> "file:line" that set it

    @property
    def devnode(self) -> str | None:
        """Absolute path of the device node, or None for a device without one."""
        return os.path.join(self.devroot, self.event.devname) if self.event.devname else None
