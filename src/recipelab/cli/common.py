"""What every ``recipelab`` command shares: the Typer app and its root callback, the two
consoles, one-line errors (:func:`fail`), and the console script :func:`main`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from recipelab.agent.setup.settings import default_campaign_dir
from recipelab.errors import RecipelabError, one_line
from recipelab.recipe import Recipe

# The campaign, its preflight and the executors import torch (and the proposers Optuna), so
# the commands that need them import them; ``status`` and ``logs`` never do.

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An autonomous recipe lab for pretraining campaigns.")
console = Console()
errors = Console(stderr=True)


@app.callback()
def root() -> None:
    """Propose, guard, train and record pretraining recipes on a small proxy model."""


def fail(message: str, fix: str | None = None) -> NoReturn:
    """One line saying what was wrong (and a second with the fix, when it is not in the
    message already); exit status 2."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if fix:
        errors.print(f"fix: {escape(fix)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_recipe(path: Path) -> Recipe:
    try:
        return Recipe.model_validate_json(path.read_text())
    except OSError as error:
        fail(f"cannot read recipe file {path}: {error.strerror}")
    except ValidationError as error:
        fail(f"recipe file {path} is invalid: {one_line(error)}; fix it, or export it again "
             "with 'recipelab export'")


def campaign_dir(campaign: str) -> Path:
    """A campaign given by path, or by name under ./campaigns."""
    path = Path(campaign)
    return path if path.is_dir() or "/" in campaign else default_campaign_dir(campaign)


def _cost_option(envvar: str, help_text: str) -> Any:
    return typer.Option(envvar=envvar, help=help_text, show_default=False)  # help shows the env var


def main() -> None:
    """The console script: a recipelab error that no command turned into its own message is
    printed as one, with its fix, instead of a traceback (exit status 2)."""
    try:
        app()
    except RecipelabError as error:
        try:
            fail(str(error), error.fix)
        except typer.Exit as done:
            raise SystemExit(done.exit_code) from None
