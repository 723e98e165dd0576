"""The ``recipelab`` command, one module per group of commands.

- :mod:`~recipelab.cli.common`: the Typer app, its root callback, the consoles, one-line
  errors (``fail``) and the console script ``main``;
- :mod:`~recipelab.cli.tools`: ``train``, ``envelope`` and ``space``;
- :mod:`~recipelab.cli.settings_flags`: the campaign commands' options, generated from the settings;
- :mod:`~recipelab.cli.campaign_start`: settings resolved, the preflight, the campaign started;
- :mod:`~recipelab.cli.night`: ``run``, ``check`` and ``stress``;
- :mod:`~recipelab.cli.watch`: ``status``, ``report``, ``logs`` and ``db``;
- :mod:`~recipelab.cli.handoff`: ``export``, ``verify`` and ``cost``;
- :mod:`~recipelab.cli.long_run`: ``tokenize``, ``pretrain`` and ``gpu-check``;
- :mod:`~recipelab.cli.reference`: the CLI reference pages, generated from the commands' help.

Importing this package registers every command on ``app``. Each module imports torch,
Optuna and matplotlib only inside the commands that need them, so ``status`` and ``logs``
stay fast.
"""

from __future__ import annotations

from typer.models import CommandInfo

from recipelab.cli import handoff, long_run, night, tools, watch
from recipelab.cli.common import app, main

__all__ = ["app", "main"]

COMMAND_MODULES = (tools, night, watch, handoff, long_run)
"""The modules whose commands register on ``app`` when they are imported."""

HELP_ORDER = ("train", "envelope", "space", "run", "check", "stress", "status", "report", "export",
              "tokenize", "pretrain", "gpu-check", "verify", "cost", "logs")
"""The order ``recipelab --help`` lists the commands in (the ``db`` group comes last)."""


def _help_rank(command: CommandInfo) -> int:
    name = str(command.name or getattr(command.callback, "__name__", ""))
    return HELP_ORDER.index(name) if name in HELP_ORDER else len(HELP_ORDER)


app.registered_commands.sort(key=_help_rank)
