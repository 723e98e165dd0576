"""``recipelab export``: the winner at the target's full shape, moved by stated rules, with the
runner-up, the prediction in val_bpb and a manifest."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.recipe import Recipe, Shape
from recipelab.report.context import ReportContext
from recipelab.report.document import Table
from recipelab.report.sections import recommendation
from recipelab.targets import Target, get_target, proxy_recipe
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.export import (
    MAX_WARMUP_FRACTION,
    ExportOptions,
    pick_runner_up,
    transfer,
)
from recipelab.transfer.prediction import predict
from recipelab.transfer.steplaw import Anchored

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML; 3.10 has no tomllib")

PROXY = proxy_recipe("cpu", "llama2-7b")


def test_a_bpe_target_gets_its_tokenizer_the_laws_batch_and_rate_and_warmup_in_tokens() -> None:
    target = get_target("llama2-7b")
    winner = PROXY.apply({"optimizer.lr": 0.004, "schedule.warmup_steps": 6, "steps": 1000})
    exported = transfer(winner, {}, target, ExportOptions(gpu_memory_gib=192))  # 8 B200s
    recipe = exported.recipe
    assert recipe.tokenizer == "bpe" and recipe.shape.vocab_size == 32000
    assert recipe.shape == target.shape and recipe.seq_len == 4096
    law = Anchored.at(winner, target.shape, exported.tokens)
    assert exported.law == law
    assert recipe.batch_size % 8 == 0 and abs(recipe.tokens_per_step - law.batch_tokens) <= 8 * 4096
    assert 1e6 < recipe.tokens_per_step < 8e6  # what Llama-scale runs use: millions of tokens
    assert math.isclose(recipe.optimizer.lr, law.target.learning_rate * 0.004 / law.proxy.learning_rate)
    assert 1e-4 < recipe.optimizer.lr < 1e-3  # what 7B runs train at
    assert exported.tokens == math.ceil(20 * exported.params)
    assert recipe.steps == math.ceil(exported.tokens / recipe.tokens_per_step)
    assert recipe.schedule.warmup_steps * recipe.tokens_per_step <= (
        MAX_WARMUP_FRACTION * exported.tokens + recipe.tokens_per_step)
    assert recipe.eval_bytes >= 8 << 20
    rules = {t.knob: t for t in exported.transfers}
    assert rules["optimizer.lr"].proxy == "0.004" and "2503.04715" in rules["optimizer.lr"].rule
    assert "anchored" in rules["optimizer.lr"].rule and "2503.04715" in rules[
        "global batch (tokens)"].rule


GPT2_SMALL = Target("gpt2-small", "GPT-2 small's shape", Shape(
    n_layer=12, d_model=768, n_head=12, n_kv_head=12, head_dim=64, ffn_ratio=4,
    activation="gelu", norm="layernorm", position="learned", tie_embeddings=True,
    vocab_size=50304), 1024)


def test_a_cuda_target_trains_in_bf16_with_torch_compile_unless_the_winner_chose_otherwise() -> None:
    target = get_target("toy")
    assert PROXY.precision == "fp32"  # a CPU proxy
    plain = transfer(PROXY, {}, target, ExportOptions())
    assert plain.recipe.precision == "bf16" and plain.compile
    assert "not a knob the campaign chose" in plain.precision_rule
    fp8 = transfer(PROXY.apply({"precision": "fp8"}), {"precision": "fp8"}, target, ExportOptions())
    assert fp8.recipe.precision == "fp8" and not fp8.compile  # TE's delayed scaling refuses it
    chosen = proxy_recipe("spark", "toy", 1_000_000).apply({"precision": "fp32"})
    kept = transfer(chosen, {"precision": "fp32"}, target, ExportOptions())
    assert kept.recipe.precision == "fp32" and "edit chose fp32" in kept.precision_rule
    on_cpu = transfer(PROXY, {}, target, ExportOptions(device="cpu"))
    assert on_cpu.recipe.precision == "fp32" and not on_cpu.compile


def test_the_exported_micro_batch_fits_the_gpu_memory_and_keeps_the_global_batch() -> None:
    roomy = transfer(PROXY, {}, GPT2_SMALL, ExportOptions(gpus=1, gpu_memory_gib=80))
    tight = transfer(PROXY, {}, GPT2_SMALL, ExportOptions(gpus=1, gpu_memory_gib=24))
    assert roomy.split is not None and tight.split is not None
    assert roomy.recipe.tokens_per_step == tight.recipe.tokens_per_step
    assert tight.recipe.batch_size < roomy.recipe.batch_size
    assert tight.split.peak_bytes <= 24 * 0.9 * (1 << 30) < tight.split.naive_peak_bytes


def test_a_winner_that_fits_no_gpu_is_still_written_with_the_reason(
        finished_campaign: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(finished_campaign), "--out",
                                      str(tmp_path / "o"), "--gpu-memory-gib", "0.5"])
    assert result.exit_code == 0, result.output
    message = " ".join(result.output.split())
    assert "Warning: the recipe does not fit 8 GPU(s) of 0.5 GiB" in message
    assert "recipe.json is written for another trainer" in message
    Recipe.model_validate_json((tmp_path / "o" / "recipe.json").read_text())
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert "CUDA context" in manifest["run_on"]["problem"]
    assert "does not fit 8 GPU(s) of 0.5 GiB" in (tmp_path / "o" / "transfer.md").read_text()
    assert not (tmp_path / "o" / "torchtitan.toml").exists(), "no micro-batch to write into it"


def test_the_seeds_7b_target_exports_sharded_with_a_torchtitan_config(
        finished_campaign: Path, tmp_path: Path) -> None:
    """A whole 7B copy with AdamW needs about 160 GiB a GPU; sharded over 8 it fits 80."""
    out = tmp_path / "seven"
    result = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(out),
                                      "--target", "llama2-7b"])
    assert result.exit_code == 0, result.output
    run_on = json.loads((out / "manifest.json").read_text())["run_on"]
    assert run_on["sharding"] == "full" and "a whole copy per GPU needs" in run_on["why_sharded"]
    assert run_on["predicted_peak_gib_per_gpu"] <= 80 * 0.9
    assert "-m recipelab pretrain" in run_on["command"] and "--sharding full" in run_on["command"]
    config = tomllib.loads((out / "torchtitan.toml").read_text())
    recipe = Recipe.model_validate_json((out / "recipe.json").read_text())
    assert config["parallelism"]["data_parallel_shard_degree"] == 8
    assert config["optimizer"]["lr"] == recipe.optimizer.lr
    assert config["training"]["global_batch_size"] == recipe.batch_size * recipe.grad_accum
    unsharded = CliRunner().invoke(app, ["export", str(finished_campaign), "--out",
                                         str(tmp_path / "whole"), "--target", "llama2-7b",
                                         "--sharding", "none"])
    assert unsharded.exit_code == 0 and "shard it (--sharding auto)" in " ".join(
        unsharded.output.split())


def test_tokens_per_param_sets_the_planned_steps() -> None:
    target = get_target("smollm2-135m")
    short = transfer(PROXY, {}, target, ExportOptions(tokens_per_param=5))
    assert short.tokens == math.ceil(5 * short.params)
    assert short.recipe.steps == math.ceil(short.tokens / short.recipe.tokens_per_step)


def test_export_writes_the_recipe_train_reads_the_fallback_the_prediction_and_a_manifest(
        attributed_campaign: Path, tmp_path: Path) -> None:
    """On the fake executor's campaign, whose winner is the same on every machine (the real
    trainer's ``finished_campaign`` may end with the baseline kept, which has no fallback)."""
    out = tmp_path / "cloud"
    result = CliRunner().invoke(app, ["export", str(attributed_campaign), "--out", str(out),
                                      "--eval-bytes", "65536"])
    assert result.exit_code == 0, result.output
    recipe = Recipe.model_validate_json((out / "recipe.json").read_text())
    with TrajectoryStore(attributed_campaign, "attributed", readonly=True) as store:
        records = store.records()
    chosen = Ledger(records).recommended
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
    assert manifest["campaign"] == "attributed" and manifest["winner"] == winner.trial_id
    assert manifest["runner_up"] == runner_up.trial_id and manifest["seed"] == recipe.seed
    assert manifest["code_version"] and "torch" in manifest["libraries"] and manifest["device"]
    assert manifest["config_hash"] and manifest["recipe_fingerprint"] == recipe.fingerprint()
    run_on = manifest["run_on"]
    assert recipe.precision == run_on["precision"] == "bf16" and run_on["compile"] is True
    assert run_on["command"].startswith("torchrun --standalone --nproc-per-node 8 -m recipelab "
                                        "pretrain --recipe recipe.json")
    assert "--compile" in run_on["command"] and "tokenize" in run_on["data_command"]
    assert recipe.batch_size == 8 * run_on["micro_batch_per_gpu"]
    assert recipe.grad_accum == run_on["grad_accum"]
    assert run_on["predicted_peak_gib_per_gpu"] <= 0.9 * 80
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
    chosen = Ledger(records).recommended
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
    from recipelab.agent.setup.settings import CampaignSettings, save

    directory = tmp_path / "empty"
    directory.mkdir()
    save(CampaignSettings(name="empty", preset="tiny"), directory)
    with TrajectoryStore(directory, "empty"):
        pass
    result = CliRunner().invoke(app, ["export", str(directory), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no proxy trial has completed yet" in result.output


def test_export_anchors_the_law_at_the_winners_measured_rate_and_names_both(
        finished_campaign: Path, tmp_path: Path) -> None:
    """The winner's rate in its longest run on the proxy sets the level; the law sets the
    ratio. The deprecated
    --lr-horizon-exponent warns and changes nothing."""
    out, old = tmp_path / "cloud", tmp_path / "old"
    result = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(out)])
    assert result.exit_code == 0, result.output
    deprecated = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(old),
                                          "--lr-horizon-exponent", "0.5"])
    assert deprecated.exit_code == 0 and "deprecated and ignored" in deprecated.output
    assert (old / "recipe.json").read_text() == (out / "recipe.json").read_text()
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    winner = Ledger(records).recommended[0]  # type: ignore[index]
    longest = Ledger(records).longest_run(winner)
    assert longest.kind == "stress" and longest.tokens > winner.tokens
    measured = Recipe.model_validate(longest.recipe)
    law = json.loads((out / "manifest.json").read_text())["law"]
    assert law["proxy"]["measured_lr"] == measured.optimizer.lr
    assert law["proxy"]["tokens"] == measured.tokens
    exported = Recipe.model_validate_json((out / "recipe.json").read_text())
    assert math.isclose(exported.optimizer.lr, law["target"]["law_lr"] * law["lr_anchor"])
    table = (out / "transfer.md").read_text()
    assert "Step Law" in table and f"anchored × {law['lr_anchor']:.3g}" in table


def add_horizon_trials(directory: Path) -> None:
    """The baseline's learning-rate family (lr × {½, 1, 2}) at the proxy's budget and at a
    rung four times longer, from which a horizon rule is fitted (the rung's best rate below
    the proxy's)."""
    with TrajectoryStore(directory, "nightly") as store:
        baseline = next(r for r in store.records() if r.proposer == "baseline")
        base = Recipe.model_validate(baseline.recipe)
        for steps, best in ((base.steps, base.optimizer.lr), (4 * base.steps, base.optimizer.lr / 2)):
            for i, m in enumerate((0.5, 1.0, 2.0)):
                lr = base.optimizer.lr * m
                recipe = base.apply({"optimizer.lr": lr, "steps": steps})
                store.append(TrialRecord(
                    campaign="nightly", trial_id=f"r9{steps:03d}{i}", kind="rung",
                    status="complete", val_bpb=9.0 + 0.1 * math.log(lr / best) ** 2,
                    recipe=recipe.model_dump(mode="json"), fingerprint=recipe.fingerprint(),
                    parent=baseline.trial_id, budget=steps, edit={"lr_family": m},
                    proposer="lr-family" if m != 1.0 else "baseline"))


def test_the_report_and_the_export_recommend_the_same_learning_rate(
        finished_campaign: Path, tmp_path: Path) -> None:
    """The report's recommendation and recipe.json carry one rate."""
    directory = tmp_path / "nightly"
    shutil.copytree(finished_campaign, directory)
    add_horizon_trials(directory)
    out = tmp_path / "cloud"
    result = CliRunner().invoke(app, ["export", str(directory), "--out", str(out)])
    assert result.exit_code == 0, result.output
    exported = Recipe.model_validate_json((out / "recipe.json").read_text()).optimizer.lr
    with TrajectoryStore(directory, "nightly", readonly=True) as store:
        records = store.records()
    section = recommendation(Ledger(records), ReportContext("nightly", get_target("toy"), "tiny"))
    table = next(b for b in section.blocks if isinstance(b, Table))
    shown = {row[0]: row[2] for row in table.rows}["optimizer.lr"]
    assert shown == f"{exported:.4g}"


def test_export_recommends_the_minimal_edit_and_writes_the_full_one_and_attribution_json(
        attributed_campaign: Path, tmp_path: Path) -> None:
    out = tmp_path / "cloud"
    result = CliRunner().invoke(app, ["export", str(attributed_campaign), "--out", str(out)])
    assert result.exit_code == 0, result.output
    recommended = Recipe.model_validate_json((out / "recipe.json").read_text())
    full = Recipe.model_validate_json((out / "full-recipe.json").read_text())
    baseline_eps = proxy_recipe("tiny").optimizer.eps
    assert recommended.optimizer.eps == baseline_eps and full.optimizer.eps == 1e-10
    assert recommended.optimizer.lr == full.optimizer.lr  # the kept change moves the same way
    attribution = json.loads((out / "attribution.json").read_text())
    groups = {g["group"]: g for g in attribution["groups"]}
    assert set(groups) == {"learning rate", "optimizer betas"}
    assert groups["learning rate"]["kept"] and groups["learning rate"]["knobs"] == {
        "optimizer.lr": 0.003}
    assert not groups["optimizer betas"]["kept"]
    for group in groups.values():
        assert group["low"] <= group["contribution"] <= group["high"]
    assert attribution["minimal_edit"] == {"optimizer.lr": 0.003}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recommended"] == "minimal edit"
    assert "full-recipe.json is the winner's whole edit" in (out / "transfer.md").read_text()


def test_export_trial_moves_the_baseline_by_the_same_rules_as_a_control_arm(
        finished_campaign: Path, tmp_path: Path) -> None:
    out = tmp_path / "baseline"
    result = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(out),
                                      "--trial", "p0000", "--device", "cpu", "--gpus", "1"])
    assert result.exit_code == 0, result.output
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    baseline = next(r for r in records if r.trial_id == "p0000")
    measured = Recipe.model_validate(Ledger(records).longest_run(baseline).recipe)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["winner"] == "p0000" and "--trial p0000" in manifest["chosen_because"]
    assert manifest["law"]["proxy"]["measured_lr"] == measured.optimizer.lr
    exported = Recipe.model_validate_json((out / "recipe.json").read_text())
    assert exported == transfer(measured, {}, get_target("toy"),
                                ExportOptions(device="cpu", gpus=1)).recipe
    assert not (out / "fallback-recipe.json").exists(), "a control arm has no fallback"
    transfer_md = (out / "transfer.md").read_text()
    assert "Exported p0000 (proxy val_bpb" in transfer_md
    assert "chosen as the trial named by --trial p0000" in transfer_md
    assert "Fallback: none (an exported --trial is a control arm, not a pick)." in transfer_md

    unknown = CliRunner().invoke(app, ["export", str(finished_campaign), "--out",
                                       str(tmp_path / "x"), "--trial", "p0999"])
    assert unknown.exit_code == 2 and "no trained proxy trial 'p0999'" in unknown.output
    assert "p0000 is the baseline" in unknown.output and not (tmp_path / "x").exists()
