"""Starting a campaign: the settings resolved from the command line, the preflight shown
and logged, then the campaign run (``run``, ``check`` and ``stress`` call these)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from recipelab.agent.campaign_lock import CampaignLock, CampaignLocked
from recipelab.agent.setup import settings as settings_store
from recipelab.agent.setup.build import build, tracking_uri
from recipelab.agent.setup.settings import default_campaign_dir
from recipelab.cli.common import console, errors, fail
from recipelab.cli.preflight_view import log_preflight, print_preflight
from recipelab.cli.settings_flags import corpus_source
from recipelab.errors import RecipelabError
from recipelab.fsutil import is_disk_full
from recipelab.targets import TARGETS

if TYPE_CHECKING:
    from recipelab.agent.setup.machine import Resolved
    from recipelab.agent.setup.preflight import Preflight
    from recipelab.eventlog import LogFormat


def resolve_settings(directory: Path, name: str, given: dict[str, Any], *,
                     check_only: bool = False) -> tuple[Resolved, bool]:
    """The settings :func:`~recipelab.agent.setup.build.build` makes of the saved ones and the
    options given, resolved for where trials run, and whether they are new; what it decided
    is said one line each (on the console for ``check``), an error in one line with its fix."""
    try:
        built = build(directory, name, given, check_only=check_only)
    except RecipelabError as error:
        fail(str(error), error.fix)
    for note in built.notes:
        (console if check_only else errors).print(note, markup=False, highlight=False,
                                                  soft_wrap=True)
    return built.resolved, built.new


def given_corpus(corpus: str | None, max_bytes: int | None) -> dict[str, Any] | None:
    """The corpus options given: a path is made absolute, so the campaign (and a resume from
    another directory) reads the same files; built-in names stay names."""
    given: dict[str, Any] = {}
    if corpus is not None:
        given["source"] = corpus_source(corpus)
    if max_bytes is not None:
        given["max_bytes"] = max_bytes
    return given or None


def refuse_if_running(directory: Path) -> None:
    """Refuse a campaign another orchestrator runs now, before a preflight competes with it
    (the campaign takes the lock itself when it starts)."""
    try:
        with CampaignLock(directory):
            pass
    except CampaignLocked as error:
        fail(str(error))
    except OSError:
        pass  # an unwritable directory: the disk check says what to do


def launch(name: str, directory: Path | None, given: dict[str, Any], *, check_only: bool,
           skip_preflight: bool = False, log_format: str = "lines") -> None:
    """``run`` and ``check``: validate what was typed (``given``: the settings set on the
    command line, nested by path), resolve the settings, run the preflight, then (for ``run``)
    the campaign. Nothing is written before the input is valid and the preflight passed."""
    from recipelab.agent.setup.input_check import InputError, check_input
    from recipelab.agent.setup.preflight import Preflight, run_preflight
    from recipelab.trajectory.index_db import server_url

    chosen_format = log_format_of(log_format)
    window, proposer = given.get("window", {}), given.get("proposer", {})
    try:
        check_input(preset=given.get("preset"), target=given.get("target"),
                    until=window.get("until"), llm_base_url=proposer.get("llm_base_url"))
    except InputError as error:
        fail(str(error))
    store = given.get("store", {})
    try:  # before anything else is said or written
        if mlflow_uri := store.get("mlflow_uri"):
            tracking_uri(mlflow_uri)
        if (db := store.get("db")) is not None:
            server_url(db)
    except RecipelabError as error:
        fail(str(error), error.fix)
    if (target := given.get("target")) is not None and target not in TARGETS:
        given = {**given, "target": str(Path(target).expanduser().resolve())}  # read later
    directory = directory or default_campaign_dir(name)
    resolved, new = resolve_settings(directory, name, given, check_only=check_only)
    if not new and not check_only:
        refuse_if_running(directory)
    out = console if check_only else errors
    report = Preflight()
    starting = False
    try:
        if not skip_preflight:
            with out.status("preflight: checking that tonight's campaign can run…"):
                report = run_preflight(resolved, directory)
            print_preflight(report, out)
            if not report.ok:
                failed = ", ".join(r.name for r in report.errors)
                fail(f"the preflight found {len(report.errors)} error(s) ({failed}): apply the "
                     "fixes above, then run the same command again")
        if check_only:
            out.print("preflight passed: 'recipelab run' with these options can start", markup=False)
            return
        starting = True
    finally:  # a Ray connection the campaign will not take over
        if not starting and resolved.executor is not None:
            resolved.executor.close()
    start_campaign(resolved, directory, stress_only=False, preflight=report,
                   log_format=chosen_format)


def log_format_of(value: str) -> LogFormat:
    """``--log-format``'s value, or an error naming the choices."""
    from recipelab.eventlog import LOG_FORMATS

    for choice in LOG_FORMATS:
        if value == choice:
            return choice
    fail(f"--log-format {value!r} is not one of {', '.join(LOG_FORMATS)}")


def start_campaign(resolved: Resolved, directory: Path, *, stress_only: bool,
                   preflight: Preflight | None = None, log_format: LogFormat = "lines") -> None:
    """Save the resolved settings and run the campaign on them."""
    from recipelab.agent.campaign import Campaign

    settings = resolved.settings
    try:
        directory.mkdir(parents=True, exist_ok=True)
        campaign = Campaign(resolved, directory, console=errors, log_format=log_format)
        settings_store.save(settings, directory)
        if preflight is not None and preflight.results:
            log_preflight(settings, directory, preflight)
        summary = campaign.run(stress_only=stress_only)
    except RecipelabError as error:
        fail(str(error), error.fix)
    except OSError as error:
        fix = "free some space on its disk" if is_disk_full(error) else "make it writable"
        fail(f"cannot use campaign directory {directory}: {error}. {fix.capitalize()} and run "
             "the same command again (it resumes), or start over with another --dir.")
    best = summary.best
    console.print(f"campaign {settings.name}: {summary.proxy_trials} proxy trials, "
                  f"{summary.rejected} rejected, {summary.rung_runs} rung runs, "
                  f"{summary.stress_runs} top-rung runs"
                  + (f"; best proxy {best.trial_id} val_bpb {best.val_bpb:.4f}" if best else "")
                  + (" (stopped early; run the same command to resume)"
                     if summary.stopped_early else ""), soft_wrap=True)
    # the verdict, the same sentence as status, the report and export; then what to book
    for line in (summary.winner_line, summary.recommendation_line):
        if line:
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    if summary.failing is not None:
        errors.print(f"[bold red]error:[/] stopped after {settings.window.max_consecutive_failures} "
                     f"proxy trials in a row failed with {escape(summary.failing)}; see the "
                     "too_many_failures event ('recipelab logs --event too_many_failures "
                     f"{escape(str(directory))}') for the fix, then run the same command again",
                     highlight=False, soft_wrap=True)
        raise typer.Exit(3)
