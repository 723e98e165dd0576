"""The training tools: ``train`` (one recipe), ``envelope`` (the hardware sweep) and
``space`` (the search space a campaign explores)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from recipelab.cli.common import app, console, errors, fail, load_recipe
from recipelab.recipe import Recipe
from recipelab.targets import PROXY_PRESETS, TARGETS, preset_target, proxy_recipe
from recipelab.trainer.spec import LOG_FILE, CorpusSpec, TrialResult, TrialSpec
from recipelab.units import MIB


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
    from recipelab.agent.setup.preflight import BUILTIN_CORPORA

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
                             precisions=chosen or env.supported_precisions(
                                 base, preset_target(preset, target), machine))
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
            base, axes, preset_target(preset, target), machine,
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

    base = resolve_recipe(preset, None, target, budget, None, None)
    try:
        tgt = preset_target(preset, target)
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
