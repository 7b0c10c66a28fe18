"""Who the device's owner is: root for a device in /dev, and in rootless mode (the driver
runs as a normal user on a devroot of their own) also that user. The owner may do what
only root may do in root mode: RESET, the `reset` and `uevent` attribute writes."""
from __future__ import annotations

import os


def rootless() -> bool:
    """True when the driver runs as a normal user (symlinks instead of bind mounts,
    fusermount3, no allow_other unless /etc/fuse.conf permits it)."""
    return os.geteuid() != 0


def is_owner(uid: int) -> bool:
    """May ``uid`` use the device's privileged operations? Root always; otherwise only
    the user the driver runs as (and never anyone when that user is root)."""
    return uid == 0 or uid == os.geteuid()


FUSE_CONF = "/etc/fuse.conf"


def user_allow_other(conf: str = FUSE_CONF) -> bool:
    """Does fuse.conf let a normal user mount with allow_other (a `user_allow_other` line)?"""
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in f)
    except OSError:
        return False


def may_allow_other(conf: str = FUSE_CONF) -> bool:
    """May this driver mount with allow_other (root, or a user fuse.conf allows)?"""
    return not rootless() or user_allow_other(conf)
