"""``recipelab verify``: a long run's val_bpb against the campaign's prediction, on a run that
follows the winner's recipe and on one with a deliberately worse recipe."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.setup.settings import load
from recipelab.cli import app
from recipelab.longrun.pretrain_config import PretrainConfig
from recipelab.longrun.run import run_pretrain
from recipelab.recipe import Recipe
from recipelab.trainer.spec import CorpusSpec
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.prediction import Prediction, predict
from recipelab.transfer.verify import MetricsError, read_evaluations, verify


def _records(campaign: Path) -> list[TrialRecord]:
    with TrajectoryStore(campaign, "nightly", readonly=True) as store:
        return store.records()


def _ledger(campaign: Path) -> Ledger:
    """The campaign's records read under its own ladder settings, as ``verify`` reads them."""
    settings = load(campaign)
    assert settings is not None
    return settings.ladder.ledger(_records(campaign))


def _winner_run_recipe(campaign: Path) -> Recipe:
    """The recipe the prediction rests on: the winner's stress run, as it was trained."""
    records = _records(campaign)
    chosen = _ledger(campaign).recommended
    assert chosen is not None
    source = predict(records, chosen[0]).source_trial
    return Recipe.model_validate(next(r for r in records if r.trial_id == source).recipe)


def _pretrain(recipe: Recipe, out: Path, corpus: CorpusSpec) -> Path:
    run_pretrain(PretrainConfig(recipe=recipe, out_dir=str(out), corpus=corpus, device="cpu",
                                log_every=4, eval_every=8, checkpoint_every=0, threads=1))
    return out / "metrics.csv"


def _verify(campaign: Path, metrics: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["verify", str(campaign), "--metrics", str(metrics)],
                                terminal_width=200)
    return result.exit_code, result.output


def test_a_run_that_follows_the_winners_recipe_is_on_track(
        finished_campaign: Path, tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = _winner_run_recipe(finished_campaign)
    code, output = _verify(finished_campaign, _pretrain(recipe, tmp_path / "good", corpus))
    assert code == 0, output
    assert "verdict: on track" in output and "noise floor" in output


def test_a_run_with_a_worse_recipe_is_worse_by_a_stated_percentage(
        finished_campaign: Path, tmp_path: Path, corpus: CorpusSpec) -> None:
    records = _records(finished_campaign)
    recipe = _winner_run_recipe(finished_campaign)
    worse = recipe.apply({"optimizer.lr": recipe.optimizer.lr / 1000})
    metrics = _pretrain(worse, tmp_path / "bad", corpus)
    code, output = _verify(finished_campaign, metrics)
    assert code == 1 and "verdict: worse than predicted by" in output, output
    chosen = _ledger(finished_campaign).recommended
    assert chosen is not None
    found = verify(predict(records, chosen[0]), read_evaluations(metrics))
    assert found.verdict == "worse" and found.by is not None and found.by > 0.1
    assert f"{found.by:.1%}" in output


PREDICTION = Prediction(source_trial="s0001", fit=None, last_bytes=1000.0, last_val_bpb=2.0,
                        band_base=0.05, noise_spread=0.05, fit_rmse_bpb=None, rank_agreement=None,
                        rank_pairs=0)


def test_a_rising_curve_above_the_band_or_a_nan_is_diverging() -> None:
    assert verify(PREDICTION, [(1, 500.0, 2.0), (2, 1000.0, 2.5), (3, 1000.0, 3.5)]).verdict == "diverging"
    assert verify(PREDICTION, [(1, 500.0, 2.0), (2, 1000.0, math.nan)]).verdict == "diverging"
    flat_above = verify(PREDICTION, [(1, 500.0, 2.5), (2, 1000.0, 2.5)])
    assert flat_above.verdict == "worse" and flat_above.by == pytest.approx(0.25)
    below = verify(PREDICTION, [(1, 1000.0, 1.5)])
    assert below.verdict == "better" and below.by == pytest.approx(-0.25)
    assert "the run is fine, the prediction is not" in below.headline()
    assert verify(PREDICTION, [(1, 1000.0, 2.05)]).verdict == "on track"


def test_a_file_without_evaluations_is_named(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,tokens,bytes_seen,train_loss,val_bpb\n5,10,10,3.0,\n")
    with pytest.raises(MetricsError, match="no evaluation yet"):
        read_evaluations(path)
    with pytest.raises(MetricsError, match="cannot read"):
        read_evaluations(tmp_path / "missing.csv")


def test_verify_reads_the_prediction_an_export_wrote_for_its_target(
        finished_campaign: Path, tmp_path: Path) -> None:
    """The export's prediction carries the target's size term; ``verify EXPORT_DIR`` checks a
    run against it, the same table as ``verify CAMPAIGN`` at the campaign's target."""
    out = tmp_path / "cloud"
    exported = CliRunner().invoke(app, ["export", str(finished_campaign), "--out", str(out),
                                        "--device", "cpu", "--gpus", "1"])
    assert exported.exit_code == 0, exported.output
    written = json.loads((out / "prediction.json").read_text())
    assert written["size"]["target_params"] > written["size"]["proxy_params"]
    metrics = tmp_path / "metrics.csv"
    planned = written["planned"]
    rows = [f"{p['step']},{p['tokens']},{p['bytes']},3.0,2.0,{p['val_bpb'] * 1.001}"
            for p in planned]
    metrics.write_text("step,tokens,bytes_seen,train_loss,val_loss,val_bpb\n" + "\n".join(rows) + "\n")
    from_export = _verify(out, metrics)
    from_campaign = _verify(finished_campaign, metrics)
    far_below = tmp_path / "far-below.csv"  # half the predicted val_bpb: far below the band
    rows = [f"{p['step']},{p['tokens']},{p['bytes']},3.0,2.0,{p['val_bpb'] * 0.5}"
            for p in planned]
    far_below.write_text("step,tokens,bytes_seen,train_loss,val_loss,val_bpb\n"
                         + "\n".join(rows) + "\n")
    better = _verify(out, far_below)
    assert better[0] == 3 and "verdict: better than predicted by 50.0%" in better[1], better[1]
    assert from_export[0] == 0 and "verdict: on track" in from_export[1], from_export[1]
    assert from_campaign[0] == 0, from_campaign[1]
    for point in planned:  # the same predicted value at every evaluation, from either source
        assert f"{point['val_bpb']:.4f}" in from_export[1]
        assert f"{point['val_bpb']:.4f}" in from_campaign[1]
    (out / "prediction.json").write_text("{}")
    broken = _verify(out, metrics)
    assert broken[0] == 2 and "not a prediction 'recipelab export' wrote" in broken[1]
