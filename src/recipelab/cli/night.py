"""The night's commands: ``run`` (start or resume a campaign), ``check`` (its preflight
alone, with exactly ``run``'s options) and ``stress`` (climb the ladder now)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from recipelab import environment
from recipelab.agent import settings as settings_store
from recipelab.agent.settings_components import UNIFIED_MEMORY_RESERVE_GIB
from recipelab.cli.campaign_start import launch, log_format_of, resolve_settings, start_campaign
from recipelab.cli.common import app, campaign_dir, fail
from recipelab.cli.run_options import default_ladder, with_default
from recipelab.recipe import PROXY_PRESETS, TARGETS


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
        "top_seeds", "fresh seeds of every finalist, the baseline and its learning-rate "
        "family at the top rung, where the winner is named only when its own paired interval "
        "over the tuned baseline excludes 0 (Bonferroni over the finalists and the close "
        "call): more seeds, a narrower interval"))] = None,
    close_call_seeds: Annotated[int | None, typer.Option(help=with_default(
        "close_call_seeds", "when the top rung's best finalist gains but its interval includes "
        "0, train it and the tuned baseline at this many more seeds there for a second look "
        "before keeping the baseline; 0: keep it at once (and the first look keeps all the "
        "error)"))] = None,
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
    width_rung: Annotated[bool | None, typer.Option(
        "--width-rung/--no-width-rung", help=with_default(
            "width_rung", "then train the recommendation at the proxy's width and twice it, at "
            "the top rung's tokens, so the export predicts a larger target with a measured "
            "size term"))] = None,
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
    resolved, _ = resolve_settings(directory, directory.name, given)
    start_campaign(resolved, directory, stress_only=True, log_format=log_format_of(log_format))
