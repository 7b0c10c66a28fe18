"""Every command in the README and docs/ runs as written.

Each fenced block of shell (```sh) or Python (```python) in README.md and docs/*.md runs
against a scratch device (``NPU_DEVROOT``), with the venv's commands first on the PATH, in
a scratch directory that sees the checkout's files (symbolic links) and takes what the
blocks write. A
block is left out only when the line before it says why:
``<!-- docs-test: not run: REASON -->`` (a synopsis, root only, minutes long, a fragment).
Other fences (C, text, pictures) are not commands.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!-- docs-test: not run: (\S.*?) -->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    kind: str              # "sh" or "python"
    text: str
    skip: str | None       # the reason it is not run

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    """The shell and Python blocks of the docs, with the reason for each one not run."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            kind = RUN.get(m.group(1))
            if kind is None:
                continue
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            reason = NOT_RUN.search(before)
            found.append(Block(path, text[:m.start()].count("\n") + 1, kind, m.group(2),
                               reason.group(1) if reason else None))
    return found


BLOCKS = blocks()


def test_the_docs_have_blocks_to_run_and_every_skip_says_why():
    assert len([b for b in BLOCKS if b.skip is None]) >= 8
    assert all(b.skip.strip() for b in BLOCKS if b.skip is not None)
    # a marker that is not right before a fence would silently skip nothing: none may stray
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "docs-test:" in line:
                assert NOT_RUN.search(line) and i + 1 < len(lines) and lines[i + 1].startswith("```"), \
                    f"{path.relative_to(ROOT)}:{i + 1}: a docs-test marker must say 'not run: REASON' " \
                    "on the line before a fence"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A scratch directory that sees the checkout's files (what the docs run from) but
    takes what the blocks write (``out/``, built programs)."""
    d = tmp_path_factory.mktemp("docs")
    for entry in ROOT.iterdir():
        if entry.name not in ("out", ".git"):
            (d / entry.name).symlink_to(entry)
    return d


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.skip is None], ids=lambda b: b.id)
def test_the_block_runs_as_written(block: Block, npu, workdir: Path) -> None:
    env = {**os.environ, "NPU_DEVROOT": str(npu.devroot),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}
    script = workdir / f"block_{block.line}.{'py' if block.kind == 'python' else 'sh'}"
    script.write_text(block.text)
    argv = [sys.executable, str(script)] if block.kind == "python" else ["bash", "-e", "-o", "pipefail", str(script)]
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{block.id} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n" \
                                 f"{done.stderr[-3000:]}"
