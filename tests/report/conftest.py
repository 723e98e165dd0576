"""A finished tiny campaign, run once per session with the real Campaign, for the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    SearchSettings,
    WindowSettings,
    save,
)
from recipelab.trainer.spec import CorpusSpec
from tests.agent.conftest import ScriptedProposer

EDITS: list[dict[str, Any]] = [
    {"shape.activation": "gelu"},  # breaks the target's shape: rejected, never trained
    {"optimizer.lr": 0.03},
    {"optimizer.lr": 0.003},
    {"schedule.kind": "linear", "optimizer.weight_decay": 0.0},
    # a quarter of the batch (four times the steps for the same tokens) at twice the rate: a
    # gain the top rung can tell from noise (about 0.1 val_bpb at both seeds), and a rate the
    # export carries (it sets the batch by its own law)
    {"batch_size": 2, "optimizer.lr": 0.02},
]


@pytest.fixture(scope="session")
def finished_campaign(tmp_path_factory: pytest.TempPathFactory, corpus: CorpusSpec) -> Path:
    """Two baseline seeds and five scripted edits (one rejected), seed re-runs of close
    finalists, then the top two and one mid-ranked trial (``fidelity=1``) stress-run; not
    attributed (``attributed_campaign`` is, for tests/report/test_why.py), and no width rung
    (its prediction is Kaplan's; tests/agent/test_width_phase.py has the measured one)."""
    directory = tmp_path_factory.mktemp("campaigns") / "nightly"
    directory.mkdir()
    settings = CampaignSettings(name="nightly", preset="tiny", corpus=corpus, precision="fp32",
                                window=WindowSettings(iterations=6, trial_timeout_s=120),
                                ladder=LadderSettings(promote=2, fidelity=1, stress_steps=24,
                                                      top_seeds=2, close_call_seeds=0,
                                                      stress_log_every=4, stress_checkpoint_every=8,
                                                      rung_size=0, attribution=False,
                                                      width_rung=False),
                                search=SearchSettings(noise_seeds=2), executor=ExecutorSettings(parallel=1))
    save(settings, directory)
    Campaign(settings, directory, proposer=ScriptedProposer(settings.baseline(), EDITS)).run()
    return directory
