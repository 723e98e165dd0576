"""The CLI reference pages, generated from the commands' own help, so they cannot drift from
it: ``python -m recipelab.cli.reference docs`` writes ``docs/cli.md`` and ``docs/cli-run.md``
(``run`` and ``check`` share one set of options, on a page of their own);
tests/cli/test_reference.py fails when a page is not what this module writes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer.main

from recipelab.cli import app
from recipelab.cli.settings_flags import PANELS, no_name, settings_flags

RUN_PAGE = "cli-run.md"
OTHER_PAGE = "cli.md"
RUN_COMMANDS = ("run", "check")
"""The commands whose options are the campaign's settings: one page, the options listed once."""


def commands() -> list[tuple[str, Any]]:
    """Every command as ``recipelab --help`` orders it, a group's subcommands by name."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, f"{path} {name}".strip())
        elif path:
            found.append((path, command))

    walk(typer.main.get_command(app), "")
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _usage(path: str, command: Any) -> str:
    arguments = [(p.name or "").upper() if p.required else f"[{(p.name or '').upper()}]"
                 for p in command.params if p.param_type_name == "argument"]
    return f"`recipelab {' '.join([path, *arguments, '[OPTIONS]'])}`"


def _options(command: Any, leave_out: frozenset[str] = frozenset()) -> list[str]:
    rows = ["| option | what it does |", "| --- | --- |"]
    for param in command.params:
        if param.param_type_name != "option" or param.hidden or param.name in leave_out:
            continue
        names = ", ".join(f"`{name}`" for name in (*param.opts, *param.secondary_opts))
        text = param.help or ""
        default = param.default
        if (default not in (None, False, (), []) and "default" not in text.lower()
                and not callable(default)):
            text += f" (default: {default})"
        rows.append(f"| {names} | {_cell(text)} |")
    return rows if len(rows) > 2 else []


def _settings_tables() -> list[str]:
    """The settings options of ``run`` and ``check``, one table per part of the settings, each
    with the flat spelling it keeps as an alias."""
    lines: list[str] = []
    for panel in dict.fromkeys(PANELS.values()):
        flags = [flag for flag in settings_flags() if flag.panel == panel]
        lines += [f"### {panel}", "", "| option | also | what it does |", "| --- | --- | --- |"]
        for flag in flags:
            names = [flag.name, no_name(flag.name)] if flag.parsed_as is bool else [flag.name]
            also = ([flag.alias, no_name(flag.alias)] if flag.parsed_as is bool else [flag.alias]
                    ) if flag.alias else []
            lines.append(f"| {', '.join(f'`{n}`' for n in names)} | "
                         f"{', '.join(f'`{n}`' for n in also)} | {_cell(flag.help)} |")
        lines.append("")
    return lines


def _section(path: str, command: Any, *, options: bool = True) -> list[str]:
    lines = [f"## recipelab {path}", "", _usage(path, command), ""]
    lines += [(command.help or "").strip(), ""]
    if options:
        table = _options(command)
        lines += [*table, ""] if table else []
    return lines


def pages() -> dict[str, str]:
    """The two pages' text by file name."""
    every = commands()
    run = dict(every)["run"]
    run_page = ["# CLI reference: a night's options", "",
                "Generated from `recipelab run --help` by",
                f"`python -m recipelab.cli.reference docs`. The other commands: [{OTHER_PAGE}]"
                f"({OTHER_PAGE}).", ""]
    run_page += _section("run", run, options=False)
    run_page += _section("check", dict(every)["check"], options=False)
    settings = frozenset(flag.parameter for flag in settings_flags())
    run_page += ["## The options of run and check", "", *_options(run, settings), ""]
    run_page += ["Their settings, by part. Each keeps the flat spelling of earlier releases "
                 "as an alias (also).", "", *_settings_tables()]
    other = ["# CLI reference", "",
             "Generated from each command's `--help` by",
             f"`python -m recipelab.cli.reference docs`. `run` and `check`: [{RUN_PAGE}]({RUN_PAGE}).",
             ""]
    for path, command in every:
        if path not in RUN_COMMANDS:
            other += _section(path, command)
    return {RUN_PAGE: "\n".join(run_page).rstrip() + "\n",
            OTHER_PAGE: "\n".join(other).rstrip() + "\n"}


def main() -> None:
    """``python -m recipelab.cli.reference DIR``: write the pages into DIR (exit 2, writing
    nothing, when DIR is missing or is not a folder)."""
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python -m recipelab.cli.reference DIR, where DIR is an existing folder "
              "(the docs folder)", file=sys.stderr)
        sys.exit(2)
    for name, text in pages().items():
        (Path(sys.argv[1]) / name).write_text(text)


if __name__ == "__main__":
    main()
