"""The ``recipelab`` command."""

from __future__ import annotations

import inspect
import io
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from recipelab import environment
from recipelab.agent import settings as settings_store
from recipelab.agent.campaign_lock import CampaignLock, CampaignLocked
from recipelab.agent.settings import (
    CampaignSettings,
    LadderSettings,
    SettingsError,
    default_campaign_dir,
)
from recipelab.agent.settings_components import UNIFIED_MEMORY_RESERVE_GIB, parse_edit
from recipelab.agent.status import campaign_status, latest_window
from recipelab.errors import RecipelabError
from recipelab.eventlog import EVENTS_FILE, read_events, render_event
from recipelab.fsutil import is_disk_full
from recipelab.recipe import BASELINE_PROPOSER, PROXY_PRESETS, TARGETS, Recipe, flatten, proxy_recipe
from recipelab.text import compact_edit
from recipelab.trainer.spec import LOG_FILE, CorpusSpec, TrialResult, TrialSpec
from recipelab.trajectory import StoreError, TrajectoryStore
from recipelab.trajectory.record import TrialRecord
from recipelab.units import MIB

if TYPE_CHECKING:
    from recipelab.agent.preflight import CheckResult, Preflight
    from recipelab.eventlog import LogFormat
    from recipelab.report.prediction import Prediction

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


def one_line(error: ValidationError) -> str:
    """A pydantic error as one line: each bad field, what is wrong, and the value given."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
        + (f" (got {e['input']!r})" if not isinstance(e.get("input"), dict) else "")
        for e in error.errors())


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
        rows.append(("peak memory", f"{result.peak_memory_bytes / MIB:,.0f} MiB"))
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
    corpus_max_bytes: Annotated[int | None, typer.Option(
        help="read at most this many bytes of the corpus (streamed; default: all of it)")] = None,
    steps: Annotated[int | None, typer.Option(help="optimizer steps (default: the preset's)")] = None,
    budget: Annotated[int | None, typer.Option(help="proxy parameter budget")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    out: Annotated[Path | None, typer.Option(help="trial directory (default: ./runs/<time>)")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    threads: Annotated[int | None, typer.Option(
        help="CPU threads for the trial (default: torch's, one per core)")] = None,
    compile_model: Annotated[bool, typer.Option(
        "--compile", help="torch.compile the model (pays off on long runs; cache in "
        "~/.cache/recipelab)")] = False,
    print_recipe: Annotated[bool, typer.Option(
        "--print-recipe", help="print the resolved recipe as JSON and exit")] = False,
) -> None:
    """Train one recipe in a subprocess and print val_bpb, throughput and peak memory."""
    from recipelab.runner import LocalExecutor

    recipe = resolve_recipe(preset, recipe_file, target, budget, steps, seed)
    from recipelab.agent.preflight import BUILTIN_CORPORA

    if corpus not in BUILTIN_CORPORA and not Path(corpus).exists():
        fail(f"--corpus {corpus!r} does not exist: give a text file, a directory of .txt/.md "
             f"or Parquet files, or a built-in corpus ({', '.join(BUILTIN_CORPORA)})")
    if print_recipe:
        console.print_json(recipe.model_dump_json())
        return
    trial_id = f"train-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = out or Path("runs") / trial_id
    try:
        spec = TrialSpec(trial_id=trial_id, recipe=recipe,
                         corpus=CorpusSpec(source=corpus, max_bytes=corpus_max_bytes),
                         out_dir=str(out_dir.resolve()), device=device, threads=threads,
                         compile=compile_model)
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


@app.command()
def envelope(
    preset: Annotated[str, typer.Option(help=f"proxy preset: {', '.join(PROXY_PRESETS)}")] = "cpu",
    target: Annotated[str | None, typer.Option(
        help=f"target architecture: {', '.join(TARGETS)} (default: the preset's)")] = None,
    budget: Annotated[int | None, typer.Option(help="proxy parameter budget")] = None,
    corpus: Annotated[str, typer.Option(help="python-docs, python-source, or a path")] = "python-docs",
    batch: Annotated[str, typer.Option(help="batch sizes to sweep, comma-separated")] = "2,4,8,16",
    seq_len: Annotated[str | None, typer.Option(
        help="sequence lengths, comma-separated (default: the preset's and twice it)")] = None,
    precision: Annotated[str | None, typer.Option(
        help="precisions, comma-separated; gains are over the first "
        "(default: each of fp32, bf16, fp8 this hardware supports)")] = None,
    steps: Annotated[int, typer.Option(help="optimizer steps per point")] = 20,
    warmup: Annotated[int, typer.Option(help="first steps of each point left out of the timing")] = 5,
    memory_limit: Annotated[str | None, typer.Option(
        help="address-space cap per point (RLIMIT_AS), e.g. 6GiB: a point over it is an OOM")] = None,
    timeout: Annotated[float, typer.Option(help="seconds per point before it is killed")] = 900.0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    out: Annotated[Path | None, typer.Option(
        help="output directory (default: envelope/<device>-<preset>)")] = None,
) -> None:
    """Sweep batch x sequence x precision: throughput, step time, peak memory, plateau, and
    the fitted memory line the guardrail then uses."""
    from recipelab import envelope as env
    from recipelab.eventlog import campaign_logger
    from recipelab.guardrails.hardware import resolve_device
    from recipelab.recipe import get_target
    from recipelab.runner import LocalExecutor

    if device not in ("auto", "cpu", "cuda"):
        fail(f"--device takes auto, cpu or cuda; got {device!r}")
    base = resolve_recipe(preset, None, target, budget, None, None)
    try:  # every value the user typed is checked before torch is imported
        batches = env.parse_ints(batch, "--batch")
        seq_lens = env.parse_ints(seq_len, "--seq-len") if seq_len else env.default_seq_lens(base)
        chosen = env.parse_precisions(precision) if precision else None
        limit = env.parse_bytes(memory_limit) if memory_limit else None
        base.apply({"seq_len": max(seq_lens), "batch_size": max(batches)})
        machine = resolve_device(device)  # the device the points run on, as --device asks
        axes = env.SweepAxes(batch_sizes=batches, seq_lens=seq_lens, steps=steps, warmup=warmup,
                             precisions=chosen or env.supported_precisions(base, get_target(
                                 target or PROXY_PRESETS[preset].default_target), machine))
    except (ValueError, ValidationError) as error:
        fail(str(error))
    out_dir = out or env.default_out_dir(machine, preset)
    console.print(f"envelope of the {base.param_count():,}-parameter {preset} proxy on "
                  f"{machine.name}: {len(axes.batch_sizes) * len(axes.seq_lens)} points per "
                  f"precision ({', '.join(axes.precisions)}) → {out_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    log, sink = campaign_logger(f"envelope-{preset}", out_dir, errors)
    executor = LocalExecutor(warm=False, memory_limit_bytes=limit)  # no worker competing with a timed point
    try:
        report = env.sweep(
            base, axes, get_target(target or PROXY_PRESETS[preset].default_target), machine,
            executor, out_dir, CorpusSpec(source=corpus), trial_device=device,  # type: ignore[arg-type]
            timeout_s=timeout, memory_limit_bytes=limit, on_point=env.point_logger(log))
    finally:
        executor.close()
        sink.close()
    console.print(env.render_table(report))
    for line in env.describe_fits(report):
        console.print(line, markup=False, soft_wrap=True)
    for path in env.write_outputs(report, out_dir):
        console.print(f"wrote {path}", markup=False)


@app.command()
def space(
    preset: Annotated[str, typer.Option(help=f"proxy preset: {', '.join(PROXY_PRESETS)}")] = "cpu",
    target: Annotated[str | None, typer.Option(
        help=f"target: {', '.join(TARGETS)}, or a config.json / target JSON file "
        "(default: the preset's)")] = None,
    budget: Annotated[int | None, typer.Option(help="proxy parameter budget")] = None,
    searchable: Annotated[list[str] | None, typer.Option(
        help="shape knob to search too, e.g. shape.activation (repeatable)")] = None,
    more: Annotated[list[str] | None, typer.Argument(
        help="more shape knobs to search, written after --searchable", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the space as JSON")] = False,
) -> None:
    """Print the search space a campaign with these options explores: each knob's range, its
    default (the baseline recipe's value) and when it applies."""
    from recipelab.guardrails import detect_device
    from recipelab.guardrails.hardware import supported_precisions
    from recipelab.proposer.space import default_space
    from recipelab.recipe import get_target

    base = resolve_recipe(preset, None, target, budget, None, None)
    try:
        tgt = get_target(target or PROXY_PRESETS[preset].default_target)
        knobs = default_space(base, [*(searchable or ()), *(more or ())],
                              precisions=supported_precisions(base, tgt, detect_device()))
    except ValueError as error:
        fail(str(error))
    rows = knobs.rows(base)
    if as_json:
        print(json.dumps({"preset": preset, "target": tgt.name, "knobs": rows}, indent=2))
        return
    table = Table(title=f"search space of the {preset} proxy of {tgt.name}: {len(rows)} knobs")
    table.add_column("knob", no_wrap=True)
    for column in ("range", "default", "applies"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["range"], repr(row["default"]), row["note"])
    console.print(table)


def campaign_dir(campaign: str) -> Path:
    """A campaign given by path, or by name under ./campaigns."""
    path = Path(campaign)
    return path if path.is_dir() or "/" in campaign else default_campaign_dir(campaign)


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


CLI_ONLY_OPTIONS = {
    "directory": "where the campaign lives, not what it does: its settings are saved inside it",
    "skip_preflight": "a choice for this start only; the next start runs the preflight again",
    "log_format": "how this start's console looks; events.jsonl is the same whatever it is",
}
"""``run``'s options that are no campaign setting, and why."""

CONVERTED_OPTIONS = {"corpus": "corpus.source", "corpus_max_bytes": "corpus.max_bytes",
                     "trial_timeout": "window.trial_timeout_s"}
"""``run``'s options that are not spelt as the flat key of their setting, by the setting's
path: :func:`launch` converts each. Every other option is the settings field its flat key
names (:data:`recipelab.agent.settings.FLAT_KEYS`), passed as given (tests/test_cli_settings.py
checks that the two stay in step)."""


def option_setting(option: str) -> str | None:
    """The settings path ``run``'s ``option`` sets (``ladder.promote``), or None for an
    option that is no setting."""
    if option in CLI_ONLY_OPTIONS:
        return None
    if option in CONVERTED_OPTIONS:
        return CONVERTED_OPTIONS[option]
    if option in settings_store.FLAT_KEYS:
        return ".".join(settings_store.FLAT_KEYS[option])
    return option


def setting_default(path: str) -> Any:
    """The default of the settings field at ``path`` (``ladder.promote``, ``corpus.source``):
    the one place a default is written."""
    model: type[BaseModel] = CampaignSettings
    *parents, last = path.split(".")
    for part in parents:
        model = type(model.model_fields[part].get_default(call_default_factory=True))
    if model.model_fields[last].is_required():
        raise ValueError(f"the setting {path} has no default: every campaign gives its own")
    return model.model_fields[last].get_default(call_default_factory=True)


def shown(value: Any) -> str:
    """A default as a person reads it: on/off, 1,000, 600, tpe."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def with_default(option: str, text: str, meaning: str | None = None) -> str:
    """``run``'s help for ``option``: ``text`` and the default of its settings field, read
    from the field, never restated by hand. ``meaning`` says what a default of None or
    ``auto`` comes to, or adds to a literal default (``0, or 24 on unified memory``)."""
    path = option_setting(option)
    if path is None:
        raise ValueError(f"--{option.replace('_', '-')} is no campaign setting: it has no "
                         "settings default to show; write its help without with_default")
    default = setting_default(path)
    if default is None:
        if meaning is None:
            raise ValueError(f"--{option.replace('_', '-')} defaults to None: say what that means "
                             "(meaning=...) or leave the default out of its help")
        return f"{text} (default: {meaning})"
    return f"{text} (default: {shown(default)}{f', {meaning}' if meaning else ''})"


def default_ladder() -> str:
    """The rungs the default settings climb from the default preset's proxy, for ``--eta``'s
    help: computed, so the example follows the defaults."""
    preset = setting_default("preset")
    proxy = PROXY_PRESETS[preset].steps
    rungs = ", ".join(f"{steps:,}" for steps in [proxy, *LadderSettings().ladder_steps(proxy)])
    return f"which climbs {rungs} steps from the {preset} preset's {proxy}-step proxy"


PASSED_APART = frozenset({"name", "searchable", "edits", "calibrate_from"})
"""Settings options :func:`launch` passes on its own: the name only for a new campaign (a
resume keeps the saved one), the lists as tuples (edits parsed from JSON, calibration paths
made absolute)."""


def settings_options(options: dict[str, Any]) -> set[str]:
    """The options passed to the settings as given, by their flat key."""
    return {key for key in options
            if key not in CLI_ONLY_OPTIONS and key not in CONVERTED_OPTIONS and key not in PASSED_APART}


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


@app.command()
def run(
    name: Annotated[str, typer.Option(help="campaign name (directory ./campaigns/NAME)")] = "default",
    directory: Annotated[Path | None, typer.Option("--dir", help="campaign directory")] = None,
    target: Annotated[str | None, typer.Option(help=with_default(
        "target", f"target: {', '.join(TARGETS)}, or a target file (config.json)",
        "the preset's"))] = None,
    preset: Annotated[str | None, typer.Option(help=with_default(
        "preset", f"proxy preset: {', '.join(PROXY_PRESETS)}"))] = None,
    budget: Annotated[int | None, typer.Option(help=with_default(
        "budget", "proxy parameter budget", "the preset's"))] = None,
    corpus: Annotated[str | None, typer.Option(help=with_default(
        "corpus", "python-docs, python-source, or a path"))] = None,
    corpus_max_bytes: Annotated[int | None, typer.Option(help=with_default(
        "corpus_max_bytes", "read at most this many bytes of a corpus given as a path, streamed",
        "what the longest run reads, stress_steps x batch x seq_len x 1.25, plus the validation "
        "share"))] = None,
    iterations: Annotated[int | None, typer.Option(help="proxy trials to train")] = None,
    hours: Annotated[float | None, typer.Option(help="stop launching after this many hours")] = None,
    until: Annotated[str | None, typer.Option(help="stop launching at this local time, HH:MM")] = None,
    trial_timeout: Annotated[float | None, typer.Option(help=with_default(
        "trial_timeout", "seconds per proxy trial"))] = None,
    max_consecutive_failures: Annotated[int | None, typer.Option(help=with_default(
        "max_consecutive_failures", "stop launching after this many proxy trials in a row fail "
        "with the same reason; the command then exits with code 3"))] = None,
    promote: Annotated[int | None, typer.Option(help=with_default(
        "promote", "finalists on the ladder's top rung (the stress horizon), each at --top-seeds "
        "seeds with the baseline; 0: no ladder"))] = None,
    top_seeds: Annotated[int | None, typer.Option(help=with_default(
        "top_seeds", "seeds of every finalist and of the baseline at the top rung, where the "
        "winner is named only when its paired gain's interval excludes 0: more seeds, a "
        "narrower interval"))] = None,
    stress_steps: Annotated[int | None, typer.Option(help=with_default(
        "stress_steps", "steps of the ladder's top rung, the stress horizon"))] = None,
    fidelity: Annotated[int | None, typer.Option(help=with_default(
        "fidelity", "also stress-run K mid-ranked trials, for the proxy-to-stress rank "
        "agreement"))] = None,
    eta: Annotated[int | None, typer.Option(help=with_default(
        "eta", "the ladder (successive halving, ASHA-style): each rung keeps the best 1/ETA of "
        "the one below at ETA times its steps, up to --stress-steps; the baseline climbs every "
        "rung", default_ladder()))] = None,
    rung_size: Annotated[int | None, typer.Option(help=with_default(
        "rung_size", "at most N candidates climb to the ladder's first rung above the proxy; 0 "
        "goes straight from the proxy to the top rung"))] = None,
    rung_steps: Annotated[int | None, typer.Option(help=with_default(
        "rung_steps", "steps of the ladder's first rung above the proxy; each rung above it has "
        "--eta times more", "proxy steps × --eta"))] = None,
    horizon_rule: Annotated[bool | None, typer.Option(
        "--horizon-rule/--no-horizon-rule", help=with_default(
            "horizon_rule", "train every rung at the learning rate the horizon rule gives for "
            "its tokens, lr ∝ tokens^-alpha, alpha fitted from the baseline's learning-rate "
            "family (lr × ½, × 2) and shrunk toward the published 0.32"))] = None,
    repeat_text: Annotated[bool | None, typer.Option(
        "--repeat-text/--no-repeat-text", help=with_default(
            "repeat_text", "let the longest run read the training text more than once; without "
            "it the preflight refuses a corpus smaller than the longest run"))] = None,
    attribution: Annotated[bool | None, typer.Option(
        "--attribution/--no-attribution", help=with_default(
            "attribution", "after the winner is named, measure which groups of its edit carry "
            "the gain and recommend the minimal winning edit"))] = None,
    proposer: Annotated[str | None, typer.Option(help=with_default(
        "proposer", "classical, llm or hybrid", "hybrid when an LLM is configured, else "
        "classical"))] = None,
    llm_base_url: Annotated[str | None, typer.Option(help=with_default(
        "llm_base_url", "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1",
        f"${environment.LLM_BASE_URL}"))] = None,
    llm_model: Annotated[str | None, typer.Option(help=with_default(
        "llm_model", "model id", f"${environment.LLM_MODEL}, else the server's first"))] = None,
    llm_share: Annotated[float | None, typer.Option(help=with_default(
        "llm_share", "share of trials the LLM proposes in hybrid mode"))] = None,
    llm_ready_timeout_s: Annotated[float | None, typer.Option(help=with_default(
        "llm_ready_timeout_s", "seconds the LLM's first turn waits for a server still loading "
        "its model; later turns look once"))] = None,
    llm_structured_output: Annotated[str | None, typer.Option(
        help="auto, json_schema (OpenAI, vLLM), json_object (llama.cpp), guided_json "
        "(NIM 1.x), nvext or prompt")] = None,
    sampler: Annotated[str | None, typer.Option(help=with_default(
        "sampler", "tpe, cmaes or random"))] = None,
    seed: Annotated[int | None, typer.Option(help=with_default("seed", "campaign seed"))] = None,
    device: Annotated[str | None, typer.Option(help=with_default(
        "device", "auto, cpu or cuda", "cuda when there is one"))] = None,
    memory_reserve_gib: Annotated[float | None, typer.Option(help=with_default(
        "memory_reserve_gib", "device memory kept free for an LLM server sharing the GPU",
        f"or {UNIFIED_MEMORY_RESERVE_GIB:g} on unified memory such as a GB10"))] = None,
    searchable: Annotated[list[str] | None, typer.Option(
        help="shape knob allowed to leave the target's value, e.g. shape.qk_norm; or "
        "precision, to search it")] = None,
    edits: Annotated[list[str] | None, typer.Option(
        "--edit", help="""your own edit of the baseline as JSON, e.g. '{"optimizer.lr": """
        """0.005}', tried before the proposer's and judged by the guardrails (repeatable)""",
        show_default=False)] = None,
    calibrate_from: Annotated[list[str] | None, typer.Option(
        help="an earlier campaign's directory or trajectory.jsonl to learn from (repeatable)")
    ] = None,
    noise_seeds: Annotated[int | None, typer.Option(help=with_default(
        "noise_seeds", "baseline seeds measuring the noise floor, counted in --iterations; 1 "
        "disables"))] = None,
    executor: Annotated[str | None, typer.Option(help=with_default(
        "executor", "where trials run: local or ray (pip install 'recipelab\\[ray]')"))] = None,
    ray_address: Annotated[str | None, typer.Option(help=with_default(
        "ray_address", "Ray cluster: auto (the one 'ray start' set up here) or HOST:PORT",
        "a new Ray instance on this machine"))] = None,
    parallel: Annotated[str | None, typer.Option(help=with_default(
        "parallel", "trials in flight at once: auto or a number", "on a CPU one 1-thread trial "
        "per core, as memory allows; on a GPU one; with Ray the cluster's GPUs"))] = None,
    precision: Annotated[str | None, typer.Option(help=with_default(
        "precision", "every trial's precision, the baseline's included: auto, fp32, bf16 or fp8 "
        "(--searchable precision searches it instead)", "bf16 where the device computes it "
        "natively, CUDA with bf16 or CPUs with AVX-512 BF16 or AMX; else fp32"))] = None,
    threads: Annotated[int | None, typer.Option(help=with_default(
        "threads", "CPU threads per trial", "the cores divided among --parallel trials"))
    ] = None,
    compile_stress: Annotated[bool | None, typer.Option(
        "--compile-stress", help=with_default(
            "compile_stress", "torch.compile stress runs (cache in ~/.cache/recipelab)"))
    ] = None,
    db: Annotated[str | None, typer.Option(help=with_default(
        "db", "trajectory database URL, e.g. postgresql+psycopg://user@host/db",
        "SQLite in the campaign directory"))] = None,
    mlflow_uri: Annotated[str | None, typer.Option(
        help="also log to MLflow: the campaign is one run, each trial a child run with its "
        "recipe, val_bpb and curve; a tracking server (http://HOST:5000), "
        "sqlite:///PATH/mlflow.db or a directory (pip install 'recipelab\\[mlflow]')")] = None,
    skip_preflight: Annotated[bool, typer.Option(
        "--skip-preflight", help="start without the preflight checks of 'recipelab check'")
    ] = False,
    log_format: Annotated[str, typer.Option(
        help="the console's lines: 'lines' (one short line per trial and phase), 'events' "
             "(every event, key=value) or 'json'; events.jsonl always holds every event")
    ] = "lines",
) -> None:
    """Start a campaign, or resume it: the same command again picks up where it stopped.

    The preflight ('recipelab check') runs first and refuses a night that cannot run.

    Exit codes: 0 when the campaign ran to its end (or was stopped by a signal), 2 for
    settings, a preflight or a campaign directory that cannot be used, 3 when a run of proxy
    trials failing with the same reason (--max-consecutive-failures) stopped it: the report
    is written, and the too_many_failures event says what to fix.
    """
    launch(dict(locals()), check_only=False)


def _check(**options: Any) -> None:
    launch(options, check_only=True)


# ``check`` takes exactly ``run``'s options (less --skip-preflight), declared once.
_options = [p for p in inspect.signature(run, eval_str=True).parameters.values()
            if p.name not in ("skip_preflight", "log_format")]
_check.__signature__ = inspect.Signature(_options)  # type: ignore[attr-defined]
_check.__annotations__ = {p.name: p.annotation for p in _options}
_check.__doc__ = """Prove that 'recipelab run' with the same options can run tonight.

Checks the device, the corpus (and builds its tokenized cache), the guardrails on the
baseline, the memory model and reserve, the disk, a 2-step trial with a full evaluation
in a real trainer process, and the LLM endpoint; prints ok / warning / error with the fix
for each. Exit status 0 when nothing is an error, 2 otherwise. Writes nothing to the
campaign directory."""
check = app.command("check")(_check)


@app.command()
def stress(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")] = "default",
    promote: Annotated[int | None, typer.Option(
        help="finalists on the ladder's top rung, each at --top-seeds seeds with the baseline")] = None,
    top_seeds: Annotated[int | None, typer.Option(
        help="seeds of every finalist and of the baseline at the top rung: more than the "
        "campaign ran adds the missing seeds, for a narrower interval")] = None,
    stress_steps: Annotated[int | None, typer.Option(
        help="steps of the ladder's top rung, the stress horizon")] = None,
    fidelity: Annotated[int | None, typer.Option(
        help="also stress-run K mid-ranked trials, for the proxy-to-stress rank agreement")] = None,
    log_format: Annotated[str, typer.Option(
        help="the console's lines: lines, events (key=value) or json")] = "lines",
) -> None:
    """Climb the ladder now, from the proxy trials to the top rung (skips the runs already
    done)."""
    directory = campaign_dir(campaign)
    if settings_store.load(directory) is None:
        fail(f"no campaign at {directory}: start one with 'recipelab run'")
    given = {k: v for k, v in {"promote": promote, "top_seeds": top_seeds,
                               "stress_steps": stress_steps, "fidelity": fidelity}.items()
             if v is not None}
    settings, _ = resolve_settings(directory, directory.name, given)
    start_campaign(settings, directory, stress_only=True, log_format=log_format_of(log_format))


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


def _cost_option(envvar: str, help_text: str) -> Any:
    return typer.Option(envvar=envvar, help=help_text, show_default=False)  # help shows the env var


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
    from recipelab.recipe import get_target
    from recipelab.report import CloudRates, ReportContext, write_report

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
                            rates, tuple(load_calibration(settings.search.calibrate_from).horizon_fits))
    markdown, page = write_report(directory, records, context)
    console.print(f"wrote {markdown} and {page}", markup=False)


@app.command()
def export(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")],
    out: Annotated[Path, typer.Option(help="directory for recipe.json and its companions")],
    tokens_per_param: Annotated[float, typer.Option(help="planned tokens per parameter")] = 20.0,
    gpus: Annotated[int, typer.Option(help="GPUs of the cloud run (the batch splits over them)")] = 8,
    gpu_memory_gib: Annotated[float, typer.Option(
        help="memory of each GPU; the micro-batch and grad_accum are chosen to fit it")] = 80.0,
    device: Annotated[str, typer.Option(
        help="cuda (bf16 and torch.compile unless the winner says otherwise) or cpu")] = "cuda",
    eval_bytes: Annotated[int, typer.Option(help="least held-out bytes to evaluate on")] = 8 << 20,
    trial: Annotated[str | None, typer.Option(
        help="export this proxy trial instead of the winner, by the same rules (p0000: the "
             "baseline, as a control arm)")] = None,
    target: Annotated[str | None, typer.Option(
        help=f"export to this target instead of the campaign's: {', '.join(TARGETS)}, or a "
             "config.json / target JSON file")] = None,
    lr_horizon_exponent: Annotated[float | None, typer.Option(
        hidden=True, help="deprecated and ignored: the rate follows Step Law")] = None,
) -> None:
    """Write the winner at the target's full shape (recipe.json for 'recipelab pretrain'),
    the runner-up, the transfer table, the predicted val_bpb curve and a manifest."""
    from recipelab.recipe import get_target
    from recipelab.report.export import ExportOptions, write_export
    from recipelab.trajectory.calibration import load_calibration

    if lr_horizon_exponent is not None:
        errors.print("warning: --lr-horizon-exponent is deprecated and ignored: the exported "
                     "learning rate and batch follow Step Law anchored at the winner's measured "
                     "rate (transfer.md shows both); the option goes in the next release",
                     highlight=False, soft_wrap=True)
    settings, records = read_campaign(campaign)
    try:
        options = ExportOptions.model_validate({
            "tokens_per_param": tokens_per_param, "gpus": gpus, "gpu_memory_gib": gpu_memory_gib,
            "device": device, "eval_bytes": eval_bytes})
        written = write_export(records, settings.name, get_target(target or settings.target or ""),
                               options, out,
                               load_calibration(settings.search.calibrate_from).horizon_fits, trial)
    except ValidationError as error:
        fail(f"invalid export options: {one_line(error)}")
    except ValueError as error:
        fail(str(error))
    for path in written:
        console.print(f"wrote {path}", markup=False)


@app.command()
def tokenize(
    out: Annotated[Path, typer.Option(help="directory for train.bin, val.bin, tokenizer.json, meta.json")],
    corpus: Annotated[str, typer.Option(
        help="python-docs, python-source, or a path (text file, .txt/.md dir, Parquet)")
    ] = "python-docs",
    tokenizer: Annotated[str, typer.Option(
        help="byte, bpe (byte-level BPE trained on the corpus, like the trainer's) or the path "
        "of a tokenizer.json (e.g. GPT-2's)")] = "bpe",
    vocab_size: Annotated[int, typer.Option(help="vocabulary of --tokenizer bpe")] = 32_768,
    val_fraction: Annotated[float, typer.Option(
        help="share of the text held out as val.bin (nanoGPT's OpenWebText share)")] = 0.0005,
    workers: Annotated[int | None, typer.Option(
        help="encoding processes (default: the cores); any count writes the same bytes")] = None,
    corpus_max_bytes: Annotated[int | None, typer.Option(help="read at most this many bytes")] = None,
    text_column: Annotated[str, typer.Option(help="Parquet column holding the text")] = "text",
) -> None:
    """Tokenize a corpus once into nanoGPT-style train.bin / val.bin, which
    'recipelab pretrain --corpus DIR' (and train, run) read memory-mapped."""
    from recipelab.trainer.data import DataError
    from recipelab.trainer.tokenize import tokenize_corpus

    try:
        spec = CorpusSpec.model_validate({**(given_corpus(corpus, corpus_max_bytes) or {}),
                                          "val_fraction": val_fraction, "text_column": text_column})
        done = tokenize_corpus(spec, tokenizer, out, vocab_size=vocab_size, workers=workers)
    except ValidationError as error:
        fail(f"invalid tokenize options: {one_line(error)}")
    except DataError as error:
        fail(str(error))
    console.print(f"wrote {out}: {done.train_tokens:,} train / {done.val_tokens:,} val tokens "
                  f"({done.dtype}, {done.tokenizer}, vocabulary {done.vocab_size:,}) from "
                  f"{done.source}", markup=False, soft_wrap=True)


def parse_knob_settings(settings: list[str]) -> dict[str, Any]:
    """``KNOB=VALUE`` pairs (VALUE read as JSON when it parses, else as a string)."""
    edit: dict[str, Any] = {}
    for item in settings:
        knob, sep, raw = item.partition("=")
        if not sep or not knob:
            fail(f"--set takes KNOB=VALUE (e.g. batch_size=8 or optimizer.lr=0.001), got {item!r}")
        try:
            edit[knob.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            edit[knob.strip()] = raw
    return edit


@app.command()
def pretrain(
    recipe_file: Annotated[Path, typer.Option(
        "--recipe", help="recipe JSON ('recipelab export' writes one)")],
    out: Annotated[Path, typer.Option(help="run directory (metrics, checkpoints, budget)")],
    corpus: Annotated[str, typer.Option(help="python-docs, python-source, or a path")] = "python-docs",
    corpus_max_bytes: Annotated[int | None, typer.Option(help="read at most this many bytes")] = None,
    knob: Annotated[list[str] | None, typer.Option(
        "--set", help="override a recipe knob, KNOB=VALUE (repeatable), e.g. batch_size=8")] = None,
    total_steps: Annotated[int | None, typer.Option(help="optimizer steps (default: the recipe's)")] = None,
    log_every: Annotated[int, typer.Option(help="steps between metrics rows")] = 10,
    eval_every: Annotated[int, typer.Option(help="steps between val_bpb evaluations")] = 100,
    checkpoint_every: Annotated[int, typer.Option(help="steps between checkpoints (0: none)")] = 100,
    keep_last: Annotated[int, typer.Option(help="checkpoints kept")] = 3,
    resume_from_latest: Annotated[bool, typer.Option(
        "--resume-from-latest", help="continue from the newest checkpoint in --out")] = False,
    price_per_hour: Annotated[float | None, typer.Option(
        help="$ per hour of the whole job: the trainer's own spend estimate (wall time × price)"
    )] = None,
    budget_cap_usd: Annotated[float | None, typer.Option(
        help="stop before spending more (needs --budget-curr-cost-uri or --price-per-hour)")] = None,
    alert_at_usd: Annotated[float | None, typer.Option(help="an event once spending reaches it")] = None,
    budget_curr_cost_uri: Annotated[str | None, typer.Option(
        help="a sidecar's spend file (path or file:// URI) holding spent_usd, rate_usd_per_hr, "
        "hours_elapsed, projected_total_usd and last_update_utc; read every --budget-poll-s")] = None,
    budget_poll_s: Annotated[float, typer.Option(help="seconds between reads of the spend file")] = 30.0,
    budget_stale_after_s: Annotated[float, typer.Option(
        help="a spend file older than this is reported stale")] = 600.0,
    dry_run_budget: Annotated[bool, typer.Option(
        "--dry-run-budget", help="time a few steps, print the projected cost and exit")] = False,
    min_mfu: Annotated[float | None, typer.Option(help="throughput floor as MFU (0-1)")] = None,
    min_tokens_per_s: Annotated[float | None, typer.Option(help="throughput floor, tokens/s")] = None,
    peak_tflops: Annotated[float | None, typer.Option(
        help="peak TFLOP/s per device for MFU (default: 989 on CUDA, none on CPU)")] = None,
    divergence_factor: Annotated[float, typer.Option(
        help="stop when the loss exceeds this multiple of ln(vocab), or is not finite")] = 2.0,
    compile_model: Annotated[bool | None, typer.Option(
        "--compile/--no-compile", help="torch.compile the model (default: on CUDA only)")] = None,
    mlflow_uri: Annotated[str | None, typer.Option(
        help="log the run to MLflow: a tracking server, sqlite:///PATH or a directory "
        "(needs recipelab[mlflow])")] = None,
    inject_spike_at_step: Annotated[int | None, typer.Option(
        help="feed rare-token batches from this step (a rehearsal spike)")] = None,
    spike_steps: Annotated[int, typer.Option(help="steps of rare-token batches")] = 3,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    threads: Annotated[int | None, typer.Option(help="CPU threads per process")] = None,
    campaign: Annotated[str | None, typer.Option(
        help="campaign name in events (default: manifest.json beside the recipe, else 'pretrain')"
    )] = None,
) -> None:
    """Train a recipe for a long run, on one process or under torchrun (DDP), with
    checkpoints, a budget guard and metrics. Exit status 3 when the budget stopped it, 4 when
    the loss diverged, 143 after a SIGTERM (checkpointed: resume with --resume-from-latest)."""
    import os

    from recipelab.longrun.run import PretrainConfig, dry_run_report, run_pretrain

    recipe = load_recipe(recipe_file)
    edit = parse_knob_settings(knob or [])
    if total_steps is not None:
        edit["steps"] = total_steps
    if campaign is None:
        manifest = recipe_file.parent / "manifest.json"
        with_name = json.loads(manifest.read_text()) if manifest.exists() else {}
        campaign = str(with_name.get("campaign", "pretrain"))
    try:
        recipe = recipe.apply(edit) if edit else recipe
        config = PretrainConfig(
            recipe=recipe, out_dir=str(out.resolve()),
            corpus=CorpusSpec.model_validate(given_corpus(corpus, corpus_max_bytes) or {}),
            device=device, campaign=campaign, log_every=log_every, eval_every=eval_every,
            checkpoint_every=checkpoint_every, keep_last=keep_last, resume_from_latest=resume_from_latest,
            compile=compile_model, price_per_hour=price_per_hour, budget_cap_usd=budget_cap_usd,
            alert_at_usd=alert_at_usd, budget_curr_cost_uri=budget_curr_cost_uri,
            budget_poll_s=budget_poll_s, budget_stale_after_s=budget_stale_after_s,
            dry_run_budget=dry_run_budget, divergence_factor=divergence_factor, min_mfu=min_mfu,
            min_tokens_per_s=min_tokens_per_s, peak_tflops=peak_tflops,
            inject_spike_at_step=inject_spike_at_step, spike_steps=spike_steps, threads=threads,
            mlflow_uri=mlflow_uri)
        result = run_pretrain(config)
    except ValidationError as error:
        fail(f"invalid pretrain settings: {one_line(error)}")
    except ValueError as error:
        fail(str(error))
    if os.environ.get("RANK", "0") != "0":
        raise typer.Exit(result.exit_code)
    if dry_run_budget:
        typer.echo(json.dumps(dry_run_report(config, result), indent=2))
        return
    console.print(f"pretrain {result.stop_reason} after {result.steps_done} steps → {out}",
                  markup=False)
    raise typer.Exit(result.exit_code)


@app.command("gpu-check")
def gpu_check(
    out: Annotated[Path | None, typer.Option(
        help="where the check's runs and gpu-check.json go (default: ./runs/gpu-check-<time>)"
    )] = None,
    device: Annotated[str, typer.Option(
        help="auto, cuda or cpu (cpu runs the CPU half on a GPU box too)")] = "auto",
    corpus: Annotated[str, typer.Option(
        help="python-docs, python-source, or a path")] = "python-docs",
    threads: Annotated[int | None, typer.Option(
        help="CPU threads per training process (default: torch's)")] = None,
    timeout: Annotated[float, typer.Option(
        help="seconds one training run may take before it counts as failed")] = 1800.0,
) -> None:
    """Proxy trials in bf16 (and fp8 where it runs), then pretrain on every local GPU under
    torchrun, killed after its first checkpoint and resumed; one table and gpu-check.json to
    send back. Exit status 0 when every check passed, 1 otherwise."""
    from recipelab.agent.preflight import BUILTIN_CORPORA
    from recipelab.longrun.gpu_check import REPORT_FILE, Launcher, render_table, run_gpu_check

    if device not in ("auto", "cuda", "cpu"):
        fail(f"--device {device!r} is not one of auto, cuda, cpu")
    if corpus not in BUILTIN_CORPORA and not Path(corpus).exists():
        fail(f"--corpus {corpus!r} does not exist: give a text file, a directory of .txt/.md "
             f"or Parquet files, or a built-in corpus ({', '.join(BUILTIN_CORPORA)})")
    if timeout <= 0:
        fail(f"--timeout must be a positive number of seconds, got {timeout}")
    out_dir = (out or Path("runs") / f"gpu-check-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        fail(f"--out {out_dir} is not empty: give a new directory, so that this check's runs "
             "are not mixed with an earlier one's")
    launcher = Launcher(corpus=str(Path(corpus).resolve()) if Path(corpus).exists() else corpus,
                        threads=threads, timeout_s=timeout)
    try:
        report = run_gpu_check(out_dir, device, launcher,
                               progress=lambda message: errors.print(message, markup=False))
    except ValueError as error:
        fail(str(error))
    console.print(render_table(report))
    console.print(f"send back {out_dir / REPORT_FILE} (and the *.log files beside it if a check "
                  "failed)", markup=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(1)


def _prediction_of(source: str) -> Prediction:
    """The prediction an export directory holds, else the campaign's for its target's shape."""
    from recipelab.recipe import get_target
    from recipelab.report.export import pick_winner
    from recipelab.report.prediction import Prediction, predict
    from recipelab.trajectory.ledger import Ledger

    written = Path(source) / "prediction.json"
    if written.is_file():
        try:
            return Prediction.from_json(json.loads(written.read_text()))
        except (OSError, KeyError, TypeError, ValueError) as error:  # JSONDecodeError too
            fail(f"{written} is not a prediction 'recipelab export' wrote ({error}); export again")
    settings, records = read_campaign(source)
    chosen = pick_winner(records)
    if chosen is None:
        fail(f"campaign {source} has no prediction: {Ledger(records).no_winner_reason}")
    return predict(records, chosen[0], get_target(settings.target or "").shape)


@app.command()
def verify(
    campaign: Annotated[str, typer.Argument(
        help="an export directory (its prediction.json), or a campaign name or directory")],
    metrics: Annotated[Path, typer.Option(help="the run's metrics.csv ('recipelab pretrain')")],
) -> None:
    """Compare a long run's val_bpb at each evaluation with the prediction 'recipelab export'
    wrote (or the campaign's, at its target). Exit status 0 on track, 1 worse than predicted
    or diverging."""
    from recipelab.report.verify import MetricsError, read_evaluations
    from recipelab.report.verify import verify as check_run

    try:
        prediction = _prediction_of(campaign)
        found = check_run(prediction, read_evaluations(metrics))
    except (MetricsError, ValueError) as error:
        fail(str(error))
    table = Table(title=f"{metrics} against the prediction of campaign {campaign}")
    for column in ("step", "bytes seen", "val_bpb", "predicted", "band", "status"):
        table.add_column(column)
    for p in found.points:
        table.add_row(f"{p.step:,}", f"{p.bytes_seen:,.0f}", f"{p.measured:.4f}",
                      f"{p.predicted:.4f}", f"{p.low:.4f} – {p.high:.4f}", p.status)
    console.print(table)
    for line in prediction.assumptions():
        console.print(f"- {line}", markup=False, soft_wrap=True)
    console.print(f"verdict: {found.headline()}", markup=False, soft_wrap=True)
    if found.verdict != "on track":
        raise typer.Exit(1)


@app.command()
def cost(
    campaign: Annotated[str | None, typer.Argument(
        help="a campaign whose measured iterations, wall time and energy replace the defaults")] = None,
    iterations: Annotated[int | None, _cost_option("RECIPELAB_COST_ITERATIONS", "proxy iterations (100)")
                          ] = None,
    seconds_per_iteration: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SECONDS_PER_ITERATION", "seconds per iteration (88)")] = None,
    h100_usd_per_hour: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_H100_USD_PER_HOUR", "H100 $ per GPU-hour (2.50)")] = None,
    gpus_per_node: Annotated[int | None, _cost_option("RECIPELAB_COST_GPUS_PER_NODE", "GPUs per node (8)")
                             ] = None,
    target_scale: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_TARGET_SCALE", "how many times slower a target-scale iteration is (60)")] = None,
    spark_watts: Annotated[float | None, _cost_option("RECIPELAB_COST_SPARK_WATTS", "Spark power, W (240)")
                           ] = None,
    usd_per_kwh: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_USD_PER_KWH", "electricity $/kWh (0.13)")] = None,
    spark_price: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SPARK_PRICE_USD", "Spark price $ (5000)")] = None,
    spark_years: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SPARK_YEARS", "years the Spark is amortised over (1.5)")] = None,
    wrong_pick_rate: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_WRONG_PICK_RATE", "chance a blind booking picks a bad recipe (0.5)")] = None,
    small_campaign_usd: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SMALL_CAMPAIGN_USD", "$ of the small cloud campaign at stake (3360)")] = None,
    target: Annotated[str | None, typer.Option(
        help="target of the cloud run priced (default: the campaign's, else llama2-7b)")] = None,
    gpu_peak_tflops: Annotated[float | None, _cost_option(
        "RECIPELAB_GPU_PEAK_TFLOPS", "cloud GPU peak TFLOP/s (989, H100 dense BF16)")] = None,
    mfu: Annotated[float | None, _cost_option("RECIPELAB_MFU", "assumed MFU (0.4)")] = None,
    tokens_per_param: Annotated[float | None, typer.Option(
        help="tokens per parameter of the cloud run (20)")] = None,
    campaigns_per_month: Annotated[float, typer.Option(
        help="cloud campaigns a month, for the Spark's payback")] = 1.0,
) -> None:
    """Print the cost arithmetic as JSON: a night of search here against H100 rental, the
    cloud run priced from its FLOPs (the report's figure), and the scenarios."""
    from recipelab.recipe import get_target
    from recipelab.report import CloudRates
    from recipelab.report.cost import (
        cloud_run_cost,
        compute_cost,
        measured_inputs,
        resolve_inputs,
        scenarios,
        target_run_cost,
    )
    from recipelab.report.recommend import recommend

    given = {k: v for k, v in {
        "iterations": iterations, "seconds_per_iteration": seconds_per_iteration,
        "h100_usd_per_gpu_hour": h100_usd_per_hour, "gpus_per_node": gpus_per_node,
        "target_scale_factor": target_scale, "spark_power_w": spark_watts,
        "electricity_usd_per_kwh": usd_per_kwh, "spark_price_usd": spark_price,
        "spark_amortisation_years": spark_years, "wrong_pick_rate": wrong_pick_rate,
        "small_campaign_usd": small_campaign_usd}.items() if v is not None}
    measured = None
    records: list[TrialRecord] = []
    if campaign is not None:
        settings, records = read_campaign(campaign)
        target = target or settings.target
        measured = measured_inputs(records)
        if not measured:
            fail(f"campaign {campaign!r} has no trained proxy trial to measure yet; "
                 "run it first, or drop the argument to use the published assumptions")
    rates_given = {k: v for k, v in {
        "gpu_peak_flops": gpu_peak_tflops and gpu_peak_tflops * 1e12, "mfu": mfu,
        "usd_per_gpu_hour": given.get("h100_usd_per_gpu_hour"),
        "gpus": given.get("gpus_per_node"), "tokens_per_param": tokens_per_param}.items()
        if v is not None}
    try:
        inputs, sources = resolve_inputs(given, measured)
        rates = CloudRates.model_validate(rates_given)
        chosen = get_target(target or "llama2-7b")
    except ValidationError as error:
        fail(f"invalid cost inputs:\n{error}")
    except ValueError as error:
        fail(str(error))
    found = recommend(records, chosen, rates) if records else None
    if found is not None:  # exactly the report's recommendation
        run = cloud_run_cost(found.recipe.flops_per_token(), found.tokens, rates)
        what = f"the report's recommendation: {found.winner.trial_id} on {chosen.name}"
    else:
        run = target_run_cost(chosen, rates)
        what = f"{chosen.name} at {rates.tokens_per_param:g} tokens per parameter"
    others = {name: target_run_cost(get_target(name), rates) for name in ("llama2-7b", "llama3-70b")}
    published = compute_cost(inputs, sources).published()
    published["cloud_run"] = run.published(rates, what)
    published["scenarios"] = scenarios(inputs, rates, {"medium (llama2-7b)": others["llama2-7b"],
                                                       "70B (llama3-70b)": others["llama3-70b"]},
                                       campaigns_per_month)
    typer.echo(json.dumps(published, indent=2))


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
