"""Running this checkout's code as another user (nobody, the rootless user) when the clone
is closed to them: root's clone under /root (mode 0700) or a ``mktemp -d`` folder.

Another user can read neither such a clone nor its venv. What they run is then staged where
they can read it: a copy of the repository's sources (``repo_for_others``) and of the
venv's packages that code imports (numpy, cffi...), under STAGE_ROOT (root's, mode 0755, as
the rootless venv there). A copy is refreshed file by file (each replaced atomically), so a
test reading it while another session refreshes it sees whole files. A machine where the
staged code still does not run as another user (an interpreter they cannot execute) skips
those tests, saying why.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.device import REPO

STAGE_ROOT = Path("/var/cache/npu-emu")
NOBODY = 65534
# What other users' code imports from the venv: these packages and the libraries they load.
STAGED_IMPORTS = ("libnpu", "kmd_fuse.uapi", "npu_hw.queues", "libnpu.capi.queue_native")
_SKIPPED_PARTS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def readable_by_others(path: Path) -> bool:
    """Whether users other than its owner may reach ``path`` (every directory on the way
    searchable by others) and read it."""
    path = path.resolve()
    for parent in path.parents:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def _key(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def _sync_file(source: Path, copy: Path) -> None:
    """``copy`` made to hold ``source`` (readable by all) unless it does: replaced atomically."""
    st = source.stat()
    try:
        have = copy.stat()
        if have.st_size == st.st_size and have.st_mtime_ns == st.st_mtime_ns:
            return
    except FileNotFoundError:
        pass
    temporary = copy.with_name(f".{copy.name}.staging")
    shutil.copy2(source, temporary)
    os.chmod(temporary, stat.S_IMODE(st.st_mode) | 0o444)
    os.replace(temporary, copy)


def _sync(src: Path, dst: Path) -> None:
    """Make ``dst`` hold the file or tree ``src`` (build and cache directories left out)."""
    if not src.is_dir():
        _sync_file(src, dst)
        return
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_PARTS and not d.endswith(".egg-info")]
        target = dst / Path(root).relative_to(src)
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        for name in files:
            _sync_file(Path(root, name), target / name)


def _staged(name: str, sources: dict[str, Path]) -> Path:
    """STAGE_ROOT/``name`` holding each of ``sources`` under its key (``""``: the directory
    itself), synced under a lock (parallel sessions take turns)."""
    STAGE_ROOT.mkdir(parents=True, exist_ok=True)
    STAGE_ROOT.chmod(0o755)
    stage = STAGE_ROOT / name
    with open(STAGE_ROOT / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stage.mkdir(mode=0o755, exist_ok=True)
        for key, source in sources.items():
            _sync(source, stage / key)
    return stage


@functools.cache
def repo_for_others() -> Path:
    """This checkout's sources where other users can read them: the clone itself when they
    may, else a copy staged for them (refreshed once per test session)."""
    return REPO if readable_by_others(REPO) else _staged(f"src-{_key(REPO)}", {"": REPO})


def _imported_site_packages() -> list[Path]:
    """The venv's entries (packages, modules, their .libs) that STAGED_IMPORTS load."""
    probe = textwrap.dedent(f"""
        import site, sys
        for name in {STAGED_IMPORTS!r}:
            __import__(name)
        roots = site.getsitepackages()
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None) or ""
            for root in roots:
                if path.startswith(root + "/"):
                    print(root + "/" + path[len(root) + 1:].split("/")[0])
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    entries = {Path(line) for line in done.stdout.split()}
    entries |= {Path(f"{entry}.libs") for entry in entries if Path(f"{entry}.libs").is_dir()}
    return sorted(entries)


@functools.cache
def _python_for_others() -> tuple[str, tuple[tuple[str, str], ...]] | str:
    """(interpreter, environment) for this checkout's code run as another user, or why not."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    if readable_by_others(REPO) and readable_by_others(Path(sys.prefix)):
        python, path = sys.executable, [str(REPO)]
    else:
        site = _staged(f"site-{_key(REPO)}", {entry.name: entry for entry in _imported_site_packages()})
        python, path = getattr(sys, "_base_executable", sys.executable), [str(repo_for_others()), str(site)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
                            "-c", "; ".join(f"import {name}" for name in STAGED_IMPORTS)],
                           capture_output=True, text=True, cwd="/", env=env, timeout=120)
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        return f"this checkout's code does not run as another user (staged from {REPO}): {last}"
    return python, tuple(env.items())


def python_for_others() -> tuple[str, dict[str, str]]:
    """The interpreter and environment (PATH, PYTHONPATH) with which another user runs this
    checkout's code (``setpriv ... PYTHON -c SCRIPT``); skips the test when there are none."""
    found = _python_for_others()
    if isinstance(found, str):
        pytest.skip(found)
    python, env = found
    return python, dict(env)
