"""The long run: ``tokenize`` (a corpus into train.bin / val.bin), ``pretrain`` (a recipe,
under torchrun too) and ``gpu-check`` (the GPU checks to send back)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from recipelab.cli.campaign_start import given_corpus
from recipelab.cli.common import app, console, errors, fail, load_recipe
from recipelab.errors import RecipelabError, one_line
from recipelab.trainer.spec import CorpusSpec


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
    sharding: Annotated[str, typer.Option(
        help="auto: shard the weights, gradients and AdamW states over the processes (FSDP2) "
             "where a whole copy does not fit a GPU by the memory model; none (DDP); full")
    ] = "auto",
    campaign: Annotated[str | None, typer.Option(
        help="campaign name in events (default: manifest.json beside the recipe, else 'pretrain')"
    )] = None,
) -> None:
    """Train a recipe for a long run, on one process or under torchrun (DDP, or FSDP2 where
    sharded), with checkpoints, a budget guard and metrics. Exit status 3 when the budget stopped it, 4 when
    the loss diverged, 143 after a SIGTERM (checkpointed: resume with --resume-from-latest)."""
    import os

    from recipelab.longrun.pretrain_config import PretrainConfig, dry_run_report
    from recipelab.longrun.run import run_pretrain

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
            mlflow_uri=mlflow_uri, sharding=sharding)
    except ValidationError as error:
        fail(f"invalid pretrain settings: {one_line(error)}")
    except ValueError as error:  # an unknown knob or a value the recipe refuses
        fail(str(error))
    with leaving_the_launch():
        try:
            result = run_pretrain(config)
        except RecipelabError as error:  # a refusal; any other error is a bug, with its traceback
            fail(str(error))
        if os.environ.get("RANK", "0") != "0":
            raise typer.Exit(result.exit_code)
        if dry_run_budget:
            typer.echo(json.dumps(dry_run_report(config, result), indent=2))
            return
        console.print(f"pretrain {result.stop_reason} after {result.steps_done} steps → {out}",
                      markup=False)
        raise typer.Exit(result.exit_code)


@contextmanager
def leaving_the_launch() -> Iterator[None]:
    """Under a multi-process ``torchrun`` launch, end the rank with its exit status through
    :func:`~recipelab.longrun.distributed.exit_rank` (no finalizer); alone, as usual."""
    from recipelab.longrun.distributed import exit_rank, world_from_env

    if world_from_env().size == 1:
        yield
        return
    try:
        yield
    except typer.Exit as done:
        exit_rank(done.exit_code)
    exit_rank(0)


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
    from recipelab.agent.setup.preflight import BUILTIN_CORPORA
    from recipelab.envelope.gpu_check import REPORT_FILE, Launcher, render_table, run_gpu_check

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
