"""The product's import graph, read from the source with ``ast``, and its circles.

Every import statement counts wherever it sits: at module level, inside a function (a lazy
import still makes the two modules depend on each other, it only hides the circle from the
interpreter) and inside ``if TYPE_CHECKING:`` (a type-only import is still a dependency a
reader follows; a circle through it is a circle in the design, see issue 25).

An edge goes to the module an import names: ``import a.b`` and ``from a import b`` (when
``a/b.py`` or ``a/b/`` exists) give ``a.b``; ``from a.b import name`` gives ``a.b``; relative
imports are resolved against the importing module's package. A package stands for its
``__init__.py``. The implicit import of parent packages (``a`` before ``a.b``) is not an
edge: it would put every package's ``__init__`` into a circle with whatever it re-exports.
Imports through ``importlib`` (the compiler's lazy ``__init__`` exports, the operator
registries loading their plug-in modules) are not statements and are not seen.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("kmd_fuse", "firmware_sim", "libnpu", "npu_hw")


def module_name(path: Path, root: Path = ROOT) -> str:
    """``libnpu/compiler/lower.py`` -> ``libnpu.compiler.lower``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules(root: Path = ROOT, packages: Iterable[str] = PRODUCT) -> dict[str, Path]:
    """Every module of the product packages, by dotted name."""
    return {module_name(path, root): path
            for package in packages for path in sorted((root / package).rglob("*.py"))}


def imported_modules(path: Path, module: str, modules: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line, product module) for every import statement in ``path``, at any depth, relative
    imports resolved: ``from a import b`` names ``a.b`` when that is a module, else ``a``;
    ``import a.b.c`` the deepest of ``a.b.c``, ``a.b``, ``a`` that is a product module."""
    known = set(modules)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def deepest(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [deepest(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = ".".join(filter(None, (base if node.level else "", node.module)))
            names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else deepest(source)
                     for alias in node.names]
        else:
            continue
        for name in names:
            if name and name != module:
                yield node.lineno, name


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the product modules it imports (by any statement, at any depth)."""
    return {name: {target for _, target in imported_modules(path, name, modules)}
            for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components; only those of more than one module (the circles),
    each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def import_circles(root: Path = ROOT, packages: Iterable[str] = PRODUCT) -> list[list[str]]:
    """The product's import circles: each a sorted list of the modules that import one another."""
    return strongly_connected(import_graph(product_modules(root, packages)))
