"""The build step: what a person asked for, merged with what a campaign saved, checked and
resolved for where trials run, in one place below the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab.agent.setup.build import CHECK_ITERATIONS, build
from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    SettingsError,
    WindowSettings,
    save,
)
from recipelab.cores import usable_cores
from recipelab.guardrails import detect_device
from recipelab.guardrails.hardware import campaign_precision

TINY = {"preset": "tiny", "window": {"iterations": 2}}


def saved_campaign(directory: Path) -> CampaignSettings:
    settings = CampaignSettings(name="overnight", preset="tiny", precision="fp32",
                                executor=ExecutorSettings(parallel=1),
                                window=WindowSettings(iterations=3))
    save(settings, directory)
    return settings


def test_a_new_campaign_resolves_auto_for_this_machine(tmp_path: Path) -> None:
    """``auto`` is resolved before the preflight, so settings.json, the preflight and the
    campaign all see the numbers that will run; each decision is a note."""
    built = build(tmp_path / "c", "c", TINY)
    settings = built.resolved.settings
    assert built.new and settings.name == "c"
    assert settings.precision == campaign_precision("auto", detect_device())
    assert settings.executor.parallel == usable_cores()  # tiny fits many times over in RAM
    assert any(note.startswith("parallel auto:") for note in built.notes)


def test_explicit_parallel_and_precision_are_kept(tmp_path: Path) -> None:
    built = build(tmp_path / "c", "c", {**TINY, "executor": {"parallel": "3"}, "precision": "fp32"})
    assert (built.resolved.settings.executor.parallel, built.resolved.settings.precision) == (3, "fp32")


def test_flat_and_nested_settings_build_the_same_campaign(tmp_path: Path) -> None:
    nested = build(tmp_path / "a", "a", {**TINY, "ladder": {"promote": 1}}).resolved.settings
    flat = build(tmp_path / "a", "a", {"preset": "tiny", "iterations": 2, "promote": 1}).resolved.settings
    assert nested == flat


def test_a_run_without_a_budget_is_refused_and_a_check_gets_one(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"give the campaign a budget: --window\.iterations"):
        build(tmp_path / "c", "c", {"preset": "tiny"})
    checked = build(tmp_path / "c", "c", {"preset": "tiny"}, check_only=True)
    assert checked.resolved.settings.window.iterations == CHECK_ITERATIONS
    assert f"checking a campaign of --window.iterations {CHECK_ITERATIONS}" in checked.notes[0]


def test_a_resume_keeps_what_was_saved_and_takes_what_was_given(tmp_path: Path) -> None:
    saved_campaign(tmp_path)
    built = build(tmp_path, "default", {"ladder": {"promote": 0}, "window": {"iterations": 5}})
    settings = built.resolved.settings
    assert not built.new and settings.name == "overnight"
    assert (settings.ladder.promote, settings.window.iterations, settings.executor.parallel) == (0, 5, 1)


def test_a_resume_that_changes_what_the_numbers_mean_is_refused(tmp_path: Path) -> None:
    saved_campaign(tmp_path)
    with pytest.raises(SettingsError, match="started with different seed"):
        build(tmp_path, "default", {"seed": 7})


def test_a_baseline_that_cannot_be_built_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as raised:
        build(tmp_path / "c", "c", {**TINY, "budget": 1000})
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "c").exists()


def test_invalid_settings_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"invalid campaign settings: ladder.promote"):
        build(tmp_path / "c", "c", {**TINY, "ladder": {"promote": -1}})
