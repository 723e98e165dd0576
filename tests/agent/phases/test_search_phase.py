"""The search (:mod:`recipelab.agent.phases.search_phase`): proxy trials, up to ``parallel`` in
flight, until ``--iterations`` or the window's search share is spent; next comes a lost
trial's one re-run, then the baseline's noise seeds, a person's ``--edit`` edits, and the
proposer's proposals. A proposer stuck on rejected edits, a proposer with nothing more, a run
of failures and a stop signal each end the launching.

Each test runs the phase alone on a campaign opened as ``Campaign.run`` opens it
(tests/agent/test_campaign_context.py), on the in-memory fake executor.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipelab.agent.campaign import Campaign
from recipelab.agent.campaign_context import CampaignContext
from recipelab.agent.phases.proxy_trials import ProxyTrials
from recipelab.agent.phases.search_phase import SearchPhase
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.proposer import Observation, Proposal, Proposer
from recipelab.runner import FakeExecutor
from recipelab.runner.base import failed
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory.record import TrialRecord

from ..conftest import ScriptedProposer, events, fake_executor
from ..test_campaign_context import opened

UNTIL_CANCELLED_S = 30.0
"""A fake trial's duration that no test waits for: it is cancelled long before (were it not,
the trial would end ``complete`` and the test fail, not hang)."""

HOTTER, COOLER, COOLEST = ({"optimizer.lr": lr} for lr in (3e-3, 2e-3, 1e-3))
TOO_HOT = {"optimizer.lr": 5.0}  # out of the schema's range: rejected
ACTIVATION = {"shape.activation": "gelu"}  # breaks the target's shape invariant: rejected


@contextmanager
def search(settings: CampaignSettings, directory: Path, edits: list[dict[str, Any]] | None = None,
           *, executor: FakeExecutor | None = None, proposer: Proposer | None = None
           ) -> Iterator[tuple[CampaignContext, SearchPhase]]:
    """The campaign open with its search phase, nothing run yet; the proposer proposes
    ``edits`` in order (trials end as soon as they are polled unless ``executor`` says
    otherwise)."""
    night = Campaign(settings, directory, executor=executor or FakeExecutor(),
                     proposer=proposer or ScriptedProposer(settings.baseline(), edits or []))
    with opened(night) as (ctx, phases):
        phase = phases[0]
        assert isinstance(phase, SearchPhase)
        yield ctx, phase


def run_search(settings: CampaignSettings, directory: Path,
               edits: list[dict[str, Any]] | None = None, **options: Any) -> list[TrialRecord]:
    """Run the search alone and return its records."""
    with search(settings, directory, edits, **options) as (ctx, phase):
        phase.run(ctx)
        return ctx.store.records()


def test_the_baseline_and_its_seeds_come_first_then_a_persons_edits_then_the_proposers(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 5, "noise_seeds": 2,
                                                "edits": (COOLEST,)})
    records = run_search(settings, tmp_path, [HOTTER, COOLER])
    assert [(r.proposer, r.edit) for r in records] == [
        ("baseline", {}), ("baseline", {"seed": 1}), ("person", COOLEST),
        ("scripted", HOTTER), ("scripted", COOLER)]
    assert {r.status for r in records} == {"complete"}


def test_a_proposal_naming_no_parent_is_an_edit_of_the_baseline(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    records = run_search(tiny_settings.model_copy(update={"iterations": 2}), tmp_path, [HOTTER])
    assert [(r.trial_id, r.parent) for r in records] == [("p0000", None), ("p0001", "p0000")]


def test_a_rejected_proposal_spends_no_iteration_and_the_search_goes_on(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 3})
    records = run_search(settings, tmp_path, [TOO_HOT, HOTTER, COOLER, COOLEST])
    assert [(r.edit, r.status) for r in records] == [
        ({}, "complete"), (TOO_HOT, "rejected"), (HOTTER, "complete"), (COOLER, "complete")]


def test_a_batch_of_proposals_is_cut_to_the_iterations_left(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """Three slots free but one iteration left: one proposal, not three."""
    settings = tiny_settings.model_copy(update={"iterations": 2, "parallel": 3})
    executor = FakeExecutor()
    records = run_search(settings, tmp_path, [HOTTER, COOLER, COOLEST], executor=executor)
    assert [spec.trial_id for spec in executor.submitted] == ["p0000", "p0001"]
    assert [r.edit for r in records] == [{}, HOTTER]


def test_a_lost_proxy_trial_runs_again_before_anything_new_and_is_counted_once(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2})
    records = run_search(settings, tmp_path, [HOTTER, COOLER],
                         executor=FakeExecutor(lose_midway={"p0001"}))
    assert [(r.trial_id, r.edit, r.status, r.retry_of) for r in records] == [
        ("p0000", {}, "complete", None), ("p0001", HOTTER, "interrupted", None),
        ("p0002", HOTTER, "complete", "p0001")]
    assert [e["trial_id"] for e in events(tmp_path, "requeued")] == ["p0001"]


def test_the_proposer_reads_every_proxy_trial_so_far_with_a_rejections_reasons(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    class Reading(ScriptedProposer):
        """The scripted proposer, keeping the history it was handed at each turn."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.read: list[list[Observation]] = []

        def propose(self, history: list[Observation], n: int) -> list[Proposal]:
            self.read.append(history)
            return super().propose(history, n)

    settings = tiny_settings.model_copy(update={"iterations": 2})
    proposer = Reading(settings.baseline(), [TOO_HOT, HOTTER])
    records = run_search(settings, tmp_path, proposer=proposer)
    last = proposer.read[-1]
    assert [(o.trial_id, o.status) for o in last] == [("p0000", "complete"), ("p0001", "rejected")]
    assert last[1].reasons == tuple(records[1].reasons) and last[1].reasons


def test_a_proposer_stuck_on_rejected_edits_ends_the_search_and_is_named_with_the_cause(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 5, "max_consecutive_rejections": 2})
    records = run_search(settings, tmp_path, [TOO_HOT, ACTIVATION, HOTTER])
    assert [r.status for r in records] == ["complete", "rejected", "rejected"]
    [stuck] = events(tmp_path, "too_many_rejections")
    assert stuck["count"] == 2 and "guardrails reject" in stuck["hint"]


def test_a_proposer_with_nothing_more_to_propose_ends_the_search_and_says_so(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    records = run_search(tiny_settings.model_copy(update={"iterations": 3}), tmp_path, [])
    assert [r.proposer for r in records] == ["baseline"]
    assert [e["proposer"] for e in events(tmp_path, "no_proposal")] == ["scripted"]


def test_a_run_of_trials_failing_alike_ends_the_launching(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    def out_of_memory(spec: TrialSpec) -> TrialResult:
        return failed(spec, "oom", "out of memory")

    settings = tiny_settings.model_copy(update={"iterations": 5, "max_consecutive_failures": 2})
    records = run_search(settings, tmp_path, [HOTTER, COOLER, COOLEST],
                         executor=FakeExecutor(outcome=out_of_memory))
    assert [(r.status, r.reason) for r in records] == [("failed", "oom")] * 2


def test_without_a_count_or_a_window_the_search_launches_nothing(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": None, "hours": None})
    assert run_search(settings, tmp_path, [HOTTER]) == []


def stop_after_launch(ctx: CampaignContext, signals: int) -> None:
    """``signals`` stop signals arrive just after a trial is launched."""
    ctx.stops.count = signals


def test_a_stop_signal_launches_nothing_more_and_the_trials_in_flight_finish(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """Three slots and three baseline seeds to launch: the signal comes after the first."""
    settings = tiny_settings.model_copy(update={"iterations": 5, "parallel": 3,
                                                "noise_seeds": 3})
    executor = fake_executor()
    with search(settings, tmp_path, [HOTTER], executor=executor) as (ctx, phase):
        stopping = SearchPhase(phase.proposer, ProxyTrials(
            after_launch=lambda ctx: stop_after_launch(ctx, 1)))
        stopping.run(ctx)
        records = ctx.store.records()
    assert [spec.trial_id for spec in executor.submitted] == ["p0000"]
    assert [r.status for r in records] == ["complete"]
    assert len(events(tmp_path, "stopped")) == 1


def test_a_second_stop_signal_cancels_the_trials_in_flight(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 5})
    executor = FakeExecutor(duration=lambda spec: UNTIL_CANCELLED_S)
    with search(settings, tmp_path, [HOTTER], executor=executor) as (ctx, phase):
        stopping = SearchPhase(phase.proposer, ProxyTrials(
            after_launch=lambda ctx: stop_after_launch(ctx, 2)))
        stopping.run(ctx)
        records = ctx.store.records()
    assert [(r.trial_id, r.status) for r in records] == [("p0000", "interrupted")]
