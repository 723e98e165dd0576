"""The trials in flight and their records (:mod:`recipelab.agent.trials`): the
:class:`~recipelab.agent.trials.TrialBook` hands a trial to the executor, records it running,
and turns the executor's result into the record's final state, which it stores before it says
so and hands on; a completed trial's peak teaches the guardrails' memory model.

The executor is the in-memory fake (:mod:`recipelab.runner.fake`); the store and the event log
are the campaign's own, in ``tmp_path``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.trials import TRIALS_DIR, GuardrailMemory, TrialBook, trial_folder
from recipelab.eventlog import campaign_logger
from recipelab.guardrails.memory_fit import load_memory_model
from recipelab.recipe import Recipe
from recipelab.runner import FakeExecutor
from recipelab.runner.base import failed
from recipelab.runner.fake import CPU, synthetic_outcome
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.record import TrialRecord

from .conftest import events

LONG_S = 600.0
"""A fake trial's duration that no test waits for: it stays in flight until cancelled."""


@contextmanager
def trial_book(settings: CampaignSettings, directory: Path, executor: FakeExecutor, *,
               memory: GuardrailMemory | None = None, **hooks: Any) -> Iterator[TrialBook]:
    """A trial book as a campaign opens it (its store, its event log in ``events.jsonl``),
    with a memory model file of its own so no test teaches another's."""
    store = TrajectoryStore(directory, settings.name)
    log, sink = campaign_logger(settings.name, directory, Console(file=io.StringIO()))
    memory = memory or GuardrailMemory(directory / "memory-model.json", None, None)
    try:
        yield TrialBook(settings, directory, store, executor, CPU, memory, log, **hooks)
    finally:
        store.close()
        sink.close()


def queued(settings: CampaignSettings, trial_id: str, recipe: Recipe, *, kind: str = "proxy",
           proposer: str = "scripted") -> TrialRecord:
    """The record of a judged candidate, as the phases hand it to :meth:`TrialBook.launch`."""
    return TrialRecord(campaign=settings.name, trial_id=trial_id, kind=kind, status="queued",
                       recipe=recipe.model_dump(mode="json"), fingerprint=recipe.fingerprint(),
                       proposer=proposer, budget=recipe.steps)


def launch(book: TrialBook, trial_id: str, recipe: Recipe, **fields: Any) -> None:
    book.launch(queued(book.settings, trial_id, recipe, **fields), recipe, log_every=10,
                timeout_s=60)


def test_a_trials_folder_is_the_one_recorded_at_launch_else_its_id_under_trials() -> None:
    record = TrialRecord(campaign="c", trial_id="p0003", status="queued")
    assert trial_folder(record) == f"{TRIALS_DIR}/p0003"
    moved = record.model_copy(update={"artifacts": {"dir": "trials/s0001"}})
    assert trial_folder(moved) == "trials/s0001", "a resumed stress run keeps its first folder"


def test_a_launched_trial_is_recorded_running_in_its_folder_and_handed_to_the_executor(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    executor, changes = FakeExecutor(duration=lambda spec: LONG_S), []
    baseline = tiny_settings.baseline()
    with trial_book(tiny_settings, tmp_path, executor,
                    on_change=lambda: changes.append("change")) as book:
        launch(book, "p0000", baseline)

        [spec] = executor.submitted
        assert (spec.trial_id, spec.recipe) == ("p0000", baseline)
        assert Path(spec.out_dir) == tmp_path / "trials" / "p0000"
        assert (Path(spec.out_dir) / "spec.json").exists()
        [record] = book.store.records()
        assert (record.status, record.artifacts["dir"]) == ("running", "trials/p0000")
        assert record.started_at is not None and record.finished_at is None
        assert list(book.inflight) == ["p0000"] and book.proxies_in_flight() == 1
        assert book.running() == "p0000 (proxy)"
        assert changes == ["change"], "the progress display is told once"
        [started] = events(tmp_path, "trial_started")
        assert (started["trial_id"], started["seed"]) == ("p0000", baseline.seed)


def test_a_trial_launched_into_another_folder_records_that_folder(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    executor = FakeExecutor()
    baseline = tiny_settings.baseline()
    with trial_book(tiny_settings, tmp_path, executor) as book:
        book.launch(queued(tiny_settings, "s0001", baseline, kind="stress"), baseline,
                    log_every=1, timeout_s=60, out_dir=tmp_path / "trials" / "s0000",
                    resume=True)
        [final] = book.poll()
    assert executor.submitted[0].out_dir == str(tmp_path / "trials" / "s0000")
    assert trial_folder(final) == "trials/s0000"


def test_an_ended_trial_is_recorded_once_with_its_result_and_leaves_the_flight(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    handed_on: list[TrialRecord] = []
    with trial_book(tiny_settings, tmp_path, FakeExecutor(),
                    on_record=handed_on.append) as book:
        launch(book, "p0000", tiny_settings.baseline())
        [final] = book.poll()

        assert (final.status, final.trial_id) == ("complete", "p0000")
        assert final.val_bpb is not None and final.curve and final.finished_at is not None
        assert final.metrics["wall_s"] >= 0 and final.provenance["device"] == "cpu:fake CPU"
        assert book.store.records() == [final] and book.inflight == {}
        assert book.poll() == [] and handed_on == [final], "recorded and handed on once"
        assert book.running() is None


def test_a_second_stop_signal_records_every_trial_in_flight_as_interrupted(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    baseline = tiny_settings.baseline()
    with trial_book(tiny_settings, tmp_path, FakeExecutor(duration=lambda spec: LONG_S)) as book:
        launch(book, "p0000", baseline)
        launch(book, "s0000", baseline, kind="stress")
        assert book.poll() == [], "neither has ended"
        assert book.running() == "p0000 (proxy), s0000 (stress)"

        cancelled = book.poll(cancel=True)

        assert {(r.trial_id, r.status) for r in cancelled} == {
            ("p0000", "interrupted"), ("s0000", "interrupted")}
        assert all(r.message == "cancelled by a second stop signal" for r in cancelled)
        assert book.inflight == {} and book.proxies_in_flight() == 0


def test_a_trial_that_lost_its_worker_is_recorded_interrupted_and_said_lost(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    with trial_book(tiny_settings, tmp_path, FakeExecutor(lose_midway={"p0000"})) as book:
        launch(book, "p0000", tiny_settings.baseline())
        [lost] = book.poll()
    assert (lost.status, lost.message) == ("interrupted", "lost its fake worker")
    assert [e["trial_id"] for e in events(tmp_path, "trial_lost")] == ["p0000"]


def test_a_stress_run_is_recorded_with_its_verdict_and_the_verdicts_explanation(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    def blows_up(spec: TrialSpec) -> TrialResult:
        """A run that fails with a NaN and says nothing more."""
        return TrialResult(trial_id=spec.trial_id, status="failed", reason="nan")

    baseline = tiny_settings.baseline()
    with trial_book(tiny_settings, tmp_path, FakeExecutor(outcome=blows_up)) as book:
        launch(book, "s0000", baseline, kind="stress")
        [stress] = book.poll()
    assert (stress.verdict, stress.message) == ("diverged", "the run failed with nan")
    [said] = events(tmp_path, "stress_verdict")
    assert (said["trial_id"], said["verdict"]) == ("s0000", "diverged")


def test_a_proposed_trial_is_marked_against_the_noise_floor_and_a_baseline_seed_is_not(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    baseline = tiny_settings.baseline()
    with trial_book(tiny_settings, tmp_path, FakeExecutor()) as book:
        for seed in (0, 1):  # the floor: two seeds of the baseline
            launch(book, f"p000{seed}", baseline.apply({"seed": seed}), proposer="baseline")
            book.poll()
        launch(book, "p0002", baseline.apply({"optimizer.lr": 3e-3}))
        [proposed] = book.poll()
        launch(book, "p0003", baseline.apply({"seed": 2}), proposer="baseline")
        [third_seed] = book.poll()
    assert proposed.val_bpb is not None
    assert {"gain_vs_baseline", "gain_low", "gain_high", "within_noise"} <= set(proposed.metrics)
    assert "gain_vs_baseline" not in third_seed.metrics, "the floor is made of these"


def test_a_completed_trial_teaches_the_memory_model_the_guardrails_are_handed(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    path = tmp_path / "memory-model.json"
    memory = GuardrailMemory(path, None, f"{path} is not valid JSON")  # as a broken file reads
    outcomes = iter([lambda spec: failed(spec, "oom", "out of memory"), synthetic_outcome])
    executor = FakeExecutor(outcome=lambda spec: next(outcomes)(spec))
    with trial_book(tiny_settings, tmp_path, executor, memory=memory) as book:
        launch(book, "p0000", tiny_settings.baseline())
        book.poll()
        assert (memory.model, path.exists()) == (None, False), "a failed trial teaches nothing"
        launch(book, "p0001", tiny_settings.baseline().apply({"seed": 1}))
        book.poll()
    assert memory.problem is None
    assert memory.model is not None and memory.model == load_memory_model(path), "as written"


def test_the_memory_model_is_read_from_the_users_file_and_a_broken_one_is_a_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "memory-model.json"
    monkeypatch.setenv("RECIPELAB_MEMORY_MODEL", str(path))
    fresh = GuardrailMemory.read()
    assert (fresh.path, fresh.problem) == (path, None) and fresh.model is not None
    path.write_text("{not json")
    broken = GuardrailMemory.read()
    assert broken.model is None and broken.problem is not None and str(path) in broken.problem


def test_a_record_is_stored_then_said_then_handed_on_once_its_trial_ended(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """The live report is rewritten from ``on_record``: its last lines must hold the event."""
    seen: list[str] = []
    baseline = tiny_settings.baseline()

    def on_record(record: TrialRecord) -> None:
        assert [e["trial_id"] for e in events(tmp_path, "trial_finished")] == [record.trial_id]
        seen.append(f"handed on {record.status}")

    with trial_book(tiny_settings, tmp_path, FakeExecutor(), on_record=on_record) as book:
        record = queued(tiny_settings, "p0000", baseline)

        def say() -> None:
            seen.append(f"said {book.store.records()[0].status}")

        book.write(record.model_copy(update={"status": "running"}), say=say)
        assert seen == ["said running"], "a running record is not handed on"
        launch(book, "p0000", baseline)
        book.poll()
    assert seen == ["said running", "handed on complete"]


def test_the_ledger_is_read_from_the_store_once_per_write(
        tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    with trial_book(tiny_settings, tmp_path, FakeExecutor()) as book:
        before = book.ledger
        assert book.ledger is before, "read once, not on every look"
        launch(book, "p0000", tiny_settings.baseline())
        assert [r.status for r in book.ledger.proxies] == ["running"]
        book.poll()
        assert [r.status for r in book.ledger.proxies] == ["complete"]
