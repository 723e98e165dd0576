"""Specification of :mod:`recipelab.units`: the byte units, binary and exact, defined in one
place for every layer that prints or budgets memory."""

from __future__ import annotations

import ast
from pathlib import Path

import recipelab
from recipelab import units
from recipelab.units import GIB, KIB, MIB

SRC = Path(recipelab.__file__).parent
NAMES = ("KIB", "MIB", "GIB")


def module_level_assignments(path: Path) -> set[str]:
    """The names a module assigns at its top level: where a unit would be defined again."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_the_units_are_binary_powers_of_1024_not_decimal_powers_of_1000() -> None:
    assert (KIB, MIB, GIB) == (2**10, 2**20, 2**30)


def test_the_units_are_exact_integers_so_byte_counts_stay_integers() -> None:
    assert all(type(unit) is int for unit in (KIB, MIB, GIB))


def test_no_other_module_defines_a_unit_of_its_own() -> None:
    """The units are imported from here; a second definition is where two layers would
    start to disagree on what a gibibyte is."""
    elsewhere = sorted(f"{path.relative_to(SRC)}: {name}" for path in SRC.rglob("*.py")
                       if path.name != "units.py"
                       for name in module_level_assignments(path) & set(NAMES))
    assert elsewhere == []


def test_the_module_is_base_layer_importing_nothing() -> None:
    """Everything may import the units, so they import nothing: no cycle, no torch."""
    tree = ast.parse(Path(units.__file__).read_text())
    assert [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))] == []
