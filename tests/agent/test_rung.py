"""The middle rung on the in-memory fake executor: which candidates it trains, how it reorders
the stress runs, what it leaves out, and how it survives a crash and a short window.

The fake's outcome depends on the trial's kind here, so that the 60-step order and the
rung's order differ on demand (a real trainer cannot be made to disagree with itself)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings
from recipelab.agent.status import _plan_text, campaign_status
from recipelab.agent.window import MARGIN, TrialTimes, plan_window
from recipelab.runner.fake import synthetic_outcome
from recipelab.trainer.spec import CurvePoint, TrialResult, TrialSpec
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.rung import rung_score

from .conftest import ScriptedProposer, events, fake_executor, read_jsonl

# tiny baseline lr is 1e-2; four edits ranked by the proxy in this order (1.90 ... 1.96)
EDITS = [{"optimizer.lr": lr} for lr in (0.02, 0.015, 0.005, 0.003)]
PROXY_SCORE = {0.02: 1.90, 0.015: 1.92, 0.005: 1.94, 0.003: 1.96}
RUNG_SCORE = {0.02: 1.80, 0.015: 1.70, 0.005: 1.75, 0.003: 1.72}  # the rung prefers 0.015


def scored(spec: TrialSpec, *, diverging: frozenset[float] = frozenset()) -> TrialResult:
    """A synthetic result whose val_bpb is the proxy's or the rung's table's; a rung run of
    an lr in ``diverging`` has a good val_bpb but a loss that climbs over the run."""
    result = synthetic_outcome(spec)
    lr = spec.recipe.optimizer.lr
    table = RUNG_SCORE if spec.kind == "rung" else PROXY_SCORE
    update: dict[str, object] = {"val_bpb": table.get(lr, 2.5)}
    if spec.kind == "rung" and lr in diverging:
        update["curve"] = [CurvePoint(step=p.step, loss=2.0 + 0.1 * i, grad_norm=1.0, lr=lr)
                           for i, p in enumerate(result.curve)]
    return result.model_copy(update=update)


@pytest.fixture
def rung_settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    # tiny proxy trials are 20 steps; with 30 stress steps the rung trains sqrt(600) = 24
    return tiny_settings.model_copy(update={"iterations": 5, "promote": 1, "rung_size": 3})


def kind_of(directory: Path, kind: str) -> list[dict[str, object]]:
    return [r for r in read_jsonl(directory / "trajectory.jsonl") if r["kind"] == kind]


def lr_of(directory: Path, trial_id: object) -> float:
    proxy = next(r for r in read_jsonl(directory / "trajectory.jsonl") if r["trial_id"] == trial_id)
    recipe = proxy["recipe"]
    assert isinstance(recipe, dict)
    return float(recipe["optimizer"]["lr"])


def test_the_rung_trains_the_top_candidates_and_stress_runs_the_one_it_ranks_first(
        tmp_path: Path, rung_settings: CampaignSettings) -> None:
    executor = fake_executor(outcome=scored)
    summary = Campaign(rung_settings, tmp_path, executor=executor,
                       proposer=ScriptedProposer(rung_settings.baseline(), EDITS)).run()

    rung = kind_of(tmp_path, "rung")
    assert [r["trial_id"] for r in rung] == ["r0000", "r0001", "r0002"]
    assert [lr_of(tmp_path, r["parent"]) for r in rung] == [0.02, 0.015, 0.005], "the top three"
    assert all(r["status"] == "complete" and r["recipe"]["steps"] == 24 for r in rung)  # type: ignore[index]
    specs = {s.trial_id: s for s in executor.submitted}
    assert specs["r0000"].kind == "rung" and specs["r0000"].log_every == 1
    assert specs["r0000"].out_dir == str(tmp_path / "trials" / f"rung-{rung[0]['parent']}")
    started = events(tmp_path, "rung_started")
    assert [(e["trial_id"], e["steps"]) for e in started] == [
        ("r0000", 24), ("r0001", 24), ("r0002", 24)]

    stress = kind_of(tmp_path, "stress")
    assert len(stress) == 1 and lr_of(tmp_path, stress[0]["parent"]) == 0.015, (
        "the stress run went to the proxy's pick, not the rung's")
    assert summary.best is not None and summary.best.edit == EDITS[0]
    assert summary.winner is not None and summary.winner.record.edit == EDITS[1]
    assert summary.rung_runs == 3
    records = [TrialRecord.model_validate(r) for r in read_jsonl(tmp_path / "trajectory.jsonl")]
    assert "+3 rung runs" in campaign_status(rung_settings, records).headline
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Middle rung" in report and "+1" in report


def test_a_rung_run_whose_curve_diverges_is_left_out_of_the_stress_runs(
        tmp_path: Path, rung_settings: CampaignSettings) -> None:
    """The rung's favourite (0.015) climbs over its run: its val_bpb does not save it."""
    def outcome(spec: TrialSpec) -> TrialResult:
        return scored(spec, diverging=frozenset({0.015}))

    Campaign(rung_settings, tmp_path, executor=fake_executor(outcome=outcome),
             proposer=ScriptedProposer(rung_settings.baseline(), EDITS)).run()

    assert len(kind_of(tmp_path, "rung")) == 3
    stress = kind_of(tmp_path, "stress")
    assert [lr_of(tmp_path, s["parent"]) for s in stress] == [0.005]


@pytest.mark.parametrize("rung_size", [0, 1])
def test_without_a_rung_or_with_nothing_for_it_to_choose_phase_2_is_as_before(
        tmp_path: Path, rung_settings: CampaignSettings, rung_size: int) -> None:
    settings = rung_settings.model_copy(update={"rung_size": rung_size})  # promote is 1

    Campaign(settings, tmp_path, executor=fake_executor(outcome=scored),
             proposer=ScriptedProposer(settings.baseline(), EDITS)).run()

    assert not kind_of(tmp_path, "rung")
    assert not events(tmp_path, "rung_started")
    assert "--rung-size" in events(tmp_path, "rung_skipped")[0]["reason"]
    stress = kind_of(tmp_path, "stress")
    assert [lr_of(tmp_path, s["parent"]) for s in stress] == [0.02], "the proxy's pick"


class Crash(RuntimeError):
    """The orchestrator dying mid-rung (as a kill -9 would, it leaves a trial running)."""


def test_a_campaign_that_dies_during_the_rung_resumes_it_without_losing_or_repeating_a_run(
        tmp_path: Path, rung_settings: CampaignSettings) -> None:
    def dies_at_the_second_rung_run(spec: TrialSpec) -> TrialResult:
        if spec.trial_id == "r0001":
            raise Crash("the orchestrator died")
        return scored(spec)

    proposer = ScriptedProposer(rung_settings.baseline(), EDITS)
    with pytest.raises(Crash):
        Campaign(rung_settings, tmp_path, proposer=proposer,
                 executor=fake_executor(outcome=dies_at_the_second_rung_run)).run()
    assert [r["trial_id"] for r in kind_of(tmp_path, "rung")] == ["r0000"]

    executor = fake_executor(outcome=scored)
    Campaign(rung_settings, tmp_path, proposer=proposer, executor=executor).run()

    rung = kind_of(tmp_path, "rung")
    assert [(r["trial_id"], r["status"], r["retry_of"]) for r in rung] == [
        ("r0000", "complete", None), ("r0001", "interrupted", None),
        ("r0002", "complete", "r0001"), ("r0003", "complete", None)]
    trained = [r["parent"] for r in rung if r["status"] == "complete"]
    assert sorted(lr_of(tmp_path, p) for p in trained) == [0.005, 0.015, 0.02], (
        "a rung candidate was run twice or not at all")
    assert rung[2]["parent"] == rung[1]["parent"]
    assert [s.trial_id for s in executor.submitted][:2] == ["r0002", "r0003"], (
        "the resumed campaign trained something else before finishing the rung")
    stress = kind_of(tmp_path, "stress")
    assert [lr_of(tmp_path, s["parent"]) for s in stress] == [0.015]


def test_a_rung_run_lost_midway_is_resumed_from_its_checkpoint(
        tmp_path: Path, rung_settings: CampaignSettings) -> None:
    settings = rung_settings.model_copy(update={"stress_steps": 500, "rung_steps": 200,
                                                "stress_checkpoint_every": 10})
    executor = fake_executor(lose_midway={"r0000"})

    Campaign(settings, tmp_path, executor=executor,
             proposer=ScriptedProposer(settings.baseline(), EDITS)).run()

    rung = kind_of(tmp_path, "rung")
    assert rung[0]["status"] == "interrupted"
    retries = [r for r in rung if r["retry_of"] == "r0000"]
    assert len(retries) == 1 and retries[0]["status"] == "complete"
    assert retries[0]["parent"] == rung[0]["parent"]
    assert retries[0]["metrics"]["resumed_from_step"] >= 90, "it started again from step 0"  # type: ignore[index]
    assert sum(r["status"] == "complete" for r in rung) == 3
    specs = {s.trial_id: s for s in executor.submitted}
    assert specs[str(retries[0]["trial_id"])].out_dir == specs["r0000"].out_dir


def test_a_window_keeps_time_for_the_rung_so_its_stress_run_still_happens(
        tmp_path: Path, rung_settings: CampaignSettings) -> None:
    # Proxy trials of 0.4 s, rung runs of 1.6 s (four of them), a stress run of 2 s, in a
    # window of 32 s of which the report keeps 15. Planned without the rung, the search would
    # run until the rung's runs leave no time for the stress run.
    settings = rung_settings.model_copy(update={
        "iterations": None, "hours": 32 / 3600, "rung_size": 4, "rung_steps": 80,
        "stress_steps": 100, "stress_log_every": 10, "stress_checkpoint_every": 25})
    executor = fake_executor(duration=lambda spec: spec.recipe.steps * 0.02)

    summary = Campaign(settings, tmp_path, executor=executor).run()
    ended = datetime.now(timezone.utc)

    assert ended <= datetime.fromisoformat(events(tmp_path, "campaign_started")[0]["deadline"])
    assert not events(tmp_path, "stress_skipped")
    assert not [e for e in events(tmp_path, "rung_skipped") if "trial_id" in e]
    assert len(kind_of(tmp_path, "rung")) == 4
    assert summary.stress_runs == 1
    planned = events(tmp_path, "window_planned")
    assert planned and planned[0]["rung_runs"] == 4 and planned[0]["stress_runs"] == 1


def test_the_rung_steps_default_to_the_geometric_mean_and_must_lie_between_the_fidelities(
        tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"stress_steps": 1000, "promote": 3,
                                                "rung_size": 10})
    assert settings.resolved_rung_steps(60) == 245
    assert settings.rung_skip_reason(60) is None
    assert settings.model_copy(update={"rung_steps": 500}).resolved_rung_steps(60) == 500
    for steps in (60, 1000, 20):
        reason = settings.model_copy(update={"rung_steps": steps}).rung_skip_reason(60)
        assert reason is not None and "--rung-steps" in reason
    assert "0" in (settings.model_copy(update={"rung_size": 0}).rung_skip_reason(60) or "")
    assert "--promote 3" in (settings.model_copy(update={"rung_size": 3}).rung_skip_reason(60) or "")
    assert "--promote is 0" in (settings.model_copy(update={"promote": 0}).rung_skip_reason(60) or "")


def test_the_window_plan_reserves_the_rung_in_waves_and_says_so() -> None:
    deadline = datetime(2026, 1, 1, 8, 0, tzinfo=timezone.utc)
    times = TrialTimes(fixed_s=1.0, per_step_s=0.1)
    common = {"proxy_steps": 60, "stress_steps": 1000, "promote": 3, "fidelity": 0,
              "noise_seeds": 1, "parallel": 2}
    without = plan_window(deadline, times, **common)
    with_rung = plan_window(deadline, times, rung_steps=245, rung_runs=10, **common)

    rung_s = 1.0 + 0.1 * 245
    assert with_rung.rung_s == pytest.approx(rung_s)
    assert with_rung.phase2_s - without.phase2_s == pytest.approx(MARGIN * 5 * rung_s)
    assert "10 rung runs of ~0.4 min" in with_rung.describe()
    event = with_rung.as_event()
    assert event["rung_runs"] == 10
    text = _plan_text(event)
    assert text is not None and "10 rung runs, 3 stress runs planned" in text


def test_a_real_campaign_trains_its_rung_runs_in_trainer_processes(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    """The rung end to end on the real trainer: the trainer accepts a rung spec, keeps every
    step's loss, checkpoints, and the stress run goes to the rung's best."""
    settings = tiny_settings.model_copy(update={"iterations": 4, "promote": 1, "rung_size": 2})
    edits = [{"optimizer.lr": 0.02}, {"optimizer.lr": 0.005}, {"optimizer.lr": 0.003}]

    summary = Campaign(settings, tmp_path, proposer=ScriptedProposer(settings.baseline(), edits)).run()

    records = [TrialRecord.model_validate(r) for r in read_jsonl(tmp_path / "trajectory.jsonl")]
    rung = [r for r in records if r.kind == "rung"]
    assert len(rung) == 2 and all(r.status == "complete" for r in rung)
    for run in rung:
        assert run.recipe["steps"] == 24 and len(run.measured.losses or []) == 24
        assert [p["step"] for p in run.curve] == list(range(1, 25))
        assert (tmp_path / "trials" / f"rung-{run.parent}" / "trial.log").exists()
    best = min(rung, key=lambda r: (rung_score(r) or math.inf, r.parent or ""))
    stress = [r for r in records if r.kind == "stress"]
    assert [s.parent for s in stress] == [best.parent]
    assert summary.rung_runs == 2
