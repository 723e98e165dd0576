"""The tests mirror the package: each module ``src/recipelab/P/M.py`` has its specification in
``tests/P/test_M.py``, so a reader finds a module's promises where its name says, and a new
module comes with its test file."""

from __future__ import annotations

from pathlib import Path

import recipelab

SRC = Path(recipelab.__file__).parent
TESTS = Path(__file__).parent


def modules_without_their_test() -> set[str]:
    found = set()
    for module in SRC.rglob("*.py"):
        if module.name in ("__init__.py", "__main__.py"):
            continue
        where = module.relative_to(SRC)
        if not (TESTS / where.parent / f"test_{module.stem}.py").exists():
            found.add(where.as_posix())
    return found


def test_every_module_has_its_test_file() -> None:
    assert modules_without_their_test() == set()


def test_every_test_package_mirrors_a_package() -> None:
    """A test folder is named for the package it specifies, so a moved package takes its
    tests along."""
    orphans = {folder.relative_to(TESTS).as_posix() for folder in TESTS.rglob("*")
               if folder.is_dir() and folder.name != "__pycache__"
               and not (SRC / folder.relative_to(TESTS)).is_dir()}
    assert orphans == set()
