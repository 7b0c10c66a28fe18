"""The layer rules of docs/contributing.md ("The layer rules"), checked on every import statement."""
import ast
from pathlib import Path

import pytest

from tests.support.import_graph import import_circles

ROOT = Path(__file__).resolve().parents[1]
# What libnpu may use of the driver: its shared interface only - kmd_fuse.uapi (the ABI),
# kmd_fuse.uapi.sysfs_layout, kmd_fuse.uapi.usage_stats - which imports nothing else of kmd_fuse.
UAPI = ("kmd_fuse.uapi",)
# npu_hw (the hardware interface) is shared by all three: the driver programs it, the chip
# implements it, the compiler emits its descriptors; it imports none of them.
ALLOWED = {
    "libnpu": {"kmd_fuse": UAPI, "firmware_sim": ()},
    "kmd_fuse": {"libnpu": (), "firmware_sim": ()},
    "firmware_sim": {"libnpu": (), "kmd_fuse": ()},
    "npu_hw": {"libnpu": (), "kmd_fuse": (), "firmware_sim": ()},
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


TOOLS = "libnpu.tools"


def _tool_imports(path: Path):
    """Absolute and relative imports of ``path`` that name libnpu.tools or a module in it."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name == TOOLS or name.startswith(TOOLS + "."):
                yield node.lineno, name
                break


def test_the_library_never_imports_its_tools():
    """libnpu is what a program imports; the CLI, apps, benches and monitors (libnpu.tools) sit on top of it."""
    library = [p for p in sorted((ROOT / "libnpu").rglob("*.py")) if (ROOT / "libnpu" / "tools") not in p.parents]
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in library for line, name in _tool_imports(path)]
    assert not bad, "the library imports libnpu.tools:\n" + "\n".join(bad)
    assert (ROOT / "libnpu" / "tools" / "cli.py").is_file()


# Circles still in the product, each a sorted list of modules (none since issue 25); the test
# fails on any other circle and on any of these that no longer exists, so the list only shrinks.
KNOWN_CIRCLES: dict[str, list[str]] = {}


def test_no_import_circles():
    """Every module above what it uses: no two product modules import each other, directly
    or around a circle, counting imports inside functions and under ``if TYPE_CHECKING:``
    (tests/support/import_graph.py says what counts as an import and why)."""
    circles = import_circles()
    known = sorted(KNOWN_CIRCLES.values())
    new = [" <-> ".join(c) for c in circles if c not in known]
    gone = [name for name, c in KNOWN_CIRCLES.items() if c not in circles]
    assert not new, "import circles:\n" + "\n".join(new)
    assert not gone, f"circles gone, remove them from KNOWN_CIRCLES: {gone}"


def test_the_circle_finder_sees_lazy_and_type_checking_imports(tmp_path):
    """The finder counts an import inside a function, one under TYPE_CHECKING, relative
    imports and ``from package import module``; a one-way chain is no circle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for path, text in {
        "__init__.py": "",
        "a.py": "def f():\n    from . import b\n",                       # lazy, relative, module form
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "import pkg.a\n",                                    # closes a -> b -> c -> a
        "sub/d.py": "from ..a import f\nfrom .c import *\n",             # d -> a, d -> c: no way back
    }.items():
        (pkg / path).write_text(text)
    assert import_circles(tmp_path, ["pkg"]) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
