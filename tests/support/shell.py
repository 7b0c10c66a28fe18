"""Helpers for tests that drive the device with shell tools only: bash scripts run as
root or as another uid (setpriv), with $PY and $FRAME (the tiny frame writer) set."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRAME = Path(__file__).with_name("npu_frame.py")   # the tiny frame writer shell scripts call
NOBODY = 65534


def sh(script: str, *, uid: int | None = None, groups: tuple[str, ...] = (), check: bool = True,
       timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """Run a bash script; with `uid`, as that user (gid = uid) with only the given groups."""
    cmd = ["bash", "-euo", "pipefail", "-c", script]
    if uid is not None:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}",
               f"--groups={','.join(groups)}" if groups else "--clear-groups", *cmd]
    full_env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PY": sys.executable, "FRAME": str(FRAME),
                "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C", **env}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd="/")
    if check and done.returncode:
        raise AssertionError(f"script failed ({done.returncode}):\n{script}\nstdout:\n{done.stdout}\n"
                             f"stderr:\n{done.stderr}")
    return done


def kv(text: str) -> dict[str, str]:
    """KEY=VALUE lines (frame writer replies, uevent files) to a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


class Holder:
    """A frame-writer process holding a context open; ask it for 'info'/'stats' replies."""

    def __init__(self, node: Path, alloc: int = 0, uid: int | None = None):
        args = ["alloc", str(alloc), "hold"] if alloc else ["hold"]
        cmd = [sys.executable, str(FRAME), str(node), *args]
        if uid is not None:
            cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        first = self._reply()
        self.context_id, self.pid = int(first["CONTEXT_ID"]), int(first["PID"])

    def _reply(self) -> dict[str, str]:
        lines = []
        while (line := self.proc.stdout.readline()) not in (".\n", ""):
            lines.append(line)
        if not lines:
            raise AssertionError(f"holder exited with {self.proc.wait()}")
        return kv("".join(lines))

    def ask(self, what: str) -> dict[str, str]:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self.proc.stdout.close()


def attr_dir(npu, index: int = 0) -> Path:
    """Where the attribute tree of a conftest device is: the default sysroot next to its devroot."""
    return npu.devroot.parent / "sys" / "class" / "npu" / f"npu{index}"
