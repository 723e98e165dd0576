"""The night's commands: ``run`` (start or resume a campaign), ``check`` (its preflight
alone, with exactly ``run``'s settings) and ``stress`` (climb the ladder now). Their settings
options are generated from the settings tree (:mod:`recipelab.cli.settings_flags`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from recipelab.agent.setup import settings as settings_store
from recipelab.cli.campaign_start import launch, log_format_of, resolve_settings, start_campaign
from recipelab.cli.common import app, campaign_dir, fail
from recipelab.cli.settings_flags import given_settings, with_settings_flags

STRESS_SETTINGS = ("ladder.promote", "ladder.top_seeds", "ladder.stress_steps", "ladder.fidelity")
"""What ``stress`` may change about the climb: how many finalists, seeds and steps, and the
mid-ranked trials run beside them."""


@app.command()
@with_settings_flags()
def run(
    name: Annotated[str, typer.Option(help="campaign name (directory ./campaigns/NAME)")] = "default",
    directory: Annotated[Path | None, typer.Option("--dir", help="campaign directory")] = None,
    skip_preflight: Annotated[bool, typer.Option(
        "--skip-preflight", help="start without the preflight checks of 'recipelab check'")
    ] = False,
    log_format: Annotated[str, typer.Option(
        help="the console's lines: 'lines' (one short line per trial and phase), 'events' "
             "(every event, key=value) or 'json'; events.jsonl always holds every event")
    ] = "lines",
    **settings: Any,
) -> None:
    """Start a campaign, or resume it: the same command again picks up where it stopped.

    The preflight ('recipelab check') runs first and refuses a night that cannot run.

    Exit codes: 0 when the campaign ran to its end (or was stopped by a signal), 2 for
    settings, a preflight or a campaign directory that cannot be used, 3 when a run of proxy
    trials failing with the same reason (--window.max-consecutive-failures) stopped it: the report
    is written, and the too_many_failures event says what to fix.
    """
    launch(name, directory, given_settings(settings), check_only=False,
           skip_preflight=skip_preflight, log_format=log_format)


@app.command()
@with_settings_flags()
def check(
    name: Annotated[str, typer.Option(help="campaign name (directory ./campaigns/NAME)")] = "default",
    directory: Annotated[Path | None, typer.Option("--dir", help="campaign directory")] = None,
    **settings: Any,
) -> None:
    """Prove that 'recipelab run' with the same options can run tonight.

    Checks the device, the corpus (and builds its tokenized cache), the guardrails on the
    baseline, the memory model and reserve, the disk, a 2-step trial with a full evaluation
    in a real trainer process, and the LLM endpoint; prints ok / warning / error with the fix
    for each. Exit status 0 when nothing is an error, 2 otherwise. Writes nothing to the
    campaign directory."""
    launch(name, directory, given_settings(settings), check_only=True)


@app.command()
@with_settings_flags(STRESS_SETTINGS, saved=True)
def stress(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default",
    log_format: Annotated[str, typer.Option(
        help="the console's lines: lines, events (key=value) or json")] = "lines",
    **settings: Any,
) -> None:
    """Climb the ladder now, from the proxy trials to the top rung (skips the runs already
    done)."""
    directory = campaign_dir(campaign)
    if settings_store.load(directory) is None:
        fail(f"no campaign at {directory}: start one with 'recipelab run'")
    resolved, _ = resolve_settings(directory, directory.name, given_settings(settings))
    start_campaign(resolved, directory, stress_only=True, log_format=log_format_of(log_format))
