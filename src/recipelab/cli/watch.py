"""Watching a campaign, safe while it runs: ``status``, ``report``, ``logs`` and the
``db`` commands on its trajectory index."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from recipelab.agent.campaign_lock import CampaignLock, CampaignLocked
from recipelab.agent.setup import settings as settings_store
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch.status import campaign_status, latest_window
from recipelab.cli.common import _cost_option, app, campaign_dir, console, fail
from recipelab.eventlog import EVENTS_FILE, read_events, render_event
from recipelab.recipe import BASELINE_PROPOSER, flatten
from recipelab.text import compact_edit
from recipelab.trajectory import StoreError, TrajectoryStore
from recipelab.trajectory.record import TrialRecord


def open_store(campaign: str, *, readonly: bool) -> TrajectoryStore:
    directory = campaign_dir(campaign)
    saved = settings_store.load(directory)
    if saved is None:
        fail(f"no campaign at {directory}: start one with 'recipelab run --name NAME ...'")
    try:
        return TrajectoryStore(directory, saved.name, readonly=readonly, db_url=saved.store.db)
    except StoreError as error:
        fail(str(error))


def read_campaign(campaign: str) -> tuple[CampaignSettings, list[TrialRecord]]:
    """A campaign's saved settings and every record, read without disturbing a running one."""
    with open_store(campaign, readonly=True) as store:
        records = store.records()
    settings = settings_store.load(campaign_dir(campaign))
    assert settings is not None, "open_store() refuses a directory without settings"
    return settings, records


@app.command()
def status(campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default"
           ) -> None:
    """Progress, the best 10 trials, the running trial and the ETA (safe while a campaign runs)."""
    settings, records = read_campaign(campaign)
    view = campaign_status(settings, records, latest_window(campaign_dir(campaign)))
    console.print(view.headline)
    if view.window:
        console.print(f"window: {view.window}", markup=False)
    if view.running:
        console.print(f"running: {view.running}")
    for loss in view.lost:
        console.print(loss, markup=False)
    table = Table(title="best proxy trials")
    for line in (view.ladder, view.noise_line(), view.winner_line()):
        if line:
            console.print(line, soft_wrap=True)
    base = next((flatten(r.recipe) for r in records if r.proposer == BASELINE_PROPOSER), {})
    for column in ("trial", "val_bpb", "vs baseline", "proposer", "edit", "stress"):
        table.add_column(column)
    for row in view.best:
        table.add_row(row.trial_id, f"{row.val_bpb:.4f}", view.marks.get(row.trial_id, ""),
                      row.proposer, compact_edit(row.edit, base),
                      view.stress_verdicts.get(row.trial_id, ""))
    console.print(table)


@app.command()
def report(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default",
    gpu_peak_tflops: Annotated[float | None, _cost_option(
        "RECIPELAB_GPU_PEAK_TFLOPS", "cloud GPU peak TFLOP/s (default 989, H100 dense BF16)")] = None,
    mfu: Annotated[float | None, _cost_option("RECIPELAB_MFU", "assumed MFU (default 0.4)")] = None,
    usd_per_gpu_hour: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_H100_USD_PER_HOUR", "cloud $ per GPU-hour (default 2.50)")] = None,
    gpus: Annotated[int | None, _cost_option(
        "RECIPELAB_COST_GPUS_PER_NODE", "GPUs of the cloud run (default 8)")] = None,
) -> None:
    """Write report/report.md (plots beside it) and a self-contained report/report.html."""
    from recipelab.report import CloudRates, ReportContext, write_report
    from recipelab.targets import get_target

    directory = campaign_dir(campaign)
    settings, records = read_campaign(campaign)
    given = {k: v for k, v in {"gpu_peak_flops": gpu_peak_tflops and gpu_peak_tflops * 1e12, "mfu": mfu,
                               "usd_per_gpu_hour": usd_per_gpu_hour, "gpus": gpus}.items()
             if v is not None}
    try:
        rates = CloudRates.model_validate(given)
    except ValidationError as error:
        fail(f"invalid cloud rates:\n{error}")
    from recipelab.trajectory.calibration import load_calibration

    context = ReportContext(settings.name, get_target(settings.target or ""), settings.preset,
                            rates, tuple(load_calibration(settings.search.calibrate_from).horizon_fits),
                            corpus=settings.corpus.source)
    markdown, page = write_report(directory, settings.ladder.ledger(records), context)
    console.print(f"wrote {markdown} and {page}", markup=False)


@app.command()
def logs(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default",
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new events")] = False,
    trial: Annotated[str | None, typer.Option(help="only events of this trial id")] = None,
    event: Annotated[str | None, typer.Option(help="only events of this name")] = None,
) -> None:
    """Print the campaign's events readably (from events.jsonl)."""
    path = campaign_dir(campaign) / EVENTS_FILE
    if not path.exists():
        fail(f"no events at {path}: is {campaign!r} a campaign that has started?")
    try:
        for record in read_events(path, follow=follow):
            if (trial is None or record.get("trial_id") == trial) and (
                    event is None or record.get("event") == event):
                console.print(render_event(record, colors=console.is_terminal),
                              markup=False, highlight=False, soft_wrap=True)
    except KeyboardInterrupt:
        pass


db = typer.Typer(help="The trajectory's index (SQLite, or the --db database).", no_args_is_help=True)
app.add_typer(db, name="db")


@db.command("rebuild")
def db_rebuild(campaign: Annotated[str, typer.Argument(help="campaign name or directory")]
               = "default") -> None:
    """Recreate the index (SQLite, or the campaign's rows in --db) from trajectory.jsonl."""
    directory = campaign_dir(campaign)
    if settings_store.load(directory) is None:
        fail(f"no campaign at {directory}: give a campaign name or directory that "
             "'recipelab run' created")
    try:
        with CampaignLock(directory), open_store(campaign, readonly=False) as store:
            count = store.rebuild()
    except CampaignLocked as error:
        fail(str(error))
    console.print(f"rebuilt {store.index_name} with {count} trials", markup=False)


@db.command("check")
def db_check(campaign: Annotated[str, typer.Argument(help="campaign name or directory")]
             = "default") -> None:
    """Report whether trajectory.jsonl and the index agree (exit 1 when they do not)."""
    with open_store(campaign, readonly=True) as store:
        problems = store.check()
    for problem in problems:
        console.print(f"- {problem}", markup=False)
    if problems:
        console.print("they disagree: run 'recipelab db rebuild' to recreate the index from JSONL")
        raise typer.Exit(1)
    console.print(f"trajectory.jsonl and {store.index_label} agree", markup=False)
