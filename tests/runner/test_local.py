"""The local executor: one process group per trial, a timeout kills the group, a trainer
that dies without a result is a crash."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from recipelab.runner import LocalExecutor
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec


def tiny_spec(tmp_path: Path, corpus: CorpusSpec, trial_id: str = "t1", **update: object) -> TrialSpec:
    recipe = proxy_recipe("tiny").apply(update) if update else proxy_recipe("tiny")
    return TrialSpec(trial_id=trial_id, recipe=recipe, corpus=corpus,
                     out_dir=str(tmp_path / trial_id))


def test_a_trial_runs_in_a_warm_worker_and_returns_its_result(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    executor = LocalExecutor()
    executor.prestart()
    try:
        spec = tiny_spec(tmp_path, corpus)
        handle = executor.submit(spec)
        result = executor.wait(handle)
    finally:
        executor.close()
    assert result.status == "complete" and result.trial_id == "t1"
    assert "val_bpb" in (tmp_path / "t1" / "trial.log").read_text()
    assert (tmp_path / "t1" / "spec.json").exists()


def test_a_trial_past_its_timeout_is_killed_with_its_whole_process_group(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    executor = LocalExecutor(warm=False)
    spec = tiny_spec(tmp_path, corpus, steps=100_000)
    handle = executor.submit(spec, timeout_s=3.0)
    assert handle.process is not None
    pid = handle.process.pid

    result = executor.wait(handle)

    assert (result.status, result.reason) == ("failed", "timeout")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_trainer_killed_without_a_result_is_a_crash_with_the_signal_named(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    executor = LocalExecutor(warm=False)
    spec = tiny_spec(tmp_path, corpus, steps=100_000)
    handle = executor.submit(spec)
    assert handle.process is not None
    log = tmp_path / "t1" / "trial.log"
    deadline = time.monotonic() + 120
    while "step" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(handle.process.pid, signal.SIGABRT)

    result = executor.wait(handle)

    assert (result.status, result.reason) == ("failed", "crash")
    assert result.message is not None and "SIGABRT" in result.message


def test_a_worker_capped_below_its_needs_fails_as_oom_not_crash(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    probe = LocalExecutor(warm=False)
    baseline = probe.wait(probe.submit(tiny_spec(tmp_path, corpus, trial_id="probe")))
    assert baseline.status == "complete"
    vms = psutil.Process().memory_info().vms
    executor = LocalExecutor(warm=False, memory_limit_bytes=max(vms, 3 * 2**30))
    huge = tiny_spec(tmp_path, corpus, trial_id="huge", batch_size=64, seq_len=512,
                     **{"shape.vocab_size": 1_000_000, "shape.d_model": 2048})

    result = executor.wait(executor.submit(huge))

    assert (result.status, result.reason) == ("failed", "oom"), result.message


def spawned_environ(pid: int, timeout_s: float = 10.0) -> list[bytes]:
    """A just-started process's environment. It reads empty while the kernel is still
    executing the new program (a window a loaded machine makes long), so read until it is
    not, for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        if environ or time.monotonic() > deadline:
            return environ.split(b"\0")
        time.sleep(0.01)


def test_trials_sharing_the_gpu_are_told_how_many_share_it() -> None:
    """--parallel 2 on one machine: each trainer's telemetry divides the GPU's power by 2."""
    executor = LocalExecutor(parallel=2)
    executor.prestart()
    try:
        assert executor._spare is not None
        environ = spawned_environ(executor._spare.pid)
    finally:
        executor.close()
    assert b"RECIPELAB_PARALLEL_ON_DEVICE=2" in environ
    assert LocalExecutor(parallel=1).env is None
