"""Starting a campaign: the settings resolved from the command line, the preflight shown
and logged, then the campaign run (``run``, ``check`` and ``stress`` call these)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from recipelab.agent import settings as settings_store
from recipelab.agent.campaign_lock import CampaignLock, CampaignLocked
from recipelab.agent.settings import CampaignSettings, SettingsError, default_campaign_dir
from recipelab.agent.settings_components import parse_edit
from recipelab.cli.common import console, errors, fail, one_line
from recipelab.cli.run_options import settings_options
from recipelab.errors import RecipelabError
from recipelab.fsutil import is_disk_full
from recipelab.recipe import TARGETS

if TYPE_CHECKING:
    from recipelab.agent.preflight import CheckResult, Preflight
    from recipelab.eventlog import LogFormat


def resolve_settings(directory: Path, name: str, given: dict[str, Any]
                     ) -> tuple[CampaignSettings, bool]:
    """Saved settings updated with the options given on this command line (resume), or new
    settings from the given options and defaults; and whether they are new."""
    try:
        saved = settings_store.load(directory)
        if saved is None:
            return resolve_machine(CampaignSettings.model_validate({"name": name, **given})), True
        if "corpus" in given:  # options not given keep their saved values
            corpus = {**saved.corpus.model_dump(), **given["corpus"]}
            if Path(corpus["source"]).resolve() == Path(saved.corpus.source).resolve():
                corpus["source"] = saved.corpus.source  # the same files, however spelt
            given = {**given, "corpus": corpus}
        requested = resolve_machine(saved.model_copy(update=given))
        settings_store.check_resume(saved, requested)
        return requested, False
    except ValidationError as error:
        fail(f"invalid campaign settings: {one_line(error)}")
    except SettingsError as error:
        fail(str(error))


def resolve_machine(settings: CampaignSettings) -> CampaignSettings:
    """``--parallel auto`` and ``--precision auto`` resolved for this machine, so the saved
    settings and the preflight see what will run. Ray campaigns are resolved where their
    executor sees the cluster (the preflight, then the campaign)."""
    if settings.executor.kind == "ray" or "auto" not in (settings.executor.parallel, settings.precision):
        return settings
    from recipelab.agent.machine import resolve_auto
    from recipelab.guardrails.hardware import resolve_device

    try:
        device = resolve_device(settings.executor.device)
    except ValueError as error:
        fail(str(error))
    settings, notes = resolve_auto(settings, device)
    for note in notes:
        errors.print(note, markup=False, highlight=False, soft_wrap=True)
    return settings


def given_corpus(corpus: str | None, max_bytes: int | None) -> dict[str, Any] | None:
    """The corpus options given: a path is made absolute, so the campaign (and a resume from
    another directory) reads the same files; built-in names stay names."""
    given: dict[str, Any] = {}
    if corpus is not None:
        given["source"] = (corpus if corpus in ("python-docs", "python-source")
                           else str(Path(corpus).expanduser().resolve()))
    if max_bytes is not None:
        given["max_bytes"] = max_bytes
    return given or None


def new_campaign_defaults(settings: CampaignSettings, given: dict[str, Any]) -> CampaignSettings:
    """Defaults a new campaign decides from its plan and this machine: the corpus read only as
    far as its longest run needs, and memory kept free for an LLM server on unified memory."""
    from recipelab.agent.preflight import (
        absolute_corpus,
        corpus_bytes_needed,
        default_memory_reserve_gib,
    )

    settings = absolute_corpus(settings, cap=corpus_bytes_needed(settings))
    if "memory_reserve_gib" not in given:
        from recipelab.guardrails import detect_device

        reserve = default_memory_reserve_gib(detect_device())
        if reserve:
            settings = settings.model_copy(update={"memory_reserve_gib": reserve})
    return settings


STATUS_STYLES = {"ok": "green", "warning": "yellow", "error": "bold red"}


def print_preflight(report: Preflight, out: Console) -> None:
    """One block per check: status, name, what was found, and the fix when there is one."""
    counts = {s: sum(r.status == s for r in report.results) for s in STATUS_STYLES}
    out.print(f"preflight: {counts['ok']} ok, {counts['warning']} warning(s), "
              f"{counts['error']} error(s)", markup=False, highlight=False)
    for result in report.results:
        out.print(check_line(result), soft_wrap=True, highlight=False)
        if result.fix:
            out.print(Text(f"{'':20}fix: {result.fix}"), soft_wrap=True, highlight=False)


def check_line(result: CheckResult) -> Text:
    line = Text(f"  {result.status:<8}", style=STATUS_STYLES[result.status])
    line.append(f"{result.name:<10}  {result.what}")
    return line


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


def launch(options: dict[str, Any], *, check_only: bool) -> None:
    """``run`` and ``check``: validate what was typed, resolve the settings, run the
    preflight, then (for ``run``) the campaign. Nothing is written before the input is valid
    and the preflight passed."""
    from recipelab.agent.preflight import InputError, Preflight, check_input, run_preflight

    log_format = log_format_of(options.get("log_format", "lines"))
    try:
        check_input(preset=options["preset"], target=options["target"], until=options["until"],
                    llm_base_url=options["llm_base_url"])
    except InputError as error:
        fail(str(error))
    if options.get("mlflow_uri"):
        checked_mlflow_uri(options["mlflow_uri"])  # before anything else is said or written
    name = options["name"]
    directory = options["directory"] or default_campaign_dir(name)
    calibrate_from = options["calibrate_from"]
    target = options["target"]
    if target is not None and target not in TARGETS:  # a target file, read from anywhere later
        options = {**options, "target": str(Path(target).expanduser().resolve())}
    given = {key: value for key, value in {
        **{key: options[key] for key in settings_options(options)},
        "corpus": given_corpus(options["corpus"], options["corpus_max_bytes"]),
        "trial_timeout_s": options["trial_timeout"],
        "searchable": tuple(options["searchable"]) if options["searchable"] else None,
        "edits": parsed_edits(options["edits"]),
        "calibrate_from": tuple(str(Path(p).resolve()) for p in calibrate_from)
        if calibrate_from else None,
    }.items() if value is not None}
    settings, new = resolve_settings(directory, name, given)
    if settings.window.iterations is None and settings.window.hours is None and settings.window.until is None:
        fail("give the campaign a budget: --iterations N, --hours H or --until HH:MM")
    try:
        settings.baseline()
    except (ValueError, ValidationError) as error:
        fail(str(error).splitlines()[0])
    if settings.store.mlflow_uri is not None:
        settings = settings.model_copy(update={"mlflow_uri": checked_mlflow_uri(settings.store.mlflow_uri)})
    if new:
        settings = new_campaign_defaults(settings, given)
    elif not check_only:
        refuse_if_running(directory)
    out = console if check_only else errors
    report = Preflight(settings=settings)
    if not options.get("skip_preflight"):
        with out.status("preflight: checking that tonight's campaign can run…"):
            report = run_preflight(settings, directory)
        print_preflight(report, out)
        if not report.ok:
            failed = ", ".join(r.name for r in report.errors)
            fail(f"the preflight found {len(report.errors)} error(s) ({failed}): apply the fixes "
                 "above, then run the same command again")
    if check_only:
        out.print("preflight passed: 'recipelab run' with these options can start", markup=False)
        return
    start_campaign(settings, directory, stress_only=False, preflight=report,
                   log_format=log_format)


def parsed_edits(texts: list[str] | None) -> tuple[dict[str, Any], ...] | None:
    """``--edit`` options as the settings hold them, or one error line for one that is no
    JSON object of knobs."""
    if not texts:
        return None
    try:
        return tuple(parse_edit(text) for text in texts)
    except SettingsError as error:
        fail(str(error))


def checked_mlflow_uri(uri: str) -> str:
    """The MLflow URI as the campaign uses it (a path made absolute), or a one-line error
    when MLflow is missing, the scheme is not one it serves, or a resume lacks credentials."""
    from recipelab.tracking import TrackingUnavailable, check_tracking_uri

    try:
        settings_store.check_mlflow_uri(uri)
        return check_tracking_uri(uri)
    except (SettingsError, TrackingUnavailable) as error:
        fail(str(error))


def log_preflight(settings: CampaignSettings, directory: Path, report: Preflight) -> None:
    """Record the preflight in ``events.jsonl`` (the console already showed its table)."""
    from recipelab.eventlog import campaign_logger

    log, sink = campaign_logger(settings.name, directory, Console(file=io.StringIO()))
    try:
        for result in report.results:
            method = {"ok": log.info, "warning": log.warning, "error": log.error}[result.status]
            method("preflight", check=result.name, status=result.status, what=result.what,
                   fix=result.fix or None)
    finally:
        sink.close()


def log_format_of(value: str) -> LogFormat:
    """``--log-format``'s value, or an error naming the choices."""
    from recipelab.eventlog import LOG_FORMATS

    for choice in LOG_FORMATS:
        if value == choice:
            return choice
    fail(f"--log-format {value!r} is not one of {', '.join(LOG_FORMATS)}")


def start_campaign(settings: CampaignSettings, directory: Path, *, stress_only: bool,
                   preflight: Preflight | None = None, log_format: LogFormat = "lines") -> None:
    """Run the campaign. ``settings`` are saved; the preflight's (``auto`` resolved where
    its checks ran) are what runs."""
    from recipelab.agent.campaign import Campaign

    tonight = preflight.settings if preflight and preflight.settings else settings
    try:
        directory.mkdir(parents=True, exist_ok=True)
        campaign = Campaign(tonight, directory, console=errors, log_format=log_format)
        ran = campaign.settings  # a Ray campaign's ``auto`` values, resolved now
        resolved = {key: value for key, asked, value in (
            ("parallel", settings.executor.parallel, ran.executor.parallel),
            ("precision", settings.precision, ran.precision)) if asked == "auto"}
        settings = settings.model_copy(update=resolved)
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
