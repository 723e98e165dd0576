"""The docs name only what exists: every ``recipelab`` command and every option written in
README.md and docs/ is one the CLI has (after ``recipelab CMD``: one of CMD's own), every
relative link reaches a file and every ``#anchor`` a heading of its page, and no page grows
past what a reader finishes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from recipelab.cli import app

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OTHER_TOOLS_OPTIONS = {
    # torchrun, pip, make, pytest, chromium and the like, named in the same pages
    "--standalone", "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-backend",
    "--rdzv-endpoint", "--rdzv-id", "--master-addr", "--master-port", "--max-restarts",
    "--find-links", "--index-url", "--extra-index-url", "--headless", "--no-sandbox",
    "--screenshot", "--window-size", "--disable-gpu", "--gpus", "--durations", "--address",
    "--head", "--port", "--num-cpus", "--num-gpus", "--block", "--host", "--model",
    "--n_gpu_layers", "--n-gpu-layers", "--chat_format", "--old", "--rounds", "--preset",
    "--clock", "--threads", "--help", "--upgrade", "--break-system-packages", "--user",
    "--vary",  # bench/fidelity.py's, named in prose
}


def cli_options() -> dict[str, set[str]]:
    """Each command path (``run``, ``db rebuild``) and the options it takes."""
    root = typer.main.get_command(app)
    found: dict[str, set[str]] = {}

    def walk(command: Any, path: str) -> None:
        found[path] = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)
                       if opt.startswith("--")} | {"--help"}
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())

    walk(root, "")
    return found


OPTIONS = cli_options()
EVERY_OPTION = set().union(*OPTIONS.values())


def code_of(page: Path) -> list[str]:
    """The page's code: fenced and indented blocks (continuation lines joined) and spans."""
    text = page.read_text()
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    indented = re.findall(r"(?:^(?: {4}|\t).*\n?)+", re.sub(r"```.*?```", "", text, flags=re.S),
                          flags=re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    code = [*blocks, *indented]
    lines = [line for block in code for line in block.replace("\\\n", " ").splitlines()]
    return lines + spans


OPTION = r"(--[a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)?)"
"""An option as typed: ``--promote``, or a nested setting's ``--ladder.promote``."""


def invocations(line: str) -> list[tuple[str, list[str]]]:
    """(command path, options after it) for each ``recipelab CMD ...`` in ``line``."""
    found = []
    for match in re.finditer(r"recipelab\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?(.*?)(?=recipelab\s|$)",
                             line):
        command, sub, rest = match.groups()
        path = f"{command} {sub}" if sub and f"{command} {sub}" in OPTIONS else command
        found.append((path, re.findall(OPTION, rest)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_option_named_exists(page: Path) -> None:
    wrong = []
    for line in code_of(page):
        for path, options in invocations(line):
            if path not in OPTIONS:
                wrong.append(f"recipelab {path}: no such command ({line.strip()[:80]})")
                continue
            wrong += [f"recipelab {path} {option}: no such option" for option in options
                      if option not in OPTIONS[path]]
        if "recipelab" not in line and "bench/" not in line:  # a benchmark's own options
            wrong += [f"{option}: no command has it ({line.strip()[:80]})"
                      for option in re.findall(r"(?<![\w-])" + OPTION, line)
                      if option not in EVERY_OPTION and option not in OTHER_TOOLS_OPTIONS]
    assert wrong == []


MAX_PAGE_BYTES = 20_000
"""A page a reader can finish; past it, split it by topic."""


def anchors(page: Path) -> set[str]:
    """The page's headings as GitHub slugs them: lower case, punctuation dropped, spaces to
    hyphens, a repeat numbered."""
    found: set[str] = set()
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for heading in re.findall(r"^#+\s+(.*)$", text, flags=re.M):
        slug = "".join(c for c in heading.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
        n, candidate = 0, slug
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_its_page_and_heading(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    wrong = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            wrong.append(f"{target}: no such heading in {linked.name}")
    assert wrong == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_is_longer_than_a_reader_finishes(page: Path) -> None:
    assert len(page.read_bytes()) <= MAX_PAGE_BYTES, f"{page.name}: split it by topic"
