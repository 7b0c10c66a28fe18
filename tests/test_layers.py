"""The layer rules of DESIGN.md, checked on every import statement."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "libnpu": {"kmd_fuse": ("kmd_fuse.uapi",), "firmware_sim": ("firmware_sim.spec",)},
    "kmd_fuse": {"libnpu": (), "firmware_sim": ("firmware_sim.spec",)},
    "firmware_sim": {"libnpu": (), "kmd_fuse": ()},
}


def imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:             # "from kmd_fuse import uapi" names a module too
                yield node.lineno, f"{node.module}.{alias.name}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_import_crosses_a_layer(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in imports(path):
            top = name.split(".")[0]
            rules = ALLOWED[package].get(top)
            if rules is None or name == top and isinstance(rules, tuple) and rules:
                continue  # own package, third party, or "import kmd_fuse" handled by its submodule names
            if not any(name == ok or name.startswith(ok + ".") for ok in rules):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, "imports across layers:\n" + "\n".join(bad)
