"""The map of the code (docs/contributing.md) names every product module as it is, and
every module stays within the size budget."""
from pathlib import Path

from tests.support.code_map import DOC, PACKAGES, ROOT, documented_map, product_modules, render, summarize

BUDGET_LINES = 700
# Modules allowed over the budget, each with its reason. An entry that fits the budget
# again fails the test, so the list only shrinks.
OVER_BUDGET = {
    "firmware_sim/kernels/native/int8_kernels.c":
        "the chip's C kernels: one translation unit, so the compiler inlines the shared "
        "requantization helpers into every kernel's inner loop",
}


def test_every_product_module_has_a_docstring():
    missing = [str(p) for p in product_modules() if not summarize(p)]
    assert not missing, "modules without a docstring (its first sentence is the map's row):\n" + "\n".join(missing)


def test_the_map_in_contributing_names_every_module_as_it_is():
    documented = documented_map(DOC.read_text())
    assert documented is not None, f"{DOC.name} has no generated module map"
    listed = {line.split("`")[1] for line in documented.splitlines() if line.startswith("| `")}
    actual = {p.as_posix() for p in product_modules()}
    assert not actual - listed, f"modules missing from {DOC.name} (python -m tests.support.code_map --write): " \
        f"{sorted(actual - listed)}"
    assert not listed - actual, f"{DOC.name} lists modules that are gone: {sorted(listed - actual)}"
    assert documented == render(), f"{DOC.name}'s module map is stale: python -m tests.support.code_map --write"


def _source_files() -> list[Path]:
    return sorted(p for package in PACKAGES for pattern in ("*.py", "*.c", "*.h")
                  for p in (ROOT / package).rglob(pattern))


def test_modules_stay_within_the_size_budget():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in _source_files()}
    over = {path: n for path, n in sizes.items() if n > BUDGET_LINES and path not in OVER_BUDGET}
    assert not over, f"modules over {BUDGET_LINES} lines (split them along their concerns): {over}"
    back = [path for path in OVER_BUDGET if sizes.get(path, 0) <= BUDGET_LINES]
    assert not back, f"within budget again or gone, remove from OVER_BUDGET: {back}"
