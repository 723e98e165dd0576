"""The docs name only what exists: every ``recipelab`` command and every option written in
README.md and docs/ is one the CLI has (after ``recipelab CMD``: one of CMD's own)."""

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


def invocations(line: str) -> list[tuple[str, list[str]]]:
    """(command path, options after it) for each ``recipelab CMD ...`` in ``line``."""
    found = []
    for match in re.finditer(r"recipelab\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?(.*?)(?=recipelab\s|$)",
                             line):
        command, sub, rest = match.groups()
        path = f"{command} {sub}" if sub and f"{command} {sub}" in OPTIONS else command
        found.append((path, re.findall(r"(--[a-z][a-z0-9-]*)", rest)))
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
                      for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line)
                      if option not in EVERY_OPTION and option not in OTHER_TOOLS_OPTIONS]
    assert wrong == []
