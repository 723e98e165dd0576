"""A proposal becomes a proxy trial (:mod:`recipelab.agent.phases.proxy_trials`): judged by the
guardrails, then recorded as rejected with its reasons, or launched for the baseline's tokens;
the rejections in a row are counted, the proposer's artifacts kept, and the LLM's seat
followed.

Each test opens a campaign as ``Campaign.run`` opens it (tests/agent/test_campaign_context.py)
on the in-memory fake executor, and tries proposals with a :class:`ProxyTrials` of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipelab.agent.campaign_context import CampaignContext
from recipelab.agent.phases.proxy_trials import ProxyTrials, at_proxy_budget
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.proposer import Proposal
from recipelab.runner import FakeExecutor
from recipelab.targets import proxy_recipe
from recipelab.trajectory.record import TrialRecord

from ..conftest import events
from ..test_campaign_context import campaign, opened

LONG_S = 600.0
"""A fake trial's duration that no test waits for: it stays in flight."""

ACTIVATION = {"shape.activation": "gelu"}  # breaks the target's shape invariant
TOO_HOT = {"optimizer.lr": 5.0}  # out of the schema's range


@contextmanager
def open_campaign(settings: CampaignSettings, directory: Path,
                  executor: FakeExecutor | None = None) -> Iterator[CampaignContext]:
    """The campaign in ``directory`` open, nothing run yet; its trials end as soon as they are
    polled unless ``executor`` says otherwise."""
    with opened(campaign(settings, directory, executor or FakeExecutor())) as (ctx, _):
        yield ctx


def proposal(ctx: CampaignContext, edit: dict[str, Any], proposer: str = "scripted",
             **fields: Any) -> Proposal:
    """An edit of the campaign's baseline as a proposer hands it over (``fields``: its
    artifacts, its fallback)."""
    made = Proposal.from_edit(ctx.baseline, None, edit, f"try {edit}", proposer)
    return dataclasses.replace(made, **fields)


def recorded(ctx: CampaignContext) -> list[TrialRecord]:
    return ctx.store.records()


def test_a_candidate_trains_the_baselines_tokens_in_as_many_of_its_own_steps_as_its_batch_allows(
) -> None:
    baseline = proxy_recipe("tiny")
    doubled = baseline.apply({"batch_size": 2 * baseline.batch_size, "steps": 999})
    trained = at_proxy_budget(doubled.model_dump(mode="json"), baseline)
    assert trained == doubled.apply({"steps": baseline.steps // 2})
    assert at_proxy_budget(baseline.model_dump(mode="json"), baseline) == baseline


def test_a_candidate_that_is_no_recipe_is_judged_as_given() -> None:
    """The schema check then says what is wrong with it, in the guardrails' words."""
    broken = {"optimizer": {"lr": "hot"}}
    assert at_proxy_budget(broken, proxy_recipe("tiny")) is broken


def test_an_accepted_proposal_is_launched_as_a_proxy_trial_of_the_baselines_budget(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    executor = FakeExecutor(duration=lambda spec: LONG_S)
    launched: list[CampaignContext] = []
    with open_campaign(tiny_settings, tmp_path, executor) as ctx:
        proxies = ProxyTrials(after_launch=launched.append)
        proxies.try_(ctx, proposal(ctx, {"batch_size": 16}))

        [spec] = executor.submitted
        assert spec.recipe == ctx.baseline.apply({"batch_size": 16, "steps": 10})
        [record] = recorded(ctx)
        assert (record.trial_id, record.kind, record.status) == ("p0000", "proxy", "running")
        assert (record.budget, record.iteration) == (ctx.baseline.steps, 0)
        assert record.fingerprint == spec.recipe.fingerprint()
        assert (record.edit, record.proposer) == ({"batch_size": 16}, "scripted")
        assert launched == [ctx], "the proposer prefetches once per launch"
        [said] = events(tmp_path, "proposal")
        assert (said["trial_id"], said["edit"]) == ("p0000", {"batch_size": 16})


def test_a_rejected_candidate_is_recorded_with_its_reasons_and_costs_no_training(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    executor, launched = FakeExecutor(), list[CampaignContext]()
    with open_campaign(tiny_settings, tmp_path, executor) as ctx:
        proxies = ProxyTrials(after_launch=launched.append)
        proxies.try_(ctx, proposal(ctx, ACTIVATION))
        proxies.try_(ctx, proposal(ctx, TOO_HOT))
        shape, schema = recorded(ctx)

    assert executor.submitted == [] and launched == [] and not (tmp_path / "trials").exists()
    assert [(r.status, r.edit) for r in (shape, schema)] == [
        ("rejected", ACTIVATION), ("rejected", TOO_HOT)]
    assert any("activation" in reason for reason in shape.reasons)
    assert any("optimizer.lr" in reason for reason in schema.reasons)
    assert shape.finished_at is not None and "dir" not in shape.artifacts
    assert schema.fingerprint is None, "no recipe: nothing to call a duplicate later"
    said = events(tmp_path, "rejected")
    assert [(e["trial_id"], e["reasons"]) for e in said] == [
        ("p0000", shape.reasons), ("p0001", schema.reasons)]


def test_rejections_are_counted_in_a_row_until_a_proposal_is_launched(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    with open_campaign(tiny_settings, tmp_path) as ctx:
        proxies = ProxyTrials()
        proxies.try_(ctx, proposal(ctx, ACTIVATION))
        proxies.try_(ctx, proposal(ctx, TOO_HOT))
        assert proxies.consecutive_rejections == 2
        proxies.try_(ctx, proposal(ctx, {"optimizer.lr": 3e-3}))
        assert proxies.consecutive_rejections == 0


def test_a_check_the_campaign_skips_rejects_nothing(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"skip_checks": ("shape_invariants",)})
    executor = FakeExecutor()
    with open_campaign(settings, tmp_path, executor) as ctx:
        ProxyTrials().try_(ctx, proposal(ctx, ACTIVATION))
    assert [spec.recipe.shape.activation for spec in executor.submitted] == ["gelu"]


def test_the_iterations_spent_are_the_trained_search_trials_and_those_in_flight(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """A rejected trial never trained, and a finalist's seed re-run is the ladder's."""
    executor = FakeExecutor(duration=lambda spec: LONG_S if spec.trial_id == "p0003" else 0.0)
    with open_campaign(tiny_settings, tmp_path, executor) as ctx:
        proxies = ProxyTrials()
        proxies.try_(ctx, proposal(ctx, {}, "baseline"))
        proxies.try_(ctx, proposal(ctx, TOO_HOT))
        ctx.book.poll()
        proxies.try_(ctx, proposal(ctx, {"seed": 5}, "seed-rerun"))
        ctx.book.poll()
        assert [r.status for r in recorded(ctx)] == ["complete", "rejected", "complete"]
        assert proxies.started(ctx) == 1
        proxies.try_(ctx, proposal(ctx, {"optimizer.lr": 3e-3}))
        assert proxies.started(ctx) == 2, "the trial in flight is spent"
        assert recorded(ctx)[-1].iteration == 1, "its iteration is what was spent before it"


def test_the_rerun_of_a_lost_trial_names_the_trial_it_reruns(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    with open_campaign(tiny_settings, tmp_path, FakeExecutor(lose_midway={"p0000"})) as ctx:
        proxies = ProxyTrials()
        proxies.try_(ctx, proposal(ctx, {"optimizer.lr": 3e-3}))
        [lost] = ctx.book.poll()
        assert lost.status == "interrupted"
        proxies.try_(ctx, proposal(ctx, {"optimizer.lr": 3e-3}), retry_of=lost)
        [rerun] = ctx.book.poll()
    assert (rerun.trial_id, rerun.status, rerun.retry_of) == ("p0001", "complete", "p0000")
    assert rerun.fingerprint == lost.fingerprint
    assert events(tmp_path, "proposal")[-1]["retry_of"] == "p0000"


def test_the_proposers_artifacts_are_kept_in_the_trials_folder_and_odd_names_are_ignored(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    artifacts = {"prompt.txt": "the prompt", "reply.json": "{}",
                 "../escape.txt": "out of the folder", ".hidden": "a dot file"}
    with open_campaign(tiny_settings, tmp_path) as ctx:
        ProxyTrials().try_(ctx, proposal(ctx, TOO_HOT, "llm:test", artifacts=artifacts))
        [record] = recorded(ctx)
    assert record.artifacts == {"prompt.txt": "trials/p0000/prompt.txt",
                                "reply.json": "trials/p0000/reply.json"}
    assert (tmp_path / "trials" / "p0000" / "prompt.txt").read_text() == "the prompt"
    assert sorted(p.name for p in (tmp_path / "trials" / "p0000").iterdir()) == [
        "prompt.txt", "reply.json"]
    assert not (tmp_path / "trials" / "escape.txt").exists()


def test_the_llms_seat_is_said_lost_at_its_first_fallback_and_back_at_its_next_reply(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    def turn(ctx: CampaignContext, proposer: str, fallback: str | None = None) -> None:
        """One proposal (rejected: no trial needs to train here)."""
        proxies.try_(ctx, proposal(ctx, TOO_HOT, proposer, fallback=fallback))

    proxies = ProxyTrials()
    with open_campaign(tiny_settings, tmp_path) as ctx:
        turn(ctx, "llm:model")  # no fallback before it: nothing to say
        turn(ctx, "classical-tpe", fallback="timeout")
        turn(ctx, "classical-tpe", fallback="timeout")
        turn(ctx, "classical-tpe")  # the sampler's own turn says nothing of the LLM
        turn(ctx, "llm:model")
        turn(ctx, "llm:model")

    def said(name: str) -> list[str]:
        return [e["trial_id"] for e in events(tmp_path, name)]

    assert said("llm_fallback") == ["p0001", "p0002"]
    assert said("llm_down") == ["p0001"] and said("llm_up") == ["p0004"]
    [down] = events(tmp_path, "llm_down")
    assert down["cause"] == "timeout" and "the sampler proposes" in down["hint"]
