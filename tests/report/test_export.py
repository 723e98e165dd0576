"""``recipelab export``: the winner at the target's full shape, moved by stated rules, with the
runner-up, the prediction in val_bpb and a manifest."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.recipe import Recipe, get_target, proxy_recipe
from recipelab.report.export import (
    BATCH_COEFFICIENT,
    BATCH_EXPONENT,
    MAX_WARMUP_FRACTION,
    ExportOptions,
    pick_runner_up,
    pick_winner,
    transfer,
)
from recipelab.report.prediction import predict
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.horizon import horizon_rule
from recipelab.trajectory.record import TrialRecord

PROXY = proxy_recipe("cpu", "llama2-7b")


def test_a_bpe_target_gets_its_tokenizer_batch_rule_width_scaled_lr_and_warmup_in_tokens() -> None:
    target = get_target("llama2-7b")
    winner = PROXY.apply({"optimizer.lr": 0.004, "schedule.warmup_steps": 6})
    exported = transfer(winner, {}, target, ExportOptions())
    recipe = exported.recipe
    assert recipe.tokenizer == "bpe" and recipe.shape.vocab_size == 32000
    assert recipe.shape == target.shape and recipe.seq_len == 4096
    flops = float(recipe.flops_per_token()) * exported.tokens
    rule = BATCH_COEFFICIENT * flops ** BATCH_EXPONENT
    assert recipe.batch_size % 8 == 0 and abs(recipe.tokens_per_step - rule) <= 8 * 4096
    assert 2e6 < recipe.tokens_per_step < 8e6  # what Llama-scale runs use: millions of tokens
    assert math.isclose(recipe.optimizer.lr, 0.004 * PROXY.shape.d_model / 4096)
    assert exported.tokens == math.ceil(20 * exported.params)
    assert recipe.steps == math.ceil(exported.tokens / recipe.tokens_per_step)
    assert recipe.schedule.warmup_steps * recipe.tokens_per_step <= (
        MAX_WARMUP_FRACTION * exported.tokens + recipe.tokens_per_step)
    assert recipe.eval_bytes >= 8 << 20
    rules = {t.knob: t for t in exported.transfers}
    assert rules["optimizer.lr"].proxy == "0.004" and "muP" in rules["optimizer.lr"].rule
    assert "2401.02954" in rules["global batch (tokens)"].rule
    horizon = transfer(winner, {}, target, ExportOptions(lr_horizon_exponent=0.1)).recipe
    assert horizon.optimizer.lr < recipe.optimizer.lr  # a longer run trains at a lower rate


def test_tokens_per_param_sets_the_planned_steps() -> None:
    target = get_target("smollm2-135m")
    short = transfer(PROXY, {}, target, ExportOptions(tokens_per_param=5))
    assert short.tokens == math.ceil(5 * short.params)
    assert short.recipe.steps == math.ceil(short.tokens / short.recipe.tokens_per_step)


def test_export_writes_the_recipe_train_reads_the_fallback_the_prediction_and_a_manifest(
        finished_campaign: Path, tmp_path: Path) -> None:
    out = tmp_path / "cloud"
    result = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(out),
                                      "--eval-bytes", "65536"])
    assert result.exit_code == 0, result.output
    recipe = Recipe.model_validate_json((out / "recipe.json").read_text())
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    chosen = pick_winner(records)
    assert chosen is not None
    winner = chosen[0]
    target = get_target("toy")
    assert recipe.shape.n_layer == target.shape.n_layer and recipe.seq_len == target.context
    assert recipe.eval_bytes == 65536
    runner_up = pick_runner_up(records, winner)
    assert runner_up is not None and runner_up.trial_id != winner.trial_id
    fallback = Recipe.model_validate_json((out / "fallback-recipe.json").read_text())
    assert fallback.optimizer.lr != recipe.optimizer.lr or fallback != recipe
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["campaign"] == "nightly" and manifest["winner"] == winner.trial_id
    assert manifest["runner_up"] == runner_up.trial_id and manifest["seed"] == recipe.seed
    assert manifest["code_version"] and "torch" in manifest["libraries"] and manifest["device"]
    assert manifest["config_hash"] and manifest["recipe_fingerprint"] == recipe.fingerprint()
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["units"].startswith("val_bpb")
    planned = prediction["planned"]
    assert planned[-1]["step"] == recipe.steps
    assert all(p["low"] < p["val_bpb"] < p["high"] for p in planned)
    table = (out / "transfer.md").read_text()
    for knob in ("tokenizer", "global batch (tokens)", "optimizer.lr", "warm-up (tokens)",
                 "eval_bytes", "steps"):
        assert f"| {knob} |" in table
    assert "noise floor" in table and "rank agreement" in table
    # the exported file is what 'recipelab train --recipe' reads
    shown = CliRunner().invoke(app, ["train", "--recipe", str(out / "recipe.json"), "--print-recipe"])
    assert shown.exit_code == 0, shown.output


def test_the_prediction_is_in_val_bpb_anchored_at_the_winners_measured_value(
        finished_campaign: Path) -> None:
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    chosen = pick_winner(records)
    assert chosen is not None
    prediction = predict(records, chosen[0])
    assert prediction.source_trial.startswith("s")  # the winner's stress run
    end = prediction.center(prediction.last_bytes)
    assert abs(end - prediction.last_val_bpb) <= prediction.half_width(prediction.last_bytes)
    # read a hundred times past its range, the band widens instead of pretending
    assert prediction.half_width(100 * prediction.last_bytes) > prediction.half_width(
        prediction.last_bytes)
    assert prediction.center(100 * prediction.last_bytes) <= end


def test_export_of_a_campaign_without_a_completed_trial_says_what_to_do(tmp_path: Path) -> None:
    from recipelab.agent.settings import CampaignSettings, save

    directory = tmp_path / "empty"
    directory.mkdir()
    save(CampaignSettings(name="empty", preset="tiny"), directory)
    with TrajectoryStore(directory, "empty"):
        pass
    result = CliRunner().invoke(app, ["export", str(directory), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no proxy trial has completed yet" in result.output


def test_export_moves_the_learning_rate_by_the_campaigns_fitted_horizon_rule(
        finished_campaign: Path, tmp_path: Path) -> None:
    """Without --lr-horizon-exponent the rule fitted from the proxies and the rung applies
    (here the rung's best rate is below the proxies')."""
    directory = tmp_path / "nightly"
    shutil.copytree(finished_campaign, directory)
    base = proxy_recipe("tiny")
    with TrajectoryStore(directory, "nightly") as store:
        for i, lr in enumerate((1e-3, 3e-3, 1e-2, 3e-2)):
            for kind, steps, best in (("proxy", 20, 1e-2), ("rung", 80, 5e-3)):
                recipe = base.apply({"optimizer.lr": lr, "steps": steps})
                store.append(TrialRecord(
                    campaign="nightly", trial_id=f"{kind[0]}9{i:03d}", kind=kind,
                    status="complete", val_bpb=9.0 + 0.1 * math.log(lr / best) ** 2,
                    recipe=recipe.model_dump(mode="json"), fingerprint=recipe.fingerprint(),
                    proposer="classical-tpe", edit={"optimizer.lr": lr}))

    def exported_lr(*options: str) -> float:
        out = tmp_path / f"cloud{len(options)}"
        result = CliRunner().invoke(app, ["export", str(directory), "--out", str(out), *options])
        assert result.exit_code == 0, result.output
        return Recipe.model_validate_json((out / "recipe.json").read_text()).optimizer.lr

    with TrajectoryStore(directory, "nightly", readonly=True) as store:
        alpha = horizon_rule(store.records()).alpha
    assert alpha > 0
    fitted, none = exported_lr(), exported_lr("--lr-horizon-exponent", "0")
    assert fitted < none
    assert f"^-{alpha:g} " in (tmp_path / "cloud0" / "transfer.md").read_text()
