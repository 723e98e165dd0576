"""The campaign's scheduling decisions on the in-memory fake executor: lost trials, resumed
stress runs, and the winner named by the highest-fidelity evidence. The fake controls when
each result comes back and what it says, which a real trainer cannot do on demand."""

from __future__ import annotations

from pathlib import Path

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch.status import campaign_status
from recipelab.runner.fake import synthetic_outcome
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory.record import TrialRecord

from .conftest import ScriptedProposer, events, fake_executor, read_jsonl


def test_a_lost_proxy_trial_runs_once_more_and_is_counted_once(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 4, "promote": 0})

    summary = Campaign(settings, tmp_path, executor=fake_executor(lose_midway={"p0001"})).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    assert [(r["trial_id"], r["status"], r["retry_of"]) for r in lines][:3] == [
        ("p0000", "complete", None), ("p0001", "interrupted", None),
        ("p0002", "complete", "p0001")]
    assert summary.proxy_trials == 4 and len(lines) == 5
    view = campaign_status(settings, [TrialRecord.model_validate(r) for r in lines])
    assert "4/4 proxy trials trained (1 interrupted and re-run)" in view.headline


def test_a_stress_run_lost_midway_resumes_from_its_checkpoint(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 1,
                                                "stress_steps": 200, "stress_checkpoint_every": 10})
    executor = fake_executor(lose_midway={"s0000"})

    summary = Campaign(settings, tmp_path, executor=executor).run()

    stress = [r for r in read_jsonl(tmp_path / "trajectory.jsonl") if r["kind"] == "stress"]
    lost = [r for r in stress if r["trial_id"] == "s0000"]
    retried = [r for r in stress if r["retry_of"] == "s0000"]
    assert [r["status"] for r in lost] == ["interrupted"]
    assert [r["status"] for r in retried] == ["complete"]
    assert retried[0]["metrics"]["resumed_from_step"] >= 90, "it started again from step 0"
    assert summary.stress_runs == 4  # the top rung: the finalist and the baseline at 2 seeds
    resumed = [spec for spec in executor.submitted if spec.trial_id == retried[0]["trial_id"]]
    assert resumed[0].out_dir == next(s.out_dir for s in executor.submitted if s.trial_id == "s0000")


def test_the_winner_is_named_by_its_stress_run_not_its_proxy_lead(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    """p0001 leads at 60 steps; over the long run p0002 ends lower. The stress runs are the
    higher-fidelity evidence, so p0002 wins (a campaign once picked the other). The rates
    are the proxies' at every rung (no horizon rule), the ones the scores are keyed by."""
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 2,
                                                "horizon_rule": False})
    baseline = settings.baseline()
    fast, steady = {"optimizer.lr": 0.02}, {"optimizer.lr": 0.005}
    proxy_score = {0.02: 1.9, 0.005: 1.95}
    stress_score = {0.02: 1.7, 0.005: 1.6}

    def outcome(spec: TrialSpec) -> TrialResult:
        result = synthetic_outcome(spec)
        lr = spec.recipe.optimizer.lr
        scores = stress_score if spec.kind == "stress" else proxy_score
        return result.model_copy(update={"val_bpb": scores.get(lr, 2.5)})

    summary = Campaign(settings, tmp_path, proposer=ScriptedProposer(baseline, [fast, steady]),
                       executor=fake_executor(outcome=outcome)).run()

    assert summary.best is not None and summary.best.edit == fast, "the proxy's pick"
    assert summary.winner is not None and summary.winner.record.edit == steady
    assert summary.winner.evidence == "stress" and summary.winner.stress is not None
    assert "paired gain over the baseline at the top rung" in summary.winner.because
    assert events(tmp_path, "campaign_finished")[0]["winner_evidence"] == "stress"


def test_shape_knobs_made_searchable_are_searched_and_proposed(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={
        "iterations": 8, "promote": 0, "searchable": ("shape.qk_norm", "shape.norm"),
        "budget": 200_000})  # headroom for a norm with more parameters

    campaign = Campaign(settings, tmp_path, executor=fake_executor())
    campaign.run()

    assert {"shape.qk_norm", "shape.norm"} <= set(campaign.space.names())
    edited = {knob for r in read_jsonl(tmp_path / "trajectory.jsonl") for knob in r["edit"]}
    assert edited & {"shape.qk_norm", "shape.norm"}, "no trial changed a searchable shape knob"
