"""Export the winner at the target's full shape, as a practitioner would run it in the cloud.

The report's "recipe on the target's shape" keeps the proxy's byte tokenizer, its batch of a
few sequences, its small evaluation slice and its raw learning rate. None of those is what a
run of the target should use, so each knob is moved by a stated rule, and every moved value
is written next to the proxy's value and the rule (``transfer.md``, ``transfer.json``):

- tokenizer and vocabulary: the target's (BPE unless the target's vocabulary is bytes);
- precision: bf16 on a CUDA target (the default: a multi-GPU cloud run), unless the winner
  trained in fp8 or its edit chose its precision, and ``torch.compile`` except under fp8
  (TransformerEngine's delayed scaling refuses it); a CPU target keeps the winner's;
- global batch in tokens and learning rate: Step Law (:mod:`recipelab.transfer.steplaw`,
  arXiv 2503.04715), ``B ∝ D^0.571`` and ``η ∝ N^-0.713 · D^0.307``, anchored at what the
  winner trained at on the proxy (measured / the law there), so the law carries the ratio
  between the two scales and the campaign sets the level; the rate's size exponent is the
  law's updated by the width rung's rate families (:mod:`recipelab.transfer.size_exponent`);
  the batch in whole sequences of the
  target's context, rounded up to a multiple of the GPUs so that every GPU gets the same rows;
- micro-batch: that global batch split into the largest per-GPU micro-batch the memory model
  fits in ``gpu_memory_gib`` (:mod:`recipelab.transfer.micro_batch`), with ``grad_accum`` making
  up the rest, so the global batch is unchanged; sharded (FSDP2) where a whole copy of the
  model and its optimizer per GPU does not fit (``sharding``);
- warm-up: the proxy's fraction of its run, capped at :data:`MAX_WARMUP_FRACTION` of the
  target's run, and stated in tokens;
- evaluation slice: at least ``eval_bytes`` (default 8 MiB, about two million BPE tokens).

The planned run is ``tokens_per_param`` tokens per parameter (Chinchilla's 20 by default).
The prediction (:mod:`recipelab.transfer.prediction`) is written beside it, the runner-up as
``fallback-recipe.json``, and the same numbers as a torchtitan job config
(:mod:`recipelab.transfer.torchtitan`). A recipe that fits no micro-batch of the GPUs is still
written, with the reason in ``transfer.md`` and the manifest: another trainer may hold it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import Field

from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text
from recipelab.recipe import BYTE_VOCAB, Precision, Recipe, StrictModel
from recipelab.targets import Target
from recipelab.trajectory.attribution import result_json, result_of
from recipelab.trajectory.horizon import HorizonFit, horizon_rule
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import width_check
from recipelab.transfer import torchtitan
from recipelab.transfer.distance import Distance, distance_lines, load_verified
from recipelab.transfer.micro_batch import (
    DEFAULT_GPU_MEMORY_GIB,
    BatchFitError,
    BatchSplit,
    DeviceKind,
    ShardingChoice,
    split_batch,
)
from recipelab.transfer.prediction import Prediction, bytes_per_token, predict
from recipelab.transfer.size_exponent import PRIOR, SizeExponent, size_exponent
from recipelab.transfer.steplaw import SOURCE, Anchored
from recipelab.units import GIB, MIB

MAX_WARMUP_FRACTION = 0.02
PREDICTION_POINTS = 10
LIBRARIES = ("torch", "numpy", "safetensors", "tokenizers", "pydantic", "structlog")
TRANSFERABLE_SHAPE_KNOBS = ("shape.activation", "shape.norm", "shape.position", "shape.qk_norm",
                            "shape.tie_embeddings")
"""Shape knobs a winner may change that the target takes as they are (the rest are sized)."""


class ExportOptions(StrictModel):
    """The inputs of the transfer rules."""

    tokens_per_param: float = Field(default=20.0, gt=0)
    gpus: int = Field(default=8, ge=1)
    eval_bytes: int = Field(default=8 * MIB, ge=256)
    gpu_memory_gib: float = Field(default=DEFAULT_GPU_MEMORY_GIB, gt=0.0, le=100_000.0)
    device: DeviceKind = "cuda"
    sharding: ShardingChoice = "auto"


@dataclass(frozen=True)
class Transfer:
    """One knob moved from the proxy to the target."""

    knob: str
    proxy: str
    target: str
    rule: str


@dataclass(frozen=True)
class Exported:
    """The winner on the target. ``memory_problem`` is set (and ``split`` None, the recipe
    holding the whole global batch in one micro-step) when no micro-batch fits a GPU."""

    recipe: Recipe
    transfers: tuple[Transfer, ...]
    params: int
    tokens: int
    law: Anchored
    precision_rule: str = ""
    compile: bool = False
    split: BatchSplit | None = None
    memory_problem: str | None = None
    proxy_context: int = 0  # the proxy's seq_len, for the distance

    @property
    def distance(self) -> Distance:
        """How far the export extrapolates from the proxy's longest run: the law's two
        scales, and the context the target trains at against the proxy's."""
        law = self.law
        return Distance.between((law.proxy.params, law.proxy.tokens, self.proxy_context),
                                (law.target.params, law.target.tokens, self.recipe.seq_len))


def pick_runner_up(records: Sequence[TrialRecord], winner: TrialRecord) -> TrialRecord | None:
    """The best-ranked candidate that is another recipe (not a seed re-run of the winner)."""
    def unseeded(record: TrialRecord) -> dict[str, object]:
        return {k: v for k, v in record.recipe.items() if k != "seed"}

    return next((r for r in Ledger(records).ranked_at_proxy if unseeded(r) != unseeded(winner)), None)


def target_precision(winner: Recipe, edit: dict[str, object], device: DeviceKind
                     ) -> tuple[Precision, str]:
    """The exported precision and why: bf16 for a CUDA target unless the campaign chose
    otherwise for a reason (the winner trained in fp8, or its edit set the precision)."""
    if device == "cpu":
        return winner.precision, "the winner's: a CPU target"
    if winner.precision == "fp8":
        return "fp8", "the winner trained in fp8 and won with it"
    if "precision" in edit:
        return winner.precision, f"the winner's edit chose {winner.precision}"
    if winner.precision == "bf16":
        return "bf16", "the winner's, and what CUDA GPUs train fastest in"
    return "bf16", ("bf16 autocast on CUDA: the proxy's fp32 was the campaign device's "
                    "default, not a knob the campaign chose")


def transfer(winner: Recipe, edit: dict[str, object], target: Target,
             options: ExportOptions, exponent: SizeExponent = PRIOR) -> Exported:
    """``winner`` moved onto ``target`` by the module's rules, its rate carried in size by
    ``exponent``."""
    shape = target.shape.model_copy(update={
        key.split(".", 1)[1]: value for key, value in edit.items() if key in TRANSFERABLE_SHAPE_KNOBS})
    context = target.context
    params = winner.model_copy(update={"shape": shape, "seq_len": context}).param_count()
    tokens = math.ceil(options.tokens_per_param * params)
    law = Anchored.at(winner, shape, tokens, exponent.value)
    sequences = max(1, round(law.batch_tokens / context))
    sequences = options.gpus * math.ceil(sequences / options.gpus)
    tokens_per_step = sequences * context
    steps = max(1, math.ceil(tokens / tokens_per_step))
    lr = law.learning_rate
    proxy_fraction = winner.schedule.warmup_steps / winner.steps
    fraction = min(proxy_fraction, MAX_WARMUP_FRACTION)
    warmup = min(steps - 1, math.ceil(fraction * tokens / tokens_per_step)) if steps > 1 else 0
    eval_bytes = max(winner.eval_bytes, options.eval_bytes)
    tokenizer = "byte" if shape.vocab_size == BYTE_VOCAB else "bpe"
    precision, precision_rule = target_precision(winner, edit, options.device)
    compile_model = options.device == "cuda" and precision != "fp8"
    recipe = winner.model_copy(update={
        "shape": shape, "seq_len": context, "tokenizer": tokenizer, "batch_size": sequences,
        "grad_accum": 1, "steps": steps, "eval_bytes": eval_bytes, "precision": precision,
        "optimizer": winner.optimizer.model_copy(update={"lr": lr}),
        "schedule": winner.schedule.model_copy(update={"warmup_steps": warmup})})
    split: BatchSplit | None = None
    problem: str | None = None
    try:
        split = split_batch(recipe, options.gpus, round(options.gpu_memory_gib * GIB),
                            options.device, options.sharding)
    except BatchFitError as error:
        problem = str(error)
    else:
        recipe = split.apply(recipe)
    sharded = split is not None and split.sharding == "full"
    recipe = Recipe.model_validate(recipe.model_dump())  # the exported file must validate
    why_not = ("" if options.device != "cuda" else
               " (recipelab pretrain does not compile a sharded model)" if sharded and compile_model
               else " (TransformerEngine's fp8 delayed scaling refuses it)")
    compile_model = compile_model and not sharded
    compiled = "torch.compile" if compile_model else "no torch.compile" + why_not
    transfers = (
        Transfer("tokenizer", winner.tokenizer, tokenizer, "the target's tokenizer"),
        Transfer("shape.vocab_size", str(winner.shape.vocab_size), str(shape.vocab_size),
                 "the target's vocabulary"),
        Transfer("shape", f"{winner.shape.n_layer} layers × d_model {winner.shape.d_model}",
                 f"{shape.n_layer} layers × d_model {shape.d_model}",
                 "the target's shape, with the winner's non-size shape edits"),
        Transfer("seq_len", str(winner.seq_len), str(context), "the target's context"),
        Transfer("precision", winner.precision, f"{precision}, {compiled}",
                 f"{precision_rule}; {options.device.upper()} target"),
        Transfer("global batch (tokens)", f"{winner.tokens_per_step:,}", f"{tokens_per_step:,}",
                 f"{law.describe_batch()} = {law.batch_tokens:,.0f}, in sequences of {context}, "
                 f"rounded up to a multiple of {options.gpus} GPUs"),
        Transfer("batch_size × grad_accum (sequences)", f"{winner.batch_size} × {winner.grad_accum}",
                 f"{recipe.batch_size} × {recipe.grad_accum}",
                 (f"the global batch of {sequences} sequences as {split.describe()}, by the "
                  f"memory model at {options.gpu_memory_gib:g} GiB per GPU" if split is not None
                  else f"does not fit: {problem}")),
        Transfer("optimizer.lr", f"{winner.optimizer.lr:.4g}", f"{lr:.4g}",
                 f"{law.describe_lr()}; one rate for every parameter (the recipe has one)"),
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
    return Exported(recipe, transfers, params, tokens, law, precision_rule, compile_model, split,
                    problem, proxy_context=winner.seq_len)


@dataclass(frozen=True)
class Recommended:
    """The campaign's winner exported, with the options after the defaults were resolved.

    When the winner's attribution found a minimal winning edit that keeps its gain within
    noise, ``exported`` is that minimal edit (the baseline plus the groups that carry the
    gain) and ``full`` the winner's whole edit, the alternative; else ``full`` is None."""

    winner: TrialRecord
    because: str
    exported: Exported
    options: ExportOptions
    full: Exported | None = None
    attribution: dict[str, Any] | None = None  # the attribution result, when there is one
    exponent: SizeExponent = PRIOR

    @property
    def minimal(self) -> bool:
        return self.full is not None


class UnknownTrialError(RecipelabError, ValueError):
    """``--trial`` names no proxy trial of the campaign."""


def chosen_trial(records: Sequence[TrialRecord], trial_id: str) -> TrialRecord:
    """The proxy trial ``trial_id`` (``export --trial``: the baseline as a control arm, or a
    runner-up), or an error naming the candidates."""
    proxies = [r for r in records if r.kind == "proxy" and r.trained]
    found = next((r for r in proxies if r.trial_id == trial_id), None)
    if found is None:
        names = ", ".join(r.trial_id for r in proxies[:8]) + (", ..." if len(proxies) > 8 else "")
        raise UnknownTrialError(f"the campaign has no trained proxy trial {trial_id!r}; give one "
                                f"of {names or 'none yet'} (p0000 is the baseline)")
    return found


def recommended_export(ledger: Ledger, target: Target, options: ExportOptions,
                       trial: str | None = None, *, ladder: bool = False) -> Recommended | None:
    """What the campaign's ``ledger`` recommends (:attr:`Ledger.recommended`) moved onto
    ``target``, or None before it recommends anything: what ``recipelab export`` writes and
    the report's recommendation shows. ``ladder`` exports the ladder's recommendation, before
    the check one size up can overrule it (:attr:`Ledger.ladder_recommended`): what the width
    rung trains, also when resumed after a check that lost, at the law's size exponent (its
    rate families measure the campaign's). ``trial`` exports that proxy trial as it trained at
    its longest run instead, by the same rules."""
    records = ledger.records
    exponent = PRIOR if ladder else size_exponent(records)
    if trial is not None:
        record = chosen_trial(records, trial)
        measured = Recipe.model_validate(ledger.longest_run(record).recipe)
        return Recommended(record, f"the trial named by --trial {trial}",
                           transfer(measured, record.edit, target, options, exponent), options,
                           exponent=exponent)
    chosen = ledger.ladder_recommended if ladder else ledger.recommended
    if chosen is None:
        return None
    winner, because = chosen
    measured = Recipe.model_validate(ledger.longest_run(winner).recipe)
    exported = transfer(measured, winner.edit, target, options, exponent)
    result = result_of(records, winner.trial_id)
    attribution = result_json(result) if result is not None else None
    if result is None or attribution is None or not attribution.get("recommends_minimal"):
        return Recommended(winner, because, exported, options, attribution=attribution,
                           exponent=exponent)
    minimal = transfer(Recipe.model_validate(result.recipe), result.edit, target, options, exponent)
    return Recommended(winner, because + "; recommended as its minimal winning edit (the groups "
                       "of its changes that carry the gain)", minimal, options, full=exported,
                       attribution=attribution, exponent=exponent)


def launch_command(exported: Exported, options: ExportOptions) -> str:
    """The command that trains the exported recipe where it was sent, sharded (FSDP2) where
    the export chose to shard."""
    launcher = (f"torchrun --standalone --nproc-per-node {options.gpus} -m recipelab"
                if options.gpus > 1 else "python -m recipelab")
    compiled = "--compile" if exported.compile else "--no-compile"
    sharded = exported.split is not None and exported.split.sharding == "full"
    return (f"{launcher} pretrain --recipe recipe.json --out RUN --corpus DATA "
            f"--device {options.device} {compiled} --sharding {'full' if sharded else 'none'}")


def data_command(recipe: Recipe) -> str:
    """The command that tokenizes a corpus for the exported recipe's vocabulary."""
    if recipe.tokenizer == "byte":
        return "recipelab tokenize --corpus CORPUS --tokenizer byte --out DATA"
    return (f"recipelab tokenize --corpus CORPUS --tokenizer bpe --vocab-size "
            f"{recipe.shape.vocab_size} --out DATA  (or --tokenizer PATH/tokenizer.json of the "
            "target's own tokenizer)")


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


def export_distance(exported: Exported, prediction: Prediction,
                    points: Sequence[dict[str, float | int]], corpus: str | None = None
                    ) -> list[str]:
    """The export's distance, what ``bench/transfer.py`` verified, and a warning beyond it
    or on another ``corpus``, with the band at the end of the run; a warning too when the
    prediction's fit is not physical."""
    end = points[-1]
    lines = distance_lines(exported.distance, load_verified(),
                           (float(end["low"]), float(end["high"])), corpus)
    why = prediction.unphysical
    return [*lines, f"Warning: the prediction is not physical: {why}."] if why else lines


def predicted_points(prediction: Prediction, recipe: Recipe) -> list[dict[str, float | int]]:
    """The predicted val_bpb at :data:`PREDICTION_POINTS` steps spread over the run, at the
    bytes of text its tokens stand for (:func:`~recipelab.transfer.prediction.bytes_per_token`)."""
    points = []
    for i in range(1, PREDICTION_POINTS + 1):
        step = max(1, round(recipe.steps * i / PREDICTION_POINTS))
        seen = step * recipe.tokens_per_step
        text = seen * bytes_per_token(recipe)
        low, high = prediction.band(text)
        points.append({"step": step, "tokens": seen, "bytes": text,
                       "val_bpb": prediction.center(text), "low": low, "high": high})
    return points


def write_export(ledger: Ledger, campaign: str, target: Target,
                 options: ExportOptions, out: Path,
                 prior_horizon_fits: Iterable[HorizonFit] = (), trial: str | None = None,
                 corpus: str | None = None) -> list[Path]:
    """Write every export file into ``out``; returns the paths written. ``ledger`` is the
    campaign's (its ``--promote``, its rungs). A winner that fits no GPU of
    ``options.gpu_memory_gib`` is still written, its manifest's ``run_on.problem`` naming the
    memory needed and the fix. ``trial`` exports that proxy trial instead of the winner;
    ``corpus`` is what the campaign trained on, set beside what the bench verified."""
    records = ledger.records
    found = recommended_export(ledger, target, options, trial)
    if found is None:
        run_it = "" if ledger.ranked_at_proxy else " (run it with 'recipelab run')"
        raise ValueError(f"campaign {campaign} has nothing to export: "
                         f"{ledger.no_winner_reason}{run_it}")
    winner, because, exported, options = found.winner, found.because, found.exported, found.options
    prediction = predict(records, winner, exported.recipe.shape)
    rule = horizon_rule(records, prior_horizon_fits)
    check = width_check(records)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    recipe_path = out / "recipe.json"
    _write_json(recipe_path, exported.recipe.model_dump(mode="json"))
    written.append(recipe_path)
    runner_up, no_fallback = _fallback(ledger, winner, trial)
    fallback_problem = None
    if runner_up is not None:
        fallback = transfer(Recipe.model_validate(ledger.longest_run(runner_up).recipe),
                            runner_up.edit, target, options, found.exponent)
        fallback_problem = fallback.memory_problem
        if fallback_problem is None:
            _write_json(out / "fallback-recipe.json", fallback.recipe.model_dump(mode="json"))
            written.append(out / "fallback-recipe.json")
    written += _write_attribution(out, found)
    points = predicted_points(prediction, exported.recipe)
    _write_json(out / "prediction.json", {**prediction.to_json(), "planned": points})
    _write_json(out / "transfer.json", [t.__dict__ for t in exported.transfers])
    split = exported.split
    if split is not None:
        config = torchtitan.job_config(exported.recipe, split,
                                       f"recipelab export of {winner.trial_id} ({campaign}) to "
                                       f"{target.name}")
        (out / torchtitan.FILE).write_text(torchtitan.render(config,
                                                             torchtitan.unexpressed(exported.recipe)))
        written.append(out / torchtitan.FILE)
    distance = export_distance(exported, prediction, points, corpus)  # the verified file read once
    manifest = {
        "campaign": campaign, "target": target.name, "winner": winner.trial_id,
        "chosen_because": because, "winner_val_bpb": winner.val_bpb,
        "kept_baseline": trial is None and ledger.kept_baseline is not None,
        "winner_line": ledger.winner_line(),
        "horizon_rule": {"alpha": rule.alpha, "source": rule.source, "fits": rule.fits,
                         "rule": rule.describe()},
        "law": exported.law.to_json(),
        "size_exponent": found.exponent.to_json(),
        "runner_up": runner_up.trial_id if runner_up else None,
        "fallback_problem": fallback_problem,
        "code_version": winner.provenance.get("code_version"),
        "libraries": winner.provenance.get("libraries") or _libraries(),
        "exported_with": _libraries(),
        "config_hash": _config_hash(exported.recipe, options),
        "recipe_fingerprint": exported.recipe.fingerprint(),
        "seed": exported.recipe.seed, "device": winner.provenance.get("device"),
        "params": exported.params, "planned_tokens": exported.tokens,
        "distance": exported.distance.to_json(),
        "distance_lines": distance,
        "run_on": {"device": options.device, "gpus": options.gpus,
                   "gpu_memory_gib": options.gpu_memory_gib,
                   "precision": exported.recipe.precision,
                   "precision_rule": exported.precision_rule, "compile": exported.compile,
                   **_fit(exported),
                   "command": launch_command(exported, options),
                   "data_command": data_command(exported.recipe)},
        "options": options.model_dump(mode="json"),
        "recommended": "minimal edit" if found.minimal else "full edit",
        "minimal_edit": (found.attribution or {}).get("minimal_edit"),
        "full_edit": winner.edit,
        "width_check": None if check is None else check.to_json(),
    }
    _write_json(out / "manifest.json", manifest)
    text = render_transfer(campaign, target, winner, because, exported, prediction, points,
                           runner_up, options, ledger.winner_line(), no_fallback, distance,
                           found.exponent)
    if check is not None:
        text += f"\nOne size up: {check.describe()}.\n"
    if found.minimal:
        minimal = (found.attribution or {}).get("minimal_edit", {})
        text += ("\nrecipe.json is the minimal winning edit: the baseline with "
                 f"{', '.join(f'{k}={v}' for k, v in minimal.items())}, the groups of the "
                 "winner's changes that carry its gain (attribution.json says what each "
                 "contributed); full-recipe.json is the winner's whole edit, the alternative.\n")
    (out / "transfer.md").write_text(text)
    written += [out / n for n in ("prediction.json", "transfer.json", "manifest.json", "transfer.md")]
    return written


def _fit(exported: Exported) -> dict[str, Any]:
    """How the recipe is taken on each GPU, or why no micro-batch fits one."""
    split = exported.split
    if split is None:
        return {"problem": exported.memory_problem}
    return {"micro_batch_per_gpu": split.per_gpu, "grad_accum": split.grad_accum,
            "sharding": split.sharding, "why_sharded": split.why_sharded or None,
            "predicted_peak_gib_per_gpu": round(split.peak_bytes / GIB, 2)}


def _write_attribution(out: Path, found: Recommended) -> list[Path]:
    """``attribution.json`` (each group, its knobs, its contribution with interval, kept or
    dropped) when the winner was attributed, and ``full-recipe.json`` (the whole edit) when
    the recommendation is the minimal edit."""
    written = []
    if found.attribution is not None:
        _write_json(out / "attribution.json", found.attribution)
        written.append(out / "attribution.json")
    if found.full is not None and found.full.memory_problem is None:
        _write_json(out / "full-recipe.json", found.full.recipe.model_dump(mode="json"))
        written.append(out / "full-recipe.json")
    return written


def law_lines(law: Anchored, exponent: SizeExponent = PRIOR) -> list[str]:
    """The learning rate and batch at both scales, by the law and as exported, in a table, and
    the size exponent the rate was carried with."""
    return [f"The learning rate and global batch follow {SOURCE}, anchored at the winner's "
            f"longest run on the proxy ({law.proxy.tokens:,} tokens): the law sets the ratio "
            "between the scales, the campaign's measurement the level.", "",
            "| | non-embedding parameters | tokens | learning rate | batch (tokens) |",
            "|---|---|---|---|---|",
            f"| law at the proxy | {law.proxy.params:,} | {law.proxy.tokens:,} | "
            f"{law.proxy.learning_rate:.4g} | {law.proxy.batch_tokens:,.0f} |",
            f"| measured on the proxy | | | {law.proxy_lr:.4g} | {law.proxy_batch_tokens:,} |",
            f"| anchor (measured / law) | | | × {law.lr_anchor:.3g} | × {law.batch_anchor:.3g} |",
            f"| law at the target | {law.target.params:,} | {law.target.tokens:,} | "
            f"{law.target.learning_rate:.4g} | {law.target.batch_tokens:,.0f} |",
            *([f"| the campaign's size exponent, N^{law.params_exponent:.3f} | | | × "
               f"{law.size_factor:.3g} | |"] if law.size_factor != 1.0 else []),
            f"| exported | | | {law.learning_rate:.4g} | {law.batch_tokens:,.0f} "
            "(before rounding to whole sequences) |", "",
            f"The rate's size exponent: {exponent.describe()}."]


def _fallback(ledger: Ledger, exported: TrialRecord, trial: str | None
              ) -> tuple[TrialRecord | None, str]:
    """The recipe ``fallback-recipe.json`` holds, or None and why there is none: the top
    rung's fallback, else the runner-up; none beside a kept baseline (no finalist beat it) or
    an exported ``--trial`` (a control arm, not a pick)."""
    if trial is not None:
        return None, "an exported --trial is a control arm, not a pick"
    if ledger.kept_baseline is not None:
        return None, f"the campaign keeps the baseline: {ledger.kept_because}"
    top = ledger.verdict()
    if top is not None and top.fallback is not None:
        return top.fallback, ""
    return pick_runner_up(ledger.records, exported), "no other recipe completed"


def render_transfer(campaign: str, target: Target, winner: TrialRecord, because: str,
                    exported: Exported, prediction: Prediction,
                    points: list[dict[str, float | int]], runner_up: TrialRecord | None,
                    options: ExportOptions, winner_line: str = "",
                    no_fallback: str = "no other recipe completed",
                    distance: Sequence[str] = (), exponent: SizeExponent = PRIOR) -> str:
    """The human-readable transfer table and prediction, under the campaign's winner line;
    ``no_fallback`` says why there is no fallback when ``runner_up`` is None; ``distance``
    is :func:`export_distance`'s statement."""
    lines = [f"# Cloud recipe: campaign {campaign} → {target.name}", "",
             *([winner_line, ""] if winner_line else []),
             f"Exported {winner.trial_id} (proxy val_bpb {winner.val_bpb:.4f}), chosen as {because}.",
             f"Target: {exported.params:,} parameters; {options.tokens_per_param:g} tokens per "
             f"parameter = {exported.tokens:,} tokens = {exported.recipe.steps:,} steps.", "",
             "| knob | proxy | target | rule |", "|---|---|---|---|"]
    lines += [f"| {t.knob} | {t.proxy} | {t.target} | {t.rule} |" for t in exported.transfers]
    lines += ["", "## The law and its anchor", "", *law_lines(exported.law, exponent)]
    lines += ["", "## Predicted validation curve (val_bpb)", "",
              "| step | tokens | bytes of text | predicted val_bpb | band |",
              "|---|---|---|---|---|"]
    lines += [f"| {p['step']:,} | {p['tokens']:,} | {p['bytes']:,.0f} | {p['val_bpb']:.4f} | "
              f"{p['low']:.4f} – {p['high']:.4f} |" for p in points]
    lines += ["", "It rests on:", ""] + [f"- {a}" for a in prediction.assumptions()]
    lines += ["", *distance]
    lines += ["", "## Running it", ""]
    if exported.memory_problem is not None:
        lines += [f"**It does not fit {options.gpus} GPU(s) of {options.gpu_memory_gib:g} GiB:** "
                  f"{exported.memory_problem}. recipe.json holds the whole global batch in one "
                  "micro-step; give another trainer its numbers, or export again with more GPUs "
                  "(--gpus) or more memory (--gpu-memory-gib).", ""]
    lines += [f"Prepare the data: `{data_command(exported.recipe)}`.", "",
              f"Train ({exported.recipe.precision}, "
              f"{'torch.compile' if exported.compile else 'no torch.compile'}): "
              f"`{launch_command(exported, options)}`."]
    if exported.split is not None:
        lines += ["", f"{torchtitan.FILE} holds the same numbers for torchtitan "
                  f"{torchtitan.RELEASE}: `torchrun --nproc-per-node {options.gpus} -m "
                  f"torchtitan.train --job.config_file {torchtitan.FILE}`."]
    lines += ["", "Check the cloud run against it: `recipelab verify THIS_DIRECTORY "
              "--metrics RUN/metrics.csv` (it reads prediction.json).", ""]
    lines.append(f"Fallback: {runner_up.trial_id} (proxy val_bpb {runner_up.val_bpb:.4f}) in "
                 "fallback-recipe.json, the runner-up moved by the same rules." if runner_up
                 else f"Fallback: none ({no_fallback}).")
    return "\n".join(lines) + "\n"
