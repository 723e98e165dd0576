"""Every step's train loss is kept in the result, however sparse the logged curve is: a stress
run logged every 50 steps still shows a spike at step 37, and a curve fit has points to fit."""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any

import pytest

from recipelab.targets import proxy_recipe
from recipelab.trainer.loop import run_trial
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec

TINY = proxy_recipe("tiny")


def train(out_dir: Path, corpus: CorpusSpec, resume: bool = False, **fields: Any
          ) -> TrialResult:
    spec = TrialSpec(trial_id="dense", recipe=TINY, corpus=corpus, out_dir=str(out_dir),
                     device="cpu", **fields)
    return run_trial(spec, resume=resume, log=io.StringIO())


def test_a_sparsely_logged_run_keeps_every_steps_loss(tmp_path: Path, corpus: CorpusSpec) -> None:
    result = train(tmp_path, corpus, log_every=10)
    assert [p.step for p in result.curve] == [10, 20]
    assert len(result.losses) == TINY.steps == 20
    losses = [v for v in result.losses if v is not None]
    assert len(losses) == 20
    for point, chunk in zip(result.curve, (losses[:10], losses[10:]), strict=True):
        assert point.loss == pytest.approx(statistics.fmean(chunk), rel=1e-5)


def test_a_resumed_run_reports_every_steps_loss_of_the_uninterrupted_one(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    whole = train(tmp_path / "whole", corpus, log_every=8)
    first = train(tmp_path / "cut", corpus, log_every=8, checkpoint_every=12)
    resumed = train(tmp_path / "cut", corpus, resume=True, log_every=8, checkpoint_every=12)
    assert first.losses == whole.losses  # nothing was cut yet; the checkpoint is at step 12
    assert resumed.resumed_from_step == 12  # between two curve points (8 and 16)
    assert resumed.losses == pytest.approx(whole.losses, rel=1e-6)
