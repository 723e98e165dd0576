"""Shared pieces for the agent's specifications: small real campaigns on the tiny preset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    SearchSettings,
    WindowSettings,
)
from recipelab.proposer import Observation, Proposal, Proposer
from recipelab.recipe import Recipe
from recipelab.runner import FakeExecutor
from recipelab.trainer.spec import CorpusSpec


@pytest.fixture
def tiny_settings(corpus: CorpusSpec) -> CampaignSettings:
    """Phase 2 without the middle rung (rung_size 0), attribution or the width rung, and a top
    rung of two seeds without a close call (cheap to train): their specifications turn them on
    themselves (tests/agent/phases/test_ladder_phase.py, tests/agent/phases/test_attribution_phase.py,
    tests/agent/phases/test_width_phase.py)."""
    return CampaignSettings(name="tiny", preset="tiny", corpus=corpus, precision="fp32",
                            window=WindowSettings(iterations=3, trial_timeout_s=120),
                            ladder=LadderSettings(promote=1, stress_steps=30, stress_log_every=10,
                                                  stress_checkpoint_every=10, rung_size=0,
                                                  top_seeds=2, close_call_seeds=0,
                                                  attribution=False, width_rung=False),
                            search=SearchSettings(noise_seeds=1), executor=ExecutorSettings(parallel=1))


FAKE_STEP_S = 2e-3
"""Seconds per step of a fake trial: a tiny proxy trial (20 steps) takes 50 ms."""


def fake_executor(**options: Any) -> FakeExecutor:
    """An in-memory executor whose trials take time in proportion to their steps: for the
    specifications of scheduling, which need no real trainer (see recipelab.runner.fake)."""
    options.setdefault("duration", lambda spec: 0.01 + spec.recipe.steps * FAKE_STEP_S)
    return FakeExecutor(**options)


class ScriptedProposer(Proposer):
    """A real plug-in that proposes a fixed list of edits to the baseline, in order."""

    name = "scripted"

    def __init__(self, baseline: Recipe, edits: list[dict[str, Any]]) -> None:
        self.baseline = baseline
        self.edits = list(edits)

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        done = sum(1 for o in history if o.proposer == self.name)
        return [Proposal.from_edit(self.baseline, None, edit, f"scripted edit {i}", self.name)
                for i, edit in enumerate(self.edits[done:done + n], start=done)]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """``recipelab ARGS`` as its own process, as a user would start it."""
    return subprocess.Popen([sys.executable, "-m", "recipelab", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})


def wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.05)


def events(directory: Path, name: str | None = None) -> list[dict[str, Any]]:
    path = directory / "events.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if name is None or event.get("event") == name:
            found.append(event)
    return found
