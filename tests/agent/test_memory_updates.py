"""A campaign's completed trials teach the device's memory model their measured peaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.memory_updates import learn_peak
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.guardrails.memory_fit import (
    MemoryModel,
    MemoryModelError,
    fit_key,
    fitted_line,
    load_memory_model,
    recipe_family,
    record_peaks,
)
from recipelab.targets import proxy_recipe
from recipelab.trajectory.record import TrialRecord
from tests.agent.conftest import ScriptedProposer
from tests.guardrails.factories import CPU

TINY = proxy_recipe("tiny")
MIB = 2**20


class Warnings:
    """A logger that keeps what it was told (the campaign's is a structlog logger)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def trial(trial_id: str, batch_size: int, peak: int | None, status: str = "complete") -> TrialRecord:
    recipe = TINY.apply({"batch_size": batch_size})
    return TrialRecord(campaign="c", trial_id=trial_id, status=status,
                       recipe=recipe.model_dump(mode="json"), fingerprint=recipe.fingerprint(),
                       metrics={"peak_memory_bytes": peak} if peak is not None else {})


@pytest.fixture
def model_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "memory-model.json"
    monkeypatch.setenv("RECIPELAB_MEMORY_MODEL", str(path))
    return path


def test_completed_trials_add_their_peaks_until_the_family_has_a_line(model_path: Path) -> None:
    log = Warnings()
    first = learn_peak(trial("p0000", 8, 360 * MIB), CPU, log)
    assert first is not None and fitted_line(first, TINY, CPU) is None, "one point is no line"
    model = learn_peak(trial("p0001", 64, 400 * MIB), CPU, log)
    assert model == load_memory_model(), "what the guardrail is handed is what was written"
    line = fitted_line(model, TINY, CPU)
    assert line is not None and line.points == 2
    assert line.predict(8 * 64) == pytest.approx(360 * MIB, rel=1e-6)
    assert log.events == []


def test_failed_or_unmeasured_trials_teach_nothing(model_path: Path) -> None:
    log = Warnings()
    learn_peak(trial("p0000", 8, None), CPU, log)
    learn_peak(trial("p0001", 64, 0), CPU, log)
    learn_peak(trial("p0002", 64, None, status="failed"), CPU, log)
    assert not model_path.exists() and log.events == []


def test_an_unusable_memory_model_costs_a_warning_not_the_campaign(model_path: Path) -> None:
    model_path.write_text("{not json")
    log = Warnings()
    learn_peak(trial("p0000", 8, 360 * MIB), CPU, log)
    ((event, fields),) = log.events
    assert event == "memory_model_not_updated" and fields["trial_id"] == "p0000"
    assert "memory-model.json is not valid" in fields["error"]
    assert model_path.read_text() == "{not json"
    with pytest.raises(MemoryModelError):
        load_memory_model()


def test_a_campaign_reads_the_memory_model_once_and_then_keeps_what_it_learns(
        model_path: Path, tiny_settings: CampaignSettings, tmp_path: Path) -> None:
    """The guardrail's memory model comes from the campaign: read when it starts, replaced by
    the file as written each time a completed trial adds its peak (a sweep's fits included),
    never read behind the campaign's back."""
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0})
    bigger = {"batch_size": 2 * TINY.batch_size}  # the same family, another token count
    campaign = Campaign(settings, tmp_path / "campaign",
                        proposer=ScriptedProposer(settings.baseline(), [bigger]))
    assert campaign.memory_model == MemoryModel() and not model_path.exists()
    swept = record_peaks(TINY.apply({"precision": "bf16"}), CPU, [(256, 400 * MIB), (512, 410 * MIB)])
    assert campaign.memory_model == MemoryModel(), "read once, at the start"

    campaign.run()

    learnt = load_memory_model()
    assert campaign.memory_model == learnt and set(swept.fits) < set(learnt.fits)
    family = learnt.fits[fit_key(campaign.device, recipe_family(TINY))]
    assert len(family.points) == 2, "both trained proxy trials taught it"
