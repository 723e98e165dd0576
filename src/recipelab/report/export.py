"""Export the winner at the target's full shape, as a practitioner would run it in the cloud.

The report's "recipe on the target's shape" keeps the proxy's byte tokenizer, its batch of a
few sequences, its small evaluation slice and its raw learning rate. None of those is what a
run of the target should use, so each knob is moved by a stated rule, and every moved value
is written next to the proxy's value and the rule (``transfer.md``, ``transfer.json``):

- tokenizer and vocabulary: the target's (BPE unless the target's vocabulary is bytes);
- global batch in tokens: the compute-optimal batch of the DeepSeek LLM scaling study
  (Bi et al. 2024, arXiv 2401.02954), ``B = 0.292 · C^0.3271`` tokens for a run of ``C``
  training FLOPs, in whole sequences of the target's context, rounded up to a multiple of
  the GPUs so that every GPU gets the same rows;
- learning rate: muP's rule for Adam (Yang et al. 2022), the hidden matrices' rate scaled
  by ``d_model(proxy) / d_model(target)``, times a horizon factor
  ``(tokens(target) / tokens(proxy))^-β`` (Bjorck et al. 2024) whose exponent is an input
  (0, no correction, until a campaign has fitted it);
- warm-up: the proxy's fraction of its run, capped at :data:`MAX_WARMUP_FRACTION` of the
  target's run, and stated in tokens;
- evaluation slice: at least ``eval_bytes`` (default 8 MiB, about two million BPE tokens).

The planned run is ``tokens_per_param`` tokens per parameter (Chinchilla's 20 by default).
The prediction (:mod:`recipelab.report.prediction`) is written beside it, and the runner-up
as ``fallback-recipe.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import Field

from recipelab.fsutil import atomic_write_text
from recipelab.recipe import BYTE_VOCAB, Recipe, StrictModel, Target
from recipelab.report.prediction import Prediction, bytes_per_token, predict
from recipelab.report.recommend import TRANSFERABLE_SHAPE_KNOBS, choose_winner
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.units import MIB

BATCH_COEFFICIENT = 0.292
BATCH_EXPONENT = 0.3271
MAX_WARMUP_FRACTION = 0.02
PREDICTION_POINTS = 10
LIBRARIES = ("torch", "numpy", "safetensors", "tokenizers", "pydantic", "structlog")


class ExportOptions(StrictModel):
    """The inputs of the transfer rules."""

    tokens_per_param: float = Field(default=20.0, gt=0)
    gpus: int = Field(default=8, ge=1)
    eval_bytes: int = Field(default=8 * MIB, ge=256)
    lr_horizon_exponent: float = Field(default=0.0, ge=0.0, le=1.0)


@dataclass(frozen=True)
class Transfer:
    """One knob moved from the proxy to the target."""

    knob: str
    proxy: str
    target: str
    rule: str


@dataclass(frozen=True)
class Exported:
    recipe: Recipe
    transfers: tuple[Transfer, ...]
    params: int
    tokens: int


def pick_winner(records: Sequence[TrialRecord]) -> tuple[TrialRecord, str] | None:
    """The winner as the Ledger names it (highest-fidelity evidence first), and why."""
    return choose_winner(records)


def pick_runner_up(records: Sequence[TrialRecord], winner: TrialRecord) -> TrialRecord | None:
    """The best-ranked candidate that is another recipe (not a seed re-run of the winner)."""
    def unseeded(record: TrialRecord) -> dict[str, object]:
        return {k: v for k, v in record.recipe.items() if k != "seed"}

    return next((r for r in Ledger(records).ranked if unseeded(r) != unseeded(winner)), None)


def global_batch_tokens(flops: float) -> float:
    """The DeepSeek LLM compute-optimal batch in tokens for a run of ``flops``."""
    return float(BATCH_COEFFICIENT * flops ** BATCH_EXPONENT)


def transfer(winner: Recipe, edit: dict[str, object], target: Target,
             options: ExportOptions) -> Exported:
    """``winner`` moved onto ``target`` by the module's rules."""
    shape = target.shape.model_copy(update={
        key.split(".", 1)[1]: value for key, value in edit.items() if key in TRANSFERABLE_SHAPE_KNOBS})
    context = target.context
    params = winner.model_copy(update={"shape": shape, "seq_len": context}).param_count()
    tokens = math.ceil(options.tokens_per_param * params)
    flops_per_token = winner.model_copy(update={"shape": shape, "seq_len": context}).flops_per_token()
    flops = float(flops_per_token) * tokens
    batch_tokens = global_batch_tokens(flops)
    sequences = max(1, round(batch_tokens / context))
    sequences = options.gpus * math.ceil(sequences / options.gpus)
    tokens_per_step = sequences * context
    steps = max(1, math.ceil(tokens / tokens_per_step))
    proxy_tokens = winner.steps * winner.tokens_per_step
    width = winner.shape.d_model / shape.d_model
    horizon = (tokens / proxy_tokens) ** -options.lr_horizon_exponent
    lr = min(1.0, winner.optimizer.lr * width * horizon)
    proxy_fraction = winner.schedule.warmup_steps / winner.steps
    fraction = min(proxy_fraction, MAX_WARMUP_FRACTION)
    warmup = min(steps - 1, math.ceil(fraction * tokens / tokens_per_step)) if steps > 1 else 0
    eval_bytes = max(winner.eval_bytes, options.eval_bytes)
    tokenizer = "byte" if shape.vocab_size == BYTE_VOCAB else "bpe"
    recipe = winner.model_copy(update={
        "shape": shape, "seq_len": context, "tokenizer": tokenizer, "batch_size": sequences,
        "grad_accum": 1, "steps": steps, "eval_bytes": eval_bytes,
        "optimizer": winner.optimizer.model_copy(update={"lr": lr}),
        "schedule": winner.schedule.model_copy(update={"warmup_steps": warmup})})
    recipe = Recipe.model_validate(recipe.model_dump())  # the exported file must validate
    transfers = (
        Transfer("tokenizer", winner.tokenizer, tokenizer, "the target's tokenizer"),
        Transfer("shape.vocab_size", str(winner.shape.vocab_size), str(shape.vocab_size),
                 "the target's vocabulary"),
        Transfer("shape", f"{winner.shape.n_layer} layers × d_model {winner.shape.d_model}",
                 f"{shape.n_layer} layers × d_model {shape.d_model}",
                 "the target's shape, with the winner's non-size shape edits"),
        Transfer("seq_len", str(winner.seq_len), str(context), "the target's context"),
        Transfer("global batch (tokens)", f"{winner.tokens_per_step:,}", f"{tokens_per_step:,}",
                 f"B = {BATCH_COEFFICIENT}·C^{BATCH_EXPONENT} tokens for C = {flops:.3e} FLOPs "
                 f"(DeepSeek LLM, arXiv 2401.02954) = {batch_tokens:,.0f}, in sequences of "
                 f"{context}, rounded up to a multiple of {options.gpus} GPUs"),
        Transfer("batch_size × grad_accum (sequences)", f"{winner.batch_size} × {winner.grad_accum}",
                 f"{sequences} × 1", "the global batch; raise grad_accum and lower batch_size "
                 "by the same factor to fit memory, keeping their product"),
        Transfer("optimizer.lr", f"{winner.optimizer.lr:.4g}", f"{lr:.4g}",
                 f"muP for Adam: × d_model ratio {winner.shape.d_model}/{shape.d_model} = {width:.4g}; "
                 f"horizon: × (tokens {tokens:,} / {proxy_tokens:,})^-{options.lr_horizon_exponent:g} "
                 f"= {horizon:.4g}; one rate for every parameter (the recipe has one)"),
        Transfer("warm-up (tokens)", f"{winner.schedule.warmup_steps * winner.tokens_per_step:,} "
                 f"({proxy_fraction:.1%} of the run)", f"{warmup * tokens_per_step:,} "
                 f"({warmup} steps)", f"the proxy's fraction of the run, at most "
                 f"{MAX_WARMUP_FRACTION:.0%} of it"),
        Transfer("steps", str(winner.steps), f"{steps:,}",
                 f"{options.tokens_per_param:g} tokens per parameter × {params:,} parameters "
                 f"= {tokens:,} tokens / {tokens_per_step:,} per step"),
        Transfer("eval_bytes", f"{winner.eval_bytes:,}", f"{eval_bytes:,}",
                 f"at least {options.eval_bytes:,} bytes of held-out text"),
    )
    return Exported(recipe, transfers, params, tokens)


def _libraries() -> dict[str, str]:
    found = {}
    for name in ("recipelab", *LIBRARIES):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def _config_hash(recipe: Recipe, options: ExportOptions) -> str:
    canonical = json.dumps({"recipe": recipe.model_dump(mode="json"),
                            "options": options.model_dump(mode="json")}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _write_json(path: Path, data: object) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def predicted_points(prediction: Prediction, recipe: Recipe) -> list[dict[str, float | int]]:
    """The predicted val_bpb at :data:`PREDICTION_POINTS` steps spread over the run, at the
    bytes of text its tokens stand for (:func:`~recipelab.report.prediction.bytes_per_token`)."""
    points = []
    for i in range(1, PREDICTION_POINTS + 1):
        step = max(1, round(recipe.steps * i / PREDICTION_POINTS))
        seen = step * recipe.tokens_per_step
        text = seen * bytes_per_token(recipe)
        center = prediction.center(text)
        half = prediction.half_width(text)
        points.append({"step": step, "tokens": seen, "bytes": text, "val_bpb": center,
                       "low": center - half, "high": center + half})
    return points


def write_export(records: Sequence[TrialRecord], campaign: str, target: Target,
                 options: ExportOptions, out: Path) -> list[Path]:
    """Write every export file into ``out``; returns the paths written."""
    chosen = pick_winner(records)
    if chosen is None:
        raise ValueError(f"campaign {campaign} has nothing to export: "
                         f"{Ledger(records).no_winner_reason} (run it with 'recipelab run')")
    winner, because = chosen
    exported = transfer(Recipe.model_validate(winner.recipe), winner.edit, target, options)
    prediction = predict(records, winner)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    recipe_path = out / "recipe.json"
    _write_json(recipe_path, exported.recipe.model_dump(mode="json"))
    written.append(recipe_path)
    runner_up = pick_runner_up(records, winner)
    fallback = None
    if runner_up is not None:
        fallback = transfer(Recipe.model_validate(runner_up.recipe), runner_up.edit, target, options)
        _write_json(out / "fallback-recipe.json", fallback.recipe.model_dump(mode="json"))
        written.append(out / "fallback-recipe.json")
    points = predicted_points(prediction, exported.recipe)
    _write_json(out / "prediction.json", {**prediction.to_json(), "planned": points})
    _write_json(out / "transfer.json", [t.__dict__ for t in exported.transfers])
    manifest = {
        "campaign": campaign, "target": target.name, "winner": winner.trial_id,
        "chosen_because": because, "winner_val_bpb": winner.val_bpb,
        "runner_up": runner_up.trial_id if runner_up else None,
        "code_version": winner.provenance.get("code_version"),
        "libraries": winner.provenance.get("libraries") or _libraries(),
        "exported_with": _libraries(),
        "config_hash": _config_hash(exported.recipe, options),
        "recipe_fingerprint": exported.recipe.fingerprint(),
        "seed": exported.recipe.seed, "device": winner.provenance.get("device"),
        "params": exported.params, "planned_tokens": exported.tokens,
        "options": options.model_dump(mode="json"),
    }
    _write_json(out / "manifest.json", manifest)
    (out / "transfer.md").write_text(render_transfer(campaign, target, winner, because, exported,
                                                     prediction, points, runner_up, options))
    written += [out / n for n in ("prediction.json", "transfer.json", "manifest.json", "transfer.md")]
    return written


def render_transfer(campaign: str, target: Target, winner: TrialRecord, because: str,
                    exported: Exported, prediction: Prediction,
                    points: list[dict[str, float | int]], runner_up: TrialRecord | None,
                    options: ExportOptions) -> str:
    """The human-readable transfer table and prediction."""
    lines = [f"# Cloud recipe: campaign {campaign} → {target.name}", "",
             f"Winner {winner.trial_id} (proxy val_bpb {winner.val_bpb:.4f}), chosen as {because}.",
             f"Target: {exported.params:,} parameters; {options.tokens_per_param:g} tokens per "
             f"parameter = {exported.tokens:,} tokens = {exported.recipe.steps:,} steps.", "",
             "| knob | proxy | target | rule |", "|---|---|---|---|"]
    lines += [f"| {t.knob} | {t.proxy} | {t.target} | {t.rule} |" for t in exported.transfers]
    lines += ["", "## Predicted validation curve (val_bpb)", "",
              "| step | tokens | bytes of text | predicted val_bpb | band |",
              "|---|---|---|---|---|"]
    lines += [f"| {p['step']:,} | {p['tokens']:,} | {p['bytes']:,.0f} | {p['val_bpb']:.4f} | "
              f"{p['low']:.4f} – {p['high']:.4f} |" for p in points]
    lines += ["", "It rests on:", ""] + [f"- {a}" for a in prediction.assumptions()]
    lines += ["", "Check the cloud run against it: `recipelab verify "
              f"{campaign} --metrics RUN/metrics.csv`.", ""]
    lines.append(f"Fallback: {runner_up.trial_id} (proxy val_bpb {runner_up.val_bpb:.4f}) in "
                 "fallback-recipe.json, the runner-up moved by the same rules." if runner_up
                 else "Fallback: none (no other recipe completed).")
    return "\n".join(lines) + "\n"
