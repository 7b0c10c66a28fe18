"""The layer rules of DESIGN.md, checked on every import statement."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What libnpu may use of the driver: its shared interface only - kmd_fuse.uapi (the ABI),
# kmd_fuse.uapi.sysfs_layout, kmd_fuse.uapi.usage_stats - which imports nothing else of kmd_fuse.
UAPI = ("kmd_fuse.uapi",)
ALLOWED = {
    "libnpu": {"kmd_fuse": UAPI, "firmware_sim": ("firmware_sim.spec",)},
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


def test_the_shared_interface_stands_alone():
    """kmd_fuse.uapi is what user space imports: it may not pull the rest of the driver in."""
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}"
           for path in sorted((ROOT / "kmd_fuse" / "uapi").rglob("*.py"))
           for line, name in imports(path)
           if name.split(".")[0] == "kmd_fuse" and not name.startswith("kmd_fuse.uapi")]
    assert not bad, "kmd_fuse.uapi imports the driver:\n" + "\n".join(bad)
    assert sorted(p.stem for p in (ROOT / "kmd_fuse" / "uapi").glob("*.py")) == [
        "__init__", "sysfs_layout", "usage_stats"]
