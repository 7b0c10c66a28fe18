"""Containers for tests without images (none can be pulled here): podman + runc started
on a root filesystem built from the host's own, read-only (``/usr``, the Python the venv
was made from, the repository with its venv), the device given by a CDI spec.

podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi: a test's spec goes to
/var/run/cdi under a kind of its own (two specs of one kind naming the same device
conflict) and is removed at the end. crun, podman's default, fails on this kind of VM's
cgroups; runc works. The process limits are given explicitly: podman would otherwise ask
for a million open files, which a root without CAP_SYS_RESOURCE cannot grant (runc:
"error setting rlimit type 7: operation not permitted"; the host's own hard limits were
refused too here, 1024 is granted).
"""
from __future__ import annotations

import contextlib
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.device import REPO, detach_mounts_under

CDI_DIR = Path("/var/run/cdi")
LIMIT = 1024          # open files and processes of the container (the host's, were they fewer)


def podman_missing() -> str | None:
    """Why containers cannot run here (None if they can)."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed (scripts/install-containers)" if missing else None


@contextlib.contextmanager
def cdi_kind_installed(devroot: Path) -> Iterator[str]:
    """Write the devroot's CDI spec into /var/run/cdi under a fresh kind; that kind."""
    kind = f"npu-emu.io/test-{secrets.token_hex(4)}"
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    spec = CDI_DIR / f"{kind.replace('/', '_')}.json"
    subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "cdi", "--devroot", str(devroot), "--kind", kind,
                    "-o", str(spec)], check=True, capture_output=True, timeout=120)
    try:
        yield kind
    finally:
        spec.unlink(missing_ok=True)


def host_rootfs(where: Path) -> Path:
    """An empty root with the mount points and links a program of the host needs (no
    image: podman's storage driver is vfs, which mounts nothing a late clean-up could leave)."""
    root = where / "rootfs"
    for directory in ("usr", "etc", "tmp", "proc", "sys", "dev", "run"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        if Path("/", link).is_symlink():                 # merged /usr: /lib -> usr/lib
            (root / link).symlink_to(f"usr/{link}")
    for name in ("passwd", "group", "ld.so.cache"):
        shutil.copy(Path("/etc", name), root / "etc" / name)
    return root


def read_only_mounts() -> list[Path]:
    """What a program of the repository's venv reads: /usr, the base Python, the repository."""
    mounts = [Path("/usr"), REPO]
    base = Path(sys.base_prefix)
    if not base.is_relative_to("/usr"):
        mounts.append(base)
    return mounts


def podman_run(devices: list[str], command: list[str], *, volumes: tuple[str, ...] = (),
               timeout: float = 300) -> subprocess.CompletedProcess:
    """``podman run --rm`` of ``command`` with CDI ``devices``, on a host-built root in a
    directory of its own (podman's storage there too: its run root must be a short path),
    removed after with every mount under it."""
    where = Path(tempfile.mkdtemp(prefix="npu-podman-"))
    root = host_rootfs(where)
    nofile = min(LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    nproc = min(LIMIT, resource.getrlimit(resource.RLIMIT_NPROC)[1])
    args = ["podman", "--root", str(where / "storage"), "--runroot", str(where / "run"), "--runtime", "runc",
            "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
            "run", "--rm", "--network", "none",
            "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}",
            "-e", "NPU_CACHE_DIR=/tmp/npu-cache"]
    for path in read_only_mounts():
        (root / path.relative_to("/")).mkdir(parents=True, exist_ok=True)
        args += ["-v", f"{path}:{path}:ro"]
    for volume in volumes:
        args += ["-v", volume]
    for device in devices:
        args += ["--device", device]
    try:
        # --rootfs takes the first argument as the root: every option comes before it
        return subprocess.run([*args, "--rootfs", str(root), *command], capture_output=True, text=True,
                              timeout=timeout)
    finally:
        detach_mounts_under(where)
        shutil.rmtree(where, ignore_errors=True)
