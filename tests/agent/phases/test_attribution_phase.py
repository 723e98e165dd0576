"""The attribution phase on the in-memory fake executor: which runs it launches, what it
decides, how it survives a crash, and what it does when the window has no room for it.

The fake's val_bpb (recipelab.runner.fake.synthetic_val_bpb) is best at a learning rate of
3e-3 and ignores ``optimizer.eps`` altogether; the tiny baseline trains at 1e-2. So an edit
of both has a real gain that comes from its learning rate and a planted neutral part.
``recipe_noise`` gives each recipe its own share of the seed's effect, so the paired
intervals have a width, as with a real trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign, CampaignSummary
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.trajectory.attribution import ATTRIBUTION_KIND, RESULT_KIND, variant_key

from ..conftest import ScriptedProposer, events, fake_executor, read_jsonl

PLANTED = {"optimizer.lr": 3e-3, "optimizer.eps": 1e-10}


@pytest.fixture
def settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    # three baseline seeds measure the paired noise floor, then the one scripted edit
    return tiny_settings.model_copy(update={"iterations": 4, "noise_seeds": 3, "promote": 1,
                                            "attribution": True, "top_seeds": 3,
                                            "close_call_seeds": 2})


def run(settings: CampaignSettings, directory: Path, **executor: object) -> CampaignSummary:
    campaign = Campaign(settings, directory, proposer=ScriptedProposer(settings.baseline(),
                                                                       [PLANTED]),
                        executor=fake_executor(recipe_noise=0.002, **executor))
    return campaign.run()


def of_kind(directory: Path, kind: str) -> list[dict[str, object]]:
    return [r for r in read_jsonl(directory / "trajectory.jsonl") if r["kind"] == kind]


def test_a_planted_neutral_edit_is_dropped_and_the_real_one_kept(
        settings: CampaignSettings, tmp_path: Path) -> None:
    summary = run(settings, tmp_path)
    runs = of_kind(tmp_path, ATTRIBUTION_KIND)
    # baseline, winner, winner without each of its two groups (the minimal edit is one of
    # those, so nothing more is needed), at the top rung's three seeds, steps and
    # learning-rate factor; the top rung already trained the baseline and the winner there,
    # so those six are read from it, not trained again
    stress = of_kind(tmp_path, "stress")
    assert len(stress) == 2 * 3 and len(runs) == 4 * 3 - 6
    whole = ("learning rate", "optimizer betas")
    assert not [r for r in runs if variant_key(r["edit"]) in {(), whole}]  # type: ignore[arg-type]
    assert {r["recipe"]["steps"] for r in runs} == {settings.ladder.stress_steps}  # type: ignore[index]
    assert {r["recipe"]["seed"] for r in runs} == {1000, 1001, 1002}  # type: ignore[index]
    assert all(r["parent"] == "p0003" and r["status"] == "complete" for r in runs)
    lr = {r["recipe"]["optimizer"]["lr"] for r in stress if not r["edit"]}  # type: ignore[index]
    assert lr == {r["recipe"]["optimizer"]["lr"] for r in runs  # type: ignore[index]
                  if variant_key(r["edit"]) == ("optimizer betas",)}, (  # type: ignore[arg-type]
        "the winner without its learning rate trains at the top rung's rate, as the baseline")
    [result] = of_kind(tmp_path, RESULT_KIND)
    data = result["metrics"]["attribution"]  # type: ignore[index]
    groups = {g["group"]: g for g in data["groups"]}
    assert groups["learning rate"]["kept"] and not groups["optimizer betas"]["kept"]
    assert groups["optimizer betas"]["knobs"] == {"optimizer.eps": 1e-10}
    assert groups["learning rate"]["low"] > 0
    assert groups["optimizer betas"]["low"] <= 0 <= groups["optimizer betas"]["high"]
    assert result["edit"] == {"optimizer.lr": 3e-3} == data["minimal_edit"]
    assert data["keeps_gain"] and data["recommends_minimal"]
    assert (data["rung"], data["steps"], data["seeds"]) == ("stress", 30, [1000, 1001, 1002])
    finished = events(tmp_path, "attribution_finished")
    assert finished and finished[-1]["kept"] == ["learning rate"]
    assert summary.recommendation_line.startswith(
        "recommended: the baseline plus the winner p0003's learning rate change(s), 1 of its 2 "
        "knob(s); dropped: optimizer betas (attribution at 30 steps, 3 seed(s)")


def test_a_crash_resumes_without_duplicating_or_losing_a_run(
        settings: CampaignSettings, tmp_path: Path) -> None:
    # the fifth attribution run is lost half-way: it is run again, from its checkpoint folder
    run(settings, tmp_path, lose_midway={"a0004"})
    runs = of_kind(tmp_path, ATTRIBUTION_KIND)
    lost = [r for r in runs if r["status"] == "interrupted"]
    assert [r["trial_id"] for r in lost] == ["a0004"]
    retry = [r for r in runs if r["retry_of"] == "a0004"]
    assert len(retry) == 1 and retry[0]["status"] == "complete"
    trained = [(variant_key(r["edit"]), r["recipe"]["seed"])  # type: ignore[arg-type,index]
               for r in runs if r["status"] == "complete"]
    assert len(trained) == len(set(trained)) == 6  # and 6 read from the top rung
    before = read_jsonl(tmp_path / "trajectory.jsonl")
    run(settings, tmp_path)  # resumed once more after the end: nothing is run or written twice
    assert read_jsonl(tmp_path / "trajectory.jsonl") == before
    assert len(of_kind(tmp_path, RESULT_KIND)) == 1


def test_turned_off_it_runs_nothing(settings: CampaignSettings, tmp_path: Path) -> None:
    run(settings.model_copy(update={"attribution": False}), tmp_path)
    assert not of_kind(tmp_path, ATTRIBUTION_KIND) and not of_kind(tmp_path, RESULT_KIND)
    assert events(tmp_path, "attribution_skipped")[-1]["reason"].startswith("turned off")


def test_out_of_time_it_says_it_skipped_attribution(
        settings: CampaignSettings, tmp_path: Path) -> None:
    # a 50-second window: the search and the top rung (the finalist and the baseline at two
    # seeds, 5 s a run) fit; the attribution's dozen 5-second runs do not
    settings = settings.model_copy(update={"hours": 50 / 3600})
    campaign = Campaign(settings, tmp_path, proposer=ScriptedProposer(settings.baseline(),
                                                                      [PLANTED]),
                        executor=fake_executor(recipe_noise=0.002, duration=lambda spec: (
                            5.0 if spec.kind in ("stress", "attribution") else 0.05)))
    campaign.run()
    skipped = events(tmp_path, "attribution_skipped")
    assert skipped and skipped[-1]["reason"].startswith("out of time")
    assert not of_kind(tmp_path, RESULT_KIND)


@pytest.mark.timeout(1800)  # three dozen real trial subprocesses on a small shared machine
def test_a_real_tiny_campaign_ends_with_attribution_json(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """The real trainer, in subprocesses: two baseline seeds, one edit of two groups (a
    half the batch, twice the steps for the same tokens, and a neutral eps), its
    stress runs, then the winner without each of its groups at the top rung's 6 seeds (the
    baseline and the winner there are the top rung's runs); the export writes
    attribution.json."""
    from typer.testing import CliRunner

    from recipelab.agent.setup.settings import save
    from recipelab.cli import app

    # the timeout guard predicts the edit's time from the baseline's measured speed: on a
    # loaded machine 120 s would reject the edit the test is about
    settings = tiny_settings.model_copy(update={
        "iterations": 3, "noise_seeds": 2, "attribution": True, "name": "real",
        "trial_timeout_s": 600, "stress_steps": 120, "top_seeds": 6, "close_call_seeds": 0})
    # at 30 steps, or at 3 seeds, the seeds swamp the gain over the tuned baseline
    save(settings, tmp_path)
    Campaign(settings, tmp_path, proposer=ScriptedProposer(settings.baseline(), [
        {"batch_size": 4, "optimizer.eps": 1e-10}])).run()
    runs = of_kind(tmp_path, ATTRIBUTION_KIND)
    assert len(runs) == 2 * 6 and all(r["status"] == "complete" for r in runs)
    [result] = of_kind(tmp_path, RESULT_KIND)
    out = tmp_path / "cloud"
    exported = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    attribution = json.loads((out / "attribution.json").read_text())
    assert {g["group"] for g in attribution["groups"]} == {"batch geometry", "optimizer betas"}
    assert attribution["seeds"] == list(range(1000, 1006))
    assert attribution["steps"] == settings.ladder.stress_steps
    for group in attribution["groups"]:
        assert group["kept"] or group["low"] <= 0.0  # dropped only inside the interval
    assert result["edit"] == attribution["minimal_edit"]
    assert (tmp_path / "report" / "report.md").read_text().startswith(
        "# recipelab report: campaign real\n\n## Summary")
