"""Specifications of the campaign loop: end to end on real small campaigns of the tiny
preset, and its scheduling on the in-memory fake executor."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from recipelab.agent import campaign as campaign_module
from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, SettingsError
from recipelab.guardrails.hardware import resolve_device
from recipelab.trajectory import TrajectoryStore

from .conftest import ScriptedProposer, events, fake_executor, read_jsonl


def test_a_campaign_runs_baseline_then_proposals_then_stress_runs(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    summary = Campaign(tiny_settings, tmp_path).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    proxies = [r for r in lines if r["kind"] == "proxy"]
    assert proxies[0]["proposer"] == "baseline" and proxies[0]["edit"] == {}
    assert summary.proxy_trials == 3 == sum(r["status"] in ("complete", "failed") for r in proxies)
    stress = [r for r in lines if r["kind"] == "stress"]
    finalist = min((r for r in proxies if r["proposer"] != "baseline" and r["val_bpb"] is not None),
                   key=lambda r: (r["val_bpb"], r["trial_id"]))
    # the top rung: the finalist and the baseline (the control), each at two fresh seeds
    assert {(s["parent"], s["recipe"]["seed"]) for s in stress} == {
        (parent, seed) for parent in (proxies[0]["trial_id"], finalist["trial_id"])
        for seed in (1000, 1001)}
    assert all(s["verdict"] in ("stable", "flat", "grad-spike", "diverged") for s in stress)
    # at least 20 curve points: a 30-step stress run logs every step (not every 10th); a
    # finalist with a larger batch trains the same tokens in fewer steps
    assert all(s["budget"] == 30 for s in stress)
    assert all([p["step"] for p in s["curve"]] == list(range(1, s["recipe"]["steps"] + 1))
               for s in stress if s["status"] == "complete")
    assert (tmp_path / "trajectory.sqlite").exists() and (tmp_path / "events.jsonl").exists()
    for record in lines:
        assert (tmp_path / record["artifacts"]["dir"] / "trial.log").exists()
        assert record["provenance"]["seed"] == record["recipe"]["seed"]
    with TrajectoryStore(tmp_path, "tiny", readonly=True) as store:
        assert store.check() == []
    names = {e["event"] for e in events(tmp_path)}
    assert {"campaign_started", "proposal", "trial_started", "trial_finished", "promoted",
            "stress_verdict", "campaign_finished"} <= names
    assert all(e["campaign"] == "tiny" for e in events(tmp_path))


def test_running_the_same_campaign_again_adds_nothing_when_its_budget_is_spent(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0})
    Campaign(settings, tmp_path, executor=fake_executor()).run()
    before = (tmp_path / "trajectory.jsonl").read_text()

    summary = Campaign(settings, tmp_path, executor=fake_executor()).run()

    assert (tmp_path / "trajectory.jsonl").read_text() == before
    assert summary.proxy_trials == 2


def test_a_recipe_that_blows_up_is_recorded_as_failed_and_the_loop_goes_on(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 0})
    proposer = ScriptedProposer(settings.baseline(), [
        {"optimizer.lr": 1.0, "optimizer.grad_clip": 0.0, "schedule.warmup_steps": 0},
        {"optimizer.weight_decay": 0.0},
    ])

    Campaign(settings, tmp_path, proposer=proposer).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    assert lines[1]["status"] == "failed" and lines[1]["reason"] in ("nan", "diverged")
    assert lines[1]["message"]
    assert lines[2]["status"] == "complete"


def test_a_trial_past_its_timeout_is_recorded_as_timeout_and_the_loop_goes_on(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={
        "iterations": 3, "promote": 0, "trial_timeout_s": 4.0,
        # the time, shape and size guardrails would (rightly) reject the slow candidate
        "skip_checks": ("time", "shape_invariants", "param_budget", "memory")})
    baseline = settings.baseline()
    # every trial trains the baseline's tokens, so the slow one is a model ~1,000x the work
    # per token: 8 layers of width 1,024 against 2 of 64
    slow = {"shape.d_model": 1024, "shape.n_layer": 8}
    proposer = ScriptedProposer(baseline, [slow, {"optimizer.weight_decay": 0.0},
                                           {"optimizer.weight_decay": 0.2}])
    Campaign(settings, tmp_path, proposer=proposer).run()

    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    slow_trial = next(r for r in lines if r["edit"] == slow)
    assert (slow_trial["status"], slow_trial["reason"]) == ("failed", "timeout")
    assert len([r for r in lines if r["status"] in ("complete", "failed")]) == 3


@pytest.mark.parametrize("hours", [1e-9])
def test_a_campaign_out_of_time_launches_nothing_more(
        tmp_path: Path, tiny_settings: CampaignSettings, hours: float) -> None:
    settings = tiny_settings.model_copy(update={"iterations": None, "hours": hours})

    summary = Campaign(settings, tmp_path, executor=fake_executor()).run()

    assert summary.proxy_trials == 0


def test_every_attribute_of_a_campaign_exists_from_its_construction() -> None:
    """What a run opens (the store, the log, the trial book, the deadline) lives in one
    CampaignContext the phases share; the campaign only points at it. So no attribute
    appears half-way through a run for a phase to find missing."""
    tree = ast.parse(inspect.getsource(campaign_module))
    [campaign] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Campaign"]
    created = {(method.name, target.attr)
               for method in campaign.body if isinstance(method, ast.FunctionDef)
               for node in ast.walk(method)
               for target in assigned(node)
               if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
               and target.value.id == "self"}
    constructed = {attr for method, attr in created if method == "__init__"}
    assert {attr for _, attr in created} <= constructed


def assigned(node: ast.AST) -> list[ast.expr]:
    """The targets ``node`` assigns, tuples unpacked."""
    targets = (node.targets if isinstance(node, ast.Assign) else
               [node.target] if isinstance(node, ast.AnnAssign) else [])
    return [leaf for target in targets
            for leaf in (target.elts if isinstance(target, ast.Tuple) else [target])]


needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


@needs_no_cuda
def test_device_cuda_without_a_gpu_is_refused_with_the_fix(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    with pytest.raises(ValueError, match="--device cpu"):
        resolve_device("cuda")
    with pytest.raises(SettingsError, match="sees no CUDA GPU"):
        Campaign(tiny_settings.model_copy(update={"device": "cuda"}), tmp_path)


def test_a_campaign_judges_the_requested_device(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    campaign = Campaign(tiny_settings.model_copy(update={"device": "cpu"}), tmp_path)
    assert campaign.device == resolve_device("cpu")
    campaign.executor.close()
