"""How every executor starts a trainer and reads how it ended (:mod:`recipelab.runner.launch`):
a stale result never passes for a new one, a result for another trial is a crash, and a
trainer that died without a result is a failure that says how it ended and what it logged."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from recipelab import environment
from recipelab.runner.launch import SPEC_FILE, outcome, prepare, start_trainer, trainer_command
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import LOG_FILE, CorpusSpec, TrialResult, TrialSpec


def spec_in(tmp_path: Path, corpus: CorpusSpec) -> TrialSpec:
    return TrialSpec(trial_id="p0001", recipe=proxy_recipe("tiny"), corpus=corpus,
                     out_dir=str(tmp_path / "p0001"))


def test_preparing_a_trial_writes_its_spec_and_clears_a_stale_result(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    spec = spec_in(tmp_path, corpus)
    path = prepare(spec)
    assert path == Path(spec.out_dir) / SPEC_FILE
    assert TrialSpec.model_validate_json(path.read_text()) == spec
    spec.result_path.write_text(TrialResult(trial_id="p0001", status="complete").model_dump_json())
    prepare(spec)  # the same trial again (a resume): its old result must not be read as new
    assert not spec.result_path.exists()


def test_a_trainer_that_died_without_a_result_says_how_and_what_it_logged(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    spec = spec_in(tmp_path, corpus)
    prepare(spec)
    (Path(spec.out_dir) / LOG_FILE).write_text("step 1\nstep 2\nTraceback: boom\n")
    ended = outcome(spec, -signal.SIGKILL, host="node-2")
    assert (ended.status, ended.reason) == ("failed", "crash")
    assert ended.message == ("the trainer on node-2 was killed by SIGKILL without a result; "
                             "last log lines: step 1 | step 2 | Traceback: boom")


def test_a_result_is_read_only_when_it_is_this_trials(tmp_path: Path, corpus: CorpusSpec) -> None:
    spec = spec_in(tmp_path, corpus)
    prepare(spec)
    spec.result_path.write_text(TrialResult(trial_id="p0001", status="complete",
                                            val_bpb=2.5).model_dump_json())
    assert outcome(spec, 0).val_bpb == 2.5
    spec.result_path.write_text(TrialResult(trial_id="p0007", status="complete").model_dump_json())
    other = outcome(spec, 0)
    assert other.status == "failed" and other.message == "the result file names trial p0007"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_trainer_is_told_which_process_launched_it() -> None:
    """So a trainer whose launcher died before it could ask to die with it knows (see
    ``tests/trainer/test_entry_point.py``)."""
    process = start_trainer(trainer_command(None), env={"RECIPELAB_EXTRA": "1"})
    try:
        told = dict(line.split("=", 1) for line in Path(f"/proc/{process.pid}/environ")
                    .read_text(errors="replace").split("\0") if "=" in line)
        assert told[environment.LAUNCHER_PID] == str(os.getpid())
        assert told["RECIPELAB_EXTRA"] == "1", "the caller's variables are added"
    finally:
        assert process.stdin is not None
        process.stdin.write(b"\n")  # an empty spec line: the worker exits
        process.stdin.close()
        process.wait(timeout=120)
