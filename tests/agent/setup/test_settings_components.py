"""The components of the campaign settings: each validates itself and owns its rules."""

from __future__ import annotations

from datetime import datetime

import pytest
from pydantic import ValidationError

from recipelab.agent.setup.settings_components import (
    ExecutorSettings,
    LadderSettings,
    SettingsError,
    WindowSettings,
    nest,
)


def test_a_window_refuses_an_until_that_is_no_time_of_day() -> None:
    """Refused when the settings are made, not hours later when the deadline is first asked."""
    with pytest.raises(ValidationError, match=r"--until '25:00' is not a time of day"):
        WindowSettings(until="25:00")
    assert WindowSettings(until="7:05").deadline(datetime(2024, 1, 1, 22, 0)) == datetime(2024, 1, 2, 7, 5)


def test_the_window_ends_at_the_first_of_its_hours_and_its_clock_time() -> None:
    started = datetime(2024, 1, 1, 22, 0)
    window = WindowSettings(hours=2, until="23:30")
    assert window.deadline(started) == datetime(2024, 1, 1, 23, 30)
    assert WindowSettings(iterations=3).deadline(started) is None


def test_the_ladder_plans_its_rungs_from_its_own_fields() -> None:
    assert LadderSettings().ladder_steps(60) == [180, 540, 1000]
    assert LadderSettings(rung_size=0).ladder_steps(60) == [1000]
    plan = LadderSettings(promote=2).planned_ladder(60, 30)
    assert plan[-1].steps == 1000


def test_trials_in_flight_are_unknown_until_auto_is_resolved() -> None:
    with pytest.raises(SettingsError, match="--parallel auto has not been resolved"):
        _ = ExecutorSettings().resolved_parallel
    assert ExecutorSettings(parallel=4).resolved_parallel == 4


def test_flat_keys_beside_a_component_win_over_its_values() -> None:
    """A resume's options (flat) over the saved settings (nested): what was given now wins."""
    data = nest({"name": "c", "ladder": {"promote": 3, "eta": 2}, "promote": 1, "proposer": "llm"})
    assert data == {"name": "c", "ladder": {"promote": 1, "eta": 2}, "proposer": {"kind": "llm"}}
    assert nest({"ladder": LadderSettings(eta=4)})["ladder"] == LadderSettings(eta=4)


def test_the_ladder_reads_a_campaign_s_records_under_its_own_rules() -> None:
    """The loop, ``status``, the report and the hand-off all read the records through this
    one mapping, so none of them falls back on the defaults of another campaign."""
    ledger = LadderSettings(promote=5, fidelity=2, rung_size=4, eta=4).ledger([])
    assert (ledger.promote, ledger.fidelity, ledger.rung_size, ledger.eta) == (5, 2, 4, 4)
