"""Seeds as evidence: the noise floor from the baseline's seeds, within-noise gains marked in
records, summary and status, and close finalists re-run with more seeds before a winner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.phases.seeds import baseline_proposals, close_finalists, rerun_proposals
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.cli import app
from recipelab.targets import proxy_recipe
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord

from ..conftest import ScriptedProposer, events, fake_executor, read_jsonl

BASELINE = proxy_recipe("tiny")


def record(trial_id: str, val_bpb: float | None, *, proposer: str = "classical-tpe",
           status: str = "complete", edit: dict[str, Any] | None = None, **fields: Any
           ) -> TrialRecord:
    recipe = BASELINE.apply(edit or {})
    return TrialRecord(campaign="c", trial_id=trial_id, status=status,
                       proposer=proposer, val_bpb=val_bpb, edit=edit or {},
                       recipe=recipe.model_dump(mode="json"), **fields)


def test_the_baseline_comes_first_then_its_other_seeds_until_k_are_started() -> None:
    first = baseline_proposals(BASELINE, [], noise_seeds=3)
    assert [(p.edit, p.proposer) for p in first] == [({}, "baseline")]
    assert [p.edit for p in baseline_proposals(BASELINE, [], noise_seeds=3, n=5)] == [
        {}, {"seed": 1}, {"seed": 2}]
    running = [record("p0000", None, proposer="baseline", status="running")]
    second = baseline_proposals(BASELINE, running, noise_seeds=3)
    assert second[0].edit == {"seed": 1} and "noise floor (2/3)" in second[0].hypothesis
    done = [record("p0000", 2.5, proposer="baseline"),
            record("p0001", None, proposer="baseline", edit={"seed": 1}, status="rejected"),
            record("p0002", 2.6, proposer="baseline", edit={"seed": 2})]
    third = baseline_proposals(BASELINE, done, noise_seeds=3)
    assert third[0].edit == {"seed": 3} and third[0].parent_id == "p0000"  # 1 was refused
    assert baseline_proposals(BASELINE, [*done, record("p0003", 2.55, proposer="baseline",
                                                       edit={"seed": 3})], noise_seeds=3) == []
    assert baseline_proposals(BASELINE, done[:1], noise_seeds=1) == []


def test_only_finalists_in_a_close_call_are_owed_seed_reruns() -> None:
    floor = NoiseFloor(mean=2.5, spread=0.02, seeds=(0, 1, 2))
    lr = BASELINE.optimizer.lr
    a, b, c = (record(f"p000{3 + i}", val, edit={"optimizer.lr": lr * (2 + i)})
               for i, val in enumerate((2.30, 2.31, 2.40)))
    assert close_finalists([c, b, a], floor) == [(a, b)]
    owed = rerun_proposals([a, b, c], [a, b, c], floor)
    assert [(p.parent_id, p.edit) for p in owed] == [
        ("p0003", {"seed": 1}), ("p0003", {"seed": 2}), ("p0004", {"seed": 1}),
        ("p0004", {"seed": 2})]
    assert owed[0].proposer == "seed-rerun"
    assert "within the noise floor (0.0200)" in owed[0].hypothesis
    done = [record("p0009", 2.32, proposer="seed-rerun", parent="p0003",
                   edit={"optimizer.lr": lr * 2, "seed": 1})]
    assert len(rerun_proposals([a, b, c], [a, b, c, *done], floor)) == 3
    assert rerun_proposals([a, b, c], [a, b, c], None) == []
    assert rerun_proposals([a, c], [a, c], floor) == []


def test_a_campaign_measures_the_noise_floor_and_marks_a_within_noise_gain(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 4, "promote": 2, "noise_seeds": 3,
                                                "stress_steps": 10})
    save(settings, tmp_path)
    baseline = settings.baseline()
    # A change far too small to matter in 60 steps: whatever it scores is seed luck.
    negligible = {"schedule.min_lr_ratio": baseline.schedule.min_lr_ratio + 1e-6}
    summary = Campaign(settings, tmp_path, proposer=ScriptedProposer(baseline, [negligible]),
                       executor=fake_executor()).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    proxies = [r for r in lines if r["kind"] == "proxy"]
    search = proxies[:4]
    assert [(r["proposer"], r["edit"]) for r in search] == [
        ("baseline", {}), ("baseline", {"seed": 1}), ("baseline", {"seed": 2}),
        ("scripted", negligible)]  # the extra seeds count toward --iterations
    assert summary.noise is not None and summary.noise.seeds == (0, 1, 2)
    assert summary.noise.spread > 0
    assert search[3]["metrics"]["within_noise"] is True
    assert "within_noise" not in search[0]["metrics"]

    # baseline and the negligible edit are finalists within noise of each other: the edit
    # gets two more seeds (the baseline has its noise-floor seeds) before a winner is named
    reruns = proxies[4:]
    assert [(r["proposer"], r["parent"], r["recipe"]["seed"]) for r in reruns] == [
        ("seed-rerun", "p0003", 1), ("seed-rerun", "p0003", 2)]
    assert all(r["status"] == "complete" for r in reruns)
    # the top rung trains the finalist and the baseline at two fresh seeds each; a gain
    # inside the paired interval there names no winner
    assert len([r for r in lines if r["kind"] == "stress"]) == 4
    assert summary.winner is None
    assert summary.winner_line.startswith("no winner beyond noise: the best finalist p0003")
    finished = events(tmp_path, "campaign_finished")[-1]
    assert finished["winner"] is None and finished["winner_line"] == summary.winner_line
    promoted = events(tmp_path, "promoted")
    assert {e["within_noise"] for e in promoted if e["parent"] == "p0003"} == {True}

    result = CliRunner().invoke(app, ["status", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "noise floor: " in result.output and "baseline val_bpb" in result.output
    assert summary.winner_line in " ".join(result.output.split()), "status prints the same line"
    row = next(line for line in result.output.splitlines() if "p0003" in line)
    assert "noise" in row

    # seed re-runs are the candidate's evidence, not rows of the top trials of their own
    report = (tmp_path / "report" / "report.md").read_text()
    top = report.split("## Top 10 proxy trials")[1].split("\n## ")[0]
    for rerun in reruns:
        assert f"| {rerun['trial_id']} |" not in top
        assert rerun["trial_id"] not in result.output
