"""The package's layering, read from the source: every ``import recipelab.X`` (at module level
or inside a function) points down the chain
``cli → (agent, envelope) → (runner, longrun) → (proposer, guardrails, trainer, trajectory, report)
→ targets → recipe``,
never up or sideways between agent and envelope, and the packages form no cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import recipelab

PACKAGE = Path(recipelab.__file__).parent
LAYER = {"__main__": -1, "cli": 0, "agent": 1, "envelope": 1, "runner": 2, "longrun": 2,
         "proposer": 3, "guardrails": 3, "trainer": 3, "trajectory": 3, "report": 3,
         "transfer": 3,
         "targets": 4, "recipe": 5}
BASE = 6  # small shared modules with no recipelab imports of their own (units, text, fsutil...)
# below the base modules that use them: the one redactor and the error root
LAYER.update({"redaction": BASE + 1, "errors": BASE + 1, "environment": BASE + 1})
FORBIDDEN_SIDEWAYS = {("proposer", "trainer")}  # the proposer never imports the trainer


def component(module: str) -> str:
    """``recipelab.agent.campaign`` → ``agent``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> Iterator[tuple[str, str, int]]:
    """(importing component, imported component, line) for every recipelab import."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        source = component(".".join(relative.parts))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = ([f"{node.module}.{a.name}" for a in node.names]
                         if node.module == "recipelab" else [node.module])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("recipelab.") and component(name) != source:
                    yield source, component(name), node.lineno


def layer(name: str) -> int:
    return LAYER.get(name, BASE)


def allowed(src: str, dst: str) -> bool:
    """Down the chain; sideways only among the fourth layer's packages, and not all of them."""
    if (src, dst) in FORBIDDEN_SIDEWAYS:
        return False
    return layer(dst) > layer(src) or (layer(dst) == layer(src) == LAYER["proposer"])


def test_every_import_points_down_the_chain() -> None:
    wrong = sorted({f"{src} imports {dst}" for src, dst, _ in imports()
                    if src != "__init__" and not allowed(src, dst)})
    assert wrong == []


def test_the_packages_import_each_other_without_a_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports():
        if src != "__init__":
            graph.setdefault(src, set()).add(dst)
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"an import cycle between packages: {error.args[1]}") from None


def documented_layers() -> dict[str, int]:
    """The layer table of docs/architecture.md: ``| `module` | layer | job |`` rows."""
    table = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| `")]
    return {cells[1].strip().strip("`"): int(cells[2]) for cells in rows}


def test_the_architecture_page_lists_every_package_and_module_with_its_layer() -> None:
    modules = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()
               if (path.suffix == ".py" and path.stem != "__init__")
               or (path.is_dir() and (path / "__init__.py").exists())}
    documented = documented_layers()
    assert set(documented) == modules
    assert documented == {name: layer(name) for name in modules}


SHARED_NAMES = {"__init__.py", "__main__.py", "base.py"}
"""File names every package may use: the package itself, its entry point and its interface."""


def test_no_module_name_is_used_twice_so_a_name_says_which_module_it_is() -> None:
    names: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in SHARED_NAMES:
            names.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


def test_a_presets_default_target_is_read_in_one_place() -> None:
    """``targets.target_name`` reads it; everything else asks that function (or the settings,
    which ask it once), so no two places can disagree on what a campaign stands for."""
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and node.attr == "default_target":
                    readers.append(f"{path.relative_to(PACKAGE)}:{function.name}")
    assert sorted(set(readers)) == ["targets.py:target_name"]


def test_the_agents_modules_form_no_import_circle() -> None:
    """Within ``agent/`` each module imports only what it builds on (type-only imports
    included): the campaign over its phases, each phase over the context. A circle would
    mean a phase reaching back into what runs it."""
    agent = PACKAGE / "agent"
    graph: dict[str, set[str]] = {}
    for path in sorted(agent.rglob("*.py")):
        if path.stem == "__init__":
            continue
        graph[".".join(path.relative_to(agent).with_suffix("").parts)] = {
            node.module.removeprefix("recipelab.agent.")
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("recipelab.agent.")}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"an import circle in agent/: {error.args[1]}") from None
