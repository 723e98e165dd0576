"""The ``recipelab`` command."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from recipelab.agent import settings as settings_store
from recipelab.agent.campaign import Campaign
from recipelab.agent.events import EVENTS_FILE, read_events, render_event
from recipelab.agent.executor import LocalExecutor
from recipelab.agent.lock import CampaignLock, CampaignLocked
from recipelab.agent.settings import CampaignSettings, SettingsError, default_campaign_dir
from recipelab.agent.status import campaign_status
from recipelab.recipe import PROXY_PRESETS, TARGETS, ProxyBudgetError, Recipe, proxy_recipe
from recipelab.trainer.spec import LOG_FILE, CorpusSpec, TrialResult, TrialSpec
from recipelab.trajectory import StoreError, TrajectoryStore

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An autonomous recipe lab for pretraining campaigns.")
console = Console()
errors = Console(stderr=True)


@app.callback()
def root() -> None:
    """Propose, guard, train and record pretraining recipes on a small proxy model."""


def fail(message: str) -> NoReturn:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_recipe(path: Path) -> Recipe:
    try:
        return Recipe.model_validate_json(path.read_text())
    except OSError as error:
        fail(f"cannot read recipe file {path}: {error.strerror}")
    except ValidationError as error:
        fail(f"recipe file {path} is invalid (fix these knobs):\n{error}")


def resolve_recipe(preset: str, recipe_file: Path | None, target: str | None,
                   budget: int | None, steps: int | None, seed: int | None) -> Recipe:
    try:
        recipe = (load_recipe(recipe_file) if recipe_file
                  else proxy_recipe(preset, target, budget))
        edit = {k: v for k, v in {"steps": steps, "seed": seed}.items() if v is not None}
        return recipe.apply(edit) if edit else recipe
    except (ValueError, ValidationError) as error:
        fail(str(error))


def summarize(result: TrialResult, out_dir: Path) -> Table:
    table = Table(title=f"trial {result.trial_id}: {result.status}"
                  + (f" ({result.reason})" if result.reason else ""), show_header=False)
    rows: list[tuple[str, str]] = []
    if result.val_bpb is not None:
        rows.append(("val_bpb", f"{result.val_bpb:.4f}"))
    if result.train_loss is not None:
        rows.append(("final train loss", f"{result.train_loss:.4f}"))
    if result.tokens_per_s is not None:
        rows.append(("tokens/s", f"{result.tokens_per_s:,.0f}"))
    if result.step_ms is not None:
        rows.append(("step", f"{result.step_ms:.1f} ms"))
    if result.peak_memory_bytes is not None:
        rows.append(("peak memory", f"{result.peak_memory_bytes / 2**20:,.0f} MiB"))
    if result.params is not None:
        rows.append(("parameters", f"{result.params:,}"))
    if result.train_s is not None and result.setup_s is not None and result.eval_s is not None:
        total = result.setup_s + result.train_s + result.eval_s
        rows.append(("wall time", f"{total:.1f} s (setup {result.setup_s:.1f}, train "
                     f"{result.train_s:.1f}, eval {result.eval_s:.1f})"))
    if result.message:
        rows.append(("message", result.message))
    rows.append(("log", str(out_dir / LOG_FILE)))
    for key, value in rows:
        table.add_row(key, value)
    return table


@app.command()
def train(
    preset: Annotated[str, typer.Option(help=f"proxy preset: {', '.join(PROXY_PRESETS)}")] = "cpu",
    recipe_file: Annotated[Path | None, typer.Option(
        "--recipe", help="a recipe JSON file (instead of a preset)")] = None,
    target: Annotated[str | None, typer.Option(
        help=f"target architecture: {', '.join(TARGETS)} (default: the preset's)")] = None,
    corpus: Annotated[str, typer.Option(
        help="python-docs, python-source, or a path (text, .txt/.md dir, Parquet, train.bin dir)"
    )] = "python-docs",
    steps: Annotated[int | None, typer.Option(help="optimizer steps (default: the preset's)")] = None,
    budget: Annotated[int | None, typer.Option(help="proxy parameter budget")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    out: Annotated[Path | None, typer.Option(help="trial directory (default: ./runs/<time>)")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    print_recipe: Annotated[bool, typer.Option(
        "--print-recipe", help="print the resolved recipe as JSON and exit")] = False,
) -> None:
    """Train one recipe in a subprocess and print val_bpb, throughput and peak memory."""
    recipe = resolve_recipe(preset, recipe_file, target, budget, steps, seed)
    if print_recipe:
        console.print_json(recipe.model_dump_json())
        return
    trial_id = f"train-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = out or Path("runs") / trial_id
    try:
        spec = TrialSpec(trial_id=trial_id, recipe=recipe, corpus=CorpusSpec(source=corpus),
                         out_dir=str(out_dir.resolve()), device=device)
    except ValidationError as error:
        fail(f"invalid trial settings:\n{error}")
    console.print(f"training {recipe.param_count():,} parameters for {recipe.steps} steps "
                  f"on {corpus} → {out_dir}")
    executor = LocalExecutor(warm=False)
    with console.status("training…"):
        result = executor.wait(executor.submit(spec))
    console.print(summarize(result, out_dir))
    (out_dir / "recipe.json").write_text(json.dumps(recipe.model_dump(mode="json"), indent=2))
    if result.status != "complete":
        raise typer.Exit(1)


def campaign_dir(campaign: str) -> Path:
    """A campaign given by path, or by name under ./campaigns."""
    path = Path(campaign)
    return path if path.is_dir() or "/" in campaign else default_campaign_dir(campaign)


def resolve_settings(directory: Path, name: str, given: dict[str, Any]) -> CampaignSettings:
    """Saved settings updated with the options given on this command line (resume), or new
    settings from the given options and defaults."""
    try:
        saved = settings_store.load(directory)
        if saved is None:
            return CampaignSettings.model_validate({"name": name, **given})
        requested = CampaignSettings.model_validate({**saved.model_dump(), **given})
        settings_store.check_resume(saved, requested)
        return requested
    except ValidationError as error:
        fail(f"invalid campaign settings:\n{error}")
    except SettingsError as error:
        fail(str(error))


@app.command()
def run(
    name: Annotated[str, typer.Option(help="campaign name (directory ./campaigns/NAME)")] = "default",
    directory: Annotated[Path | None, typer.Option("--dir", help="campaign directory")] = None,
    target: Annotated[str | None, typer.Option(help=f"target: {', '.join(TARGETS)}")] = None,
    preset: Annotated[str | None, typer.Option(
        help=f"proxy preset: {', '.join(PROXY_PRESETS)} (default cpu)")] = None,
    budget: Annotated[int | None, typer.Option(help="proxy parameter budget")] = None,
    corpus: Annotated[str | None, typer.Option(
        help="python-docs (default), python-source, or a path")] = None,
    iterations: Annotated[int | None, typer.Option(help="proxy trials to train")] = None,
    hours: Annotated[float | None, typer.Option(help="stop launching after this many hours")] = None,
    until: Annotated[str | None, typer.Option(help="stop launching at this local time, HH:MM")] = None,
    trial_timeout: Annotated[float | None, typer.Option(help="seconds per proxy trial")] = None,
    promote: Annotated[int | None, typer.Option(help="finalists promoted to stress runs")] = None,
    stress_steps: Annotated[int | None, typer.Option(help="steps of each stress run")] = None,
    proposer: Annotated[str | None, typer.Option(
        help="classical, llm or hybrid (default: hybrid when an LLM is configured)")] = None,
    llm_base_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 "
        "(default: $RECIPELAB_LLM_BASE_URL)")] = None,
    llm_model: Annotated[str | None, typer.Option(
        help="model id (default: $RECIPELAB_LLM_MODEL, else the server's first)")] = None,
    llm_share: Annotated[float | None, typer.Option(
        help="share of trials the LLM proposes in hybrid mode (default 0.3)")] = None,
    llm_structured_output: Annotated[str | None, typer.Option(
        help="auto, json_schema (OpenAI, vLLM), json_object (llama.cpp), guided_json "
        "(NIM 1.x), nvext or prompt")] = None,
    sampler: Annotated[str | None, typer.Option(help="tpe, cmaes or random")] = None,
    seed: Annotated[int | None, typer.Option(help="campaign seed")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda")] = None,
    memory_reserve_gib: Annotated[float | None, typer.Option(
        help="device memory kept free for an LLM server sharing the GPU")] = None,
    searchable: Annotated[list[str] | None, typer.Option(
        help="shape knob allowed to leave the target's value, e.g. shape.qk_norm")] = None,
) -> None:
    """Start a campaign, or resume it: the same command again picks up where it stopped."""
    directory = directory or default_campaign_dir(name)
    given = {key: value for key, value in {
        "target": target, "preset": preset, "budget": budget,
        "corpus": {"source": corpus} if corpus else None, "iterations": iterations,
        "hours": hours, "until": until, "trial_timeout_s": trial_timeout, "promote": promote,
        "stress_steps": stress_steps, "proposer": proposer, "sampler": sampler, "seed": seed,
        "llm_base_url": llm_base_url, "llm_model": llm_model, "llm_share": llm_share,
        "llm_structured_output": llm_structured_output,
        "device": device, "memory_reserve_gib": memory_reserve_gib,
        "searchable": tuple(searchable) if searchable else None,
    }.items() if value is not None}
    settings = resolve_settings(directory, name, given)
    if settings.iterations is None and settings.hours is None and settings.until is None:
        fail("give the campaign a budget: --iterations N, --hours H or --until HH:MM")
    start_campaign(settings, directory, stress_only=False)


@app.command()
def stress(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default",
    promote: Annotated[int | None, typer.Option(help="finalists promoted to stress runs")] = None,
    stress_steps: Annotated[int | None, typer.Option(help="steps of each stress run")] = None,
) -> None:
    """Promote the best proxy trials to stress runs now (skips those already run)."""
    directory = campaign_dir(campaign)
    if settings_store.load(directory) is None:
        fail(f"no campaign at {directory}: start one with 'recipelab run'")
    given = {k: v for k, v in {"promote": promote, "stress_steps": stress_steps}.items()
             if v is not None}
    settings = resolve_settings(directory, directory.name, given)
    start_campaign(settings, directory, stress_only=True)


def start_campaign(settings: CampaignSettings, directory: Path, *, stress_only: bool) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        campaign = Campaign(settings, directory, console=errors)
        settings_store.save(settings, directory)
        summary = campaign.run(stress_only=stress_only)
    except (CampaignLocked, StoreError, SettingsError, ProxyBudgetError) as error:
        fail(str(error))
    except OSError as error:
        fail(f"cannot use campaign directory {directory}: {error}")
    best = summary.best
    console.print(f"campaign {settings.name}: {summary.proxy_trials} proxy trials, "
                  f"{summary.rejected} rejected, {summary.stress_runs} stress runs"
                  + (f"; best {best.trial_id} val_bpb {best.val_bpb:.4f}" if best else "")
                  + (" (stopped early; run the same command to resume)"
                     if summary.stopped_early else ""), soft_wrap=True)


def open_store(campaign: str, *, readonly: bool) -> TrajectoryStore:
    directory = campaign_dir(campaign)
    saved = settings_store.load(directory)
    if saved is None:
        fail(f"no campaign at {directory}: start one with 'recipelab run --name NAME ...'")
    try:
        return TrajectoryStore(directory, saved.name, readonly=readonly)
    except StoreError as error:
        fail(str(error))


def edit_text(edit: dict[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in edit.items()) or "(baseline)"


@app.command()
def status(campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default"
           ) -> None:
    """Progress, the best 10 trials, the running trial and the ETA (safe while a campaign runs)."""
    directory = campaign_dir(campaign)
    with open_store(campaign, readonly=True) as store:
        records = store.records()
    settings = settings_store.load(directory)
    assert settings is not None
    view = campaign_status(settings, records)
    console.print(view.headline)
    if view.running:
        console.print(f"running: {view.running}")
    table = Table(title="best proxy trials")
    for column in ("trial", "val_bpb", "proposer", "edit", "stress"):
        table.add_column(column)
    for row in view.best:
        table.add_row(row.trial_id, f"{row.val_bpb:.4f}", row.proposer, edit_text(row.edit),
                      view.stress_verdicts.get(row.trial_id, ""))
    console.print(table)


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


db = typer.Typer(help="The trajectory's SQLite index.", no_args_is_help=True)
app.add_typer(db, name="db")


@db.command("rebuild")
def db_rebuild(campaign: Annotated[str, typer.Argument(help="campaign name or directory")]
               = "default") -> None:
    """Recreate the SQLite index from trajectory.jsonl (take the campaign's lock first)."""
    directory = campaign_dir(campaign)
    try:
        with CampaignLock(directory), open_store(campaign, readonly=False) as store:
            count = store.rebuild()
    except CampaignLocked as error:
        fail(str(error))
    console.print(f"rebuilt {directory / TrajectoryStore.SQLITE} with {count} trials")


@db.command("check")
def db_check(campaign: Annotated[str, typer.Argument(help="campaign name or directory")]
             = "default") -> None:
    """Report whether trajectory.jsonl and the SQLite index agree (exit 1 when they do not)."""
    with open_store(campaign, readonly=True) as store:
        problems = store.check()
    for problem in problems:
        console.print(f"- {problem}", markup=False)
    if problems:
        console.print("they disagree: run 'recipelab db rebuild' to recreate SQLite from JSONL")
        raise typer.Exit(1)
    console.print("trajectory.jsonl and SQLite agree")


def main() -> None:
    app()
