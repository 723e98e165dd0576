"""The declared dependencies match what the package imports.

A third-party module imported at the top of a module must be a core dependency, since every
installation imports it; one imported lazily (inside a function, or guarded by ``try``, or
named to ``importlib.import_module``) must at least be declared in an extra, so that
``pip install 'recipelab[extra]'`` is the documented way to get it. The declarations are
read from the installed package's metadata (``pip install -e .`` refreshes it), and modules
are mapped to the distributions that provide them with ``importlib.metadata``.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "recipelab"
TOOLING_EXTRAS = {"test"}  # what the tests need; the package must not rely on it
# Optional GPU modules that are not installed on a CPU machine, so importlib.metadata cannot
# say which distribution provides them.
NOT_INSTALLED_HERE = {"pynvml": "nvidia-ml-py", "transformer_engine": "transformer-engine"}


@dataclass(frozen=True)
class Import:
    module: str  # the top-level name: "sqlalchemy" for "from sqlalchemy.orm import ..."
    where: str
    lazy: bool  # inside a function or a try block, or through importlib.import_module


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports_in(tree: ast.Module, where: str) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name.split(".")[0], line, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(Import(node.module.split(".")[0], line, lazy))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append(Import(node.args[0].value.split(".")[0], line, True))
        inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            return  # for the type checker only: never imported at run time
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def third_party_imports() -> list[Import]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = str(path.relative_to(SRC.parent))
        found += _imports_in(ast.parse(path.read_text(), where), where)
    return [i for i in found
            if i.module not in sys.stdlib_module_names and i.module != "recipelab"]


def declared() -> tuple[set[str], set[str]]:
    """The distributions of the core dependencies, and of the extras other than tooling."""
    core: set[str] = set()
    extras: set[str] = set()
    for requirement in importlib.metadata.requires("recipelab") or []:
        name = normalize(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        marker = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if marker is None:
            core.add(name)
        elif marker.group(1) not in TOOLING_EXTRAS:
            extras.add(name)
    return core, extras


@functools.cache
def _distributions_by_module() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def providers(module: str) -> set[str]:
    found = _distributions_by_module().get(module, [])
    names = {normalize(name) for name in found}
    if module in NOT_INSTALLED_HERE:
        names.add(NOT_INSTALLED_HERE[module])
    return names


def test_the_scan_sees_top_level_lazy_and_import_module_imports() -> None:
    source = ("import numpy\nfrom torch.nn import functional\nimport os\n"
              "def f():\n    import ray\n    importlib.import_module('pynvml')\n"
              "try:\n    import psycopg\nexcept ImportError:\n    pass\n"
              "if TYPE_CHECKING:\n    import pandas\n")
    found = {(i.module, i.lazy) for i in _imports_in(ast.parse(source), "x.py")}
    assert found == {("numpy", False), ("torch", False), ("os", False), ("ray", True),
                     ("pynvml", True), ("psycopg", True)}


def test_every_third_party_import_of_the_package_is_declared() -> None:
    core, extras = declared()
    undeclared = []
    for found in third_party_imports():
        provided_by = providers(found.module)
        allowed = core if not found.lazy else core | extras
        if not provided_by & allowed:
            need = "a dependency" if not found.lazy else "a dependency or an extra"
            undeclared.append(f"{found.where}: {found.module} (from {sorted(provided_by) or '?'}) "
                              f"is not declared as {need} in pyproject.toml")
    assert undeclared == []
