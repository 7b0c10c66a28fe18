"""An unprivileged FUSE mount, done the way libfuse does it for a normal user.

/dev/fuse may be root's alone (mode 0600), and libfuse falls back to the setuid
fusermount3 only when mount(2) fails, not when /dev/fuse cannot be opened. So in rootless
mode the daemon asks fusermount3 itself: fusermount3 opens /dev/fuse, mounts it on the
mount point and hands the descriptor back over a socket (the _FUSE_COMMFD protocol);
libfuse then serves that descriptor when given "/dev/fd/N" as its mount point. Unmounting
is `fusermount3 -u` (kmd_fuse.mounts)."""
from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from pathlib import Path

FUSERMOUNT = "fusermount3"
FUSE_DEVICE = "/dev/fuse"


class FusermountError(OSError):
    """fusermount3 is missing or refused the mount (the message says why)."""


def mount(mountpoint: Path, options: set[str]) -> int:
    """Mount a FUSE file system on ``mountpoint`` through fusermount3; returns the /dev/fuse
    descriptor (the caller serves it: pass f"/dev/fd/{fd}" to pyfuse3.init)."""
    tool = shutil.which(FUSERMOUNT)
    if tool is None:
        raise FusermountError(errno.ENOENT, f"{FUSERMOUNT} is not installed: install the fuse3 package "
                                            "(a normal user mounts FUSE file systems through it)")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        proc = subprocess.run([tool, "-o", ",".join(sorted(options)), "--", str(mountpoint)],
                              env={**os.environ, "_FUSE_COMMFD": str(theirs.fileno())},
                              pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)
        if proc.returncode:
            hint = ""
            if not os.access(FUSE_DEVICE, os.R_OK | os.W_OK):
                hint = (f" ({FUSERMOUNT} opens {FUSE_DEVICE} as the calling user, and it is not open to "
                        f"this user: as root, `chmod 0666 {FUSE_DEVICE}`, the mode distributions ship)")
            raise FusermountError(errno.EPERM, f"{FUSERMOUNT} could not mount {mountpoint}: "
                                               f"{proc.stderr.strip() or 'exit status ' + str(proc.returncode)}{hint}")
        theirs.close()
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    if not fds:
        raise FusermountError(errno.EIO, f"{FUSERMOUNT} mounted {mountpoint} but sent no descriptor")
    return fds[0]
