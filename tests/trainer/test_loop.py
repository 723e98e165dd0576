"""Specification of one trial run in-process: what a complete result holds, and how each
kind of failure (nan, diverged, crash) becomes a result rather than an exception."""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from recipelab.ratio import ratio_stderr
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from recipelab.trainer.data import DataError, load_dataset
from recipelab.trainer.evaluate import EVAL_BLOCKS
from recipelab.trainer.loop import TrialRunner, run_trial
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import CorpusSpec, CurvePoint, TrialResult, TrialSpec

TINY = proxy_recipe("tiny")


@dataclass
class Run:
    spec: TrialSpec
    result: TrialResult
    log: str


def run(out_dir: Path, corpus: CorpusSpec, recipe: Recipe = TINY, **fields: Any) -> Run:
    spec = TrialSpec(trial_id="t1", recipe=recipe, corpus=corpus, out_dir=str(out_dir),
                     device="cpu", **fields)
    log = io.StringIO()
    result = run_trial(spec, log=log)
    return Run(spec, result, log.getvalue())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, corpus: CorpusSpec) -> Run:
    """The tiny preset, 20 steps, a curve point every 5."""
    return run(tmp_path_factory.mktemp("tiny"), corpus, log_every=5)


# --- a complete trial ---------------------------------------------------------------------


def test_the_tiny_preset_completes_with_a_finite_val_bpb_better_than_a_uniform_guess(
    tiny: Run,
) -> None:
    result = tiny.result
    assert (result.status, result.reason, result.message) == ("complete", None, None)
    assert result.val_bpb is not None and math.isfinite(result.val_bpb)
    assert 0 < result.val_bpb < 8.0  # 8 bits per byte is a uniform guess over bytes
    assert result.steps_done == TINY.steps == 20
    assert result.resumed_from_step is None


def test_a_complete_result_carries_the_slices_blocks_for_a_gains_error(tiny: Run) -> None:
    blocks = tiny.result.eval_blocks
    assert blocks is not None and len(blocks.nats) == len(blocks.bytes) == EVAL_BLOCKS
    assert min(blocks.bytes) > 0
    assert sum(blocks.nats) / (math.log(2) * sum(blocks.bytes)) == pytest.approx(
        tiny.result.val_bpb, rel=1e-5)
    assert tiny.result.val_bpb_stderr == pytest.approx(ratio_stderr(blocks.nats, blocks.bytes))


def test_the_curve_has_a_point_every_log_every_steps_with_the_scheduled_lr(tiny: Run) -> None:
    curve = tiny.result.curve
    assert [p.step for p in curve] == [5, 10, 15, 20]
    for point in curve:
        assert math.isfinite(point.loss) and point.loss > 0
        assert point.grad_norm > 0
        last_step = point.step - 1  # the lr of the point's own (0-based) step
        assert point.lr == pytest.approx(
            TINY.optimizer.lr * TINY.schedule.lr_multiplier(last_step, TINY.steps), rel=1e-12)


def test_the_log_says_each_curve_point_as_it_happens_and_reads_back_as_the_curve(
        tiny: Run) -> None:
    """What the live report plots of a trial in flight is the curve its result will hold."""
    read = CurvePoint.from_log(tiny.log)

    assert [p.step for p in read] == [p.step for p in tiny.result.curve]
    assert [p.loss for p in read] == pytest.approx([p.loss for p in tiny.result.curve], abs=1e-4)
    cut_short = tiny.log[:tiny.log.index("step 15")] + "step 15 loss 3.1"
    assert [p.step for p in CurvePoint.from_log(cut_short)] == [5, 10]


def test_training_lowers_the_loss_and_train_loss_is_the_last_points(tiny: Run) -> None:
    curve = tiny.result.curve
    assert curve[-1].loss < curve[0].loss < math.log(256) * 1.05
    assert tiny.result.train_loss == curve[-1].loss


def test_a_complete_result_reports_throughput_memory_and_the_recipes_parameter_count(
    tiny: Run,
) -> None:
    result = tiny.result
    assert result.tokens_per_s is not None and result.tokens_per_s > 0
    assert result.step_ms is not None and result.step_ms > 0
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 0
    assert result.params == TINY.param_count()
    for seconds in (result.setup_s, result.train_s, result.eval_s):
        assert seconds is not None and seconds >= 0


def test_a_complete_result_carries_its_provenance(tiny: Run) -> None:
    provenance = tiny.result.provenance
    assert provenance is not None
    assert provenance.seed == TINY.seed
    assert provenance.device.startswith("cpu")
    assert provenance.host and provenance.code_version and provenance.python
    assert {"torch", "numpy", "python", "recipelab"} <= set(provenance.libraries)
    assert provenance.threads >= 1


def test_the_log_reports_the_model_the_curve_and_the_score(tiny: Run) -> None:
    assert f"{TINY.param_count():,} parameters on cpu" in tiny.log
    assert "step 20 loss" in tiny.log
    assert tiny.result.val_bpb is not None
    assert f"val_bpb {tiny.result.val_bpb:.4f}" in tiny.log


def test_the_same_spec_gives_the_same_curve_and_val_bpb(
    tiny: Run, tmp_path: Path, corpus: CorpusSpec,
) -> None:
    again = run(tmp_path, corpus, log_every=5).result
    assert again.curve == tiny.result.curve
    assert again.val_bpb == tiny.result.val_bpb


def test_the_last_step_is_logged_even_off_the_log_every_grid(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    recipe = TINY.apply({"steps": 8})
    result = run(tmp_path, corpus, recipe, log_every=3).result
    assert result.status == "complete"
    assert [p.step for p in result.curve] == [3, 6, 8]


def test_gradient_accumulation_trains_to_completion(tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = TINY.apply({"steps": 4, "grad_accum": 2, "batch_size": 4})
    result = run(tmp_path, corpus, recipe, log_every=2).result
    assert result.status == "complete"
    assert [p.step for p in result.curve] == [2, 4]


# --- failures -----------------------------------------------------------------------------


def test_an_unclipped_learning_rate_of_one_ends_as_failed_nan_or_diverged(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    recipe = TINY.apply({"optimizer.lr": 1.0, "optimizer.grad_clip": 0.0})
    result = run(tmp_path, corpus, recipe).result
    assert result.status == "failed"
    assert result.reason in {"nan", "diverged"}
    assert result.steps_done < recipe.steps
    assert result.val_bpb is None


def test_a_loss_that_becomes_nan_ends_the_trial_as_failed_nan(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    """An AdamW eps that rounds to 0 in float32 divides 0 by 0 for embedding rows whose
    tokens were absent from the batch; the next batch holding such a token gives NaN."""
    recipe = TINY.apply({"optimizer.eps": 1e-50, "shape.tie_embeddings": False})
    result = run(tmp_path, corpus, recipe, log_every=1).result
    assert (result.status, result.reason) == ("failed", "nan")
    assert result.message is not None and "nan" in result.message
    assert result.curve and math.isnan(result.curve[-1].loss)
    assert all(math.isfinite(p.loss) for p in result.curve[:-1])
    assert result.steps_done == result.curve[-1].step < recipe.steps


def test_a_loss_above_divergence_factor_times_ln_vocab_ends_as_failed_diverged(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    recipe = TINY.apply({"optimizer.lr": 1.0, "optimizer.grad_clip": 0.0})
    done = run(tmp_path, corpus, recipe, log_every=1, divergence_factor=1.01)
    result = done.result
    limit = 1.01 * math.log(256)
    assert (result.status, result.reason) == ("failed", "diverged")
    assert result.curve[-1].loss > limit
    assert all(p.loss <= limit for p in result.curve[:-1])
    assert result.steps_done == result.curve[-1].step < recipe.steps
    assert result.message is not None and f"{limit:.3f}" in result.message
    assert "trial failed (diverged)" in done.log


def test_fp8_on_the_cpu_fails_at_once_as_a_crash_without_training(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    done = run(tmp_path, corpus, TINY.apply({"precision": "fp8"}))
    result = done.result
    assert (result.status, result.reason) == ("failed", "crash")
    assert result.message is not None and "fp8" in result.message
    assert result.steps_done == 0 and result.curve == []
    assert "step " not in done.log


def data_error(corpus: CorpusSpec, recipe: Recipe) -> str:
    with pytest.raises(DataError) as info:
        load_dataset(corpus, tokenizer=recipe.tokenizer, vocab_size=recipe.shape.vocab_size,
                     eval_bytes=recipe.eval_bytes,
                     min_train_tokens=recipe.batch_size * recipe.seq_len + 1)
    return str(info.value)


def test_a_missing_corpus_path_fails_with_the_data_error_as_its_message(tmp_path: Path) -> None:
    corpus = CorpusSpec(source=str(tmp_path / "no-such-corpus"), cache_dir=str(tmp_path))
    result = run(tmp_path / "out", corpus).result
    assert (result.status, result.reason) == ("failed", "crash")
    assert result.message == data_error(corpus, TINY)
    assert "no-such-corpus" in result.message
    assert result.steps_done == 0


def test_a_corpus_smaller_than_one_batch_fails_with_the_data_error_as_its_message(
    tmp_path: Path,
) -> None:
    text = tmp_path / "small.txt"
    text.write_text("".join(f"line {i} of a corpus far too small\n" for i in range(30)))
    corpus = CorpusSpec(source=str(text), cache_dir=str(tmp_path / "cache"), val_fraction=0.4)
    recipe = TINY.apply({"seq_len": 128, "eval_bytes": 256})
    result = run(tmp_path / "out", corpus, recipe).result
    message = data_error(corpus, recipe)
    assert "one batch needs 1,025" in message  # batch_size 8 × seq_len 128, plus one target
    assert (result.status, result.reason, result.message) == ("failed", "crash", message)
    assert result.steps_done == 0


# --- the optimizer groups and the stability knobs -----------------------------------------

GOLDEN_LOSSES = [5.358485698699951, 5.017431735992432, 4.3558349609375, 3.7799668312072754,
                 3.534456729888916, 3.3565549850463867, 3.2519948482513428, 3.466308832168579]
GOLDEN_VAL_BPB = 4.938318048122045  # on the evaluation slice spread across the text
"""The tiny preset for 8 steps (warmup 2), a point per step, recorded with the code before
the optimizer groups, WSD, z-loss, soft-capping and init scales were knobs."""


def test_the_default_recipe_trains_exactly_as_before_the_new_knobs(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    recipe = TINY.apply({"steps": 8, "schedule.warmup_steps": 2})
    result = run(tmp_path, corpus, recipe, log_every=1).result
    # Exact on the machine that recorded them; the tolerance only absorbs other CPUs' kernels.
    assert [p.loss for p in result.curve] == pytest.approx(GOLDEN_LOSSES, rel=1e-5)
    assert result.val_bpb == pytest.approx(GOLDEN_VAL_BPB, rel=1e-5)


def test_the_training_loop_applies_the_multipliers_through_the_schedule(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    recipe = TINY.apply({"steps": 3, "optimizer.lr_embed_mult": 1e-6})
    spec = TrialSpec(trial_id="t1", recipe=recipe, corpus=corpus, out_dir=str(tmp_path),
                     device="cpu")
    data = load_dataset(corpus, tokenizer=recipe.tokenizer, vocab_size=recipe.shape.vocab_size,
                        eval_bytes=recipe.eval_bytes,
                        min_train_tokens=recipe.batch_size * recipe.seq_len + 1)
    torch.manual_seed(0)
    gpt = GPT(recipe.shape, recipe.seq_len)
    up = gpt.blocks[0].ffn.up.weight  # type: ignore[union-attr]
    assert isinstance(up, torch.Tensor)
    embed, hidden = gpt.embed.weight.detach().clone(), up.detach().clone()
    TrialRunner(spec, False, io.StringIO()).train(gpt, data, torch.device("cpu"),
                                                  contextlib.nullcontext)
    embed_moved = (gpt.embed.weight - embed).abs().max().item()
    hidden_moved = (up - hidden).abs().max().item()
    # AdamW moves a weight by about lr per step: 1e-8 for the embeddings, 1e-2 for the rest.
    assert embed_moved < 1e-6 < 1e-3 < hidden_moved


def test_z_loss_changes_training_but_not_the_first_steps_loss(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    plain = run(tmp_path / "a", corpus, TINY.apply({"steps": 3}), log_every=1).result
    pulled = run(tmp_path / "b", corpus, TINY.apply({"steps": 3, "stability.z_loss": 0.1}),
                 log_every=1).result
    assert pulled.curve[0].loss == plain.curve[0].loss  # the curve is cross-entropy alone
    assert pulled.curve[-1].loss != plain.curve[-1].loss


def test_a_wsd_recipe_trains_with_its_decay_fraction(tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = TINY.apply({"steps": 10, "schedule.kind": "wsd", "schedule.warmup_steps": 2,
                         "schedule.decay_fraction": 0.3})
    result = run(tmp_path, corpus, recipe, log_every=1).result
    assert result.status == "complete"
    lrs = [p.lr / recipe.optimizer.lr for p in result.curve]
    assert lrs[1:7] == [1.0] * 6 and lrs[-1] == pytest.approx(recipe.schedule.min_lr_ratio)
