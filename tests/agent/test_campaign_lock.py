"""One orchestrator per campaign (:mod:`recipelab.agent.campaign_lock`): a second is refused
with who holds it and what to do, and the lock is free again once the first leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab.agent.campaign_lock import CampaignLock, CampaignLocked


def test_a_second_orchestrator_is_told_who_runs_the_campaign_and_what_to_do(tmp_path: Path) -> None:
    with CampaignLock(tmp_path):
        with pytest.raises(CampaignLocked) as refused:
            CampaignLock(tmp_path).acquire()
        message = str(refused.value)
        assert str(tmp_path) in message and "is already being run by pid" in message
        assert "recipelab status" in message
    with CampaignLock(tmp_path):  # free once the first left
        pass
