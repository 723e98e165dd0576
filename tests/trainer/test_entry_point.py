"""Specification of ``python -m recipelab.trainer``: the process a launcher starts per trial."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recipelab import environment
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec

TINY = proxy_recipe("tiny")
GIB = 1 << 30


def write_spec(tmp_path: Path, corpus: CorpusSpec, recipe: Recipe = TINY,
               trial_id: str = "entry") -> tuple[Path, TrialSpec]:
    spec = TrialSpec(trial_id=trial_id, recipe=recipe, corpus=corpus,
                     out_dir=str(tmp_path / "out"), device="cpu")
    path = tmp_path / "spec.json"
    path.write_text(spec.model_dump_json())
    return path, spec


def trainer(args: list[str], env: dict[str, str], stdin: str = "",
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recipelab.trainer", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=240, check=False)


def test_a_worker_reads_its_spec_path_from_stdin_and_writes_result_and_log_in_out_dir(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    path, spec = write_spec(tmp_path, corpus)
    done = trainer(["--spec", "-"], trainer_env, stdin=f"{path}\n")
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", ""), "a worker's output belongs in trial.log"

    out = Path(spec.out_dir)
    result = TrialResult.model_validate_json((out / "result.json").read_text())
    assert (result.trial_id, result.status) == ("entry", "complete")
    assert result.val_bpb is not None
    log = (out / "trial.log").read_text()
    assert f"trial entry: {TINY.param_count():,} parameters" in log
    assert f"val_bpb {result.val_bpb:.4f}" in log
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "trial.log"], (
        "the atomic write leaves no temporary file behind")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_launcher_died_before_it_could_die_with_it_exits_reading_no_spec(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    """A Ray task cancelled as it starts its trainer dies before the trainer asks Linux to
    end it with its launcher; the trainer, reparented, must not train the spec left in its
    pipe (one ran on for an hour this way under a loaded test suite)."""
    launcher = subprocess.Popen([sys.executable, "-c", "pass"])
    launcher.wait()  # its pid now names a launcher that is gone
    path, spec = write_spec(tmp_path, corpus)
    done = trainer(["--spec", "-"], {**trainer_env, environment.LAUNCHER_PID: str(launcher.pid)},
                   stdin=f"{path}\n")
    assert done.returncode == 1
    assert not Path(spec.out_dir).exists(), "it trained nothing"


def test_a_worker_given_an_empty_line_exits_with_code_2(trainer_env: dict[str, str]) -> None:
    assert trainer(["--spec", "-"], trainer_env, stdin="\n").returncode == 2


def test_an_invalid_spec_file_exits_with_code_2_naming_the_file_and_the_problem(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    path, spec = write_spec(tmp_path, corpus)
    path.write_text(spec.model_dump_json()[:-1] + ', "bogus_knob": 1}')
    done = trainer(["--spec", str(path)], trainer_env)
    assert done.returncode == 2
    assert str(path) in done.stderr
    assert "bogus_knob" in done.stderr
    assert not Path(spec.out_dir).exists(), "nothing runs for an invalid spec"


def test_a_missing_spec_file_exits_with_code_2_naming_the_file(
    tmp_path: Path, trainer_env: dict[str, str],
) -> None:
    missing = tmp_path / "no-such-spec.json"
    done = trainer(["--spec", str(missing)], trainer_env)
    assert done.returncode == 2
    assert str(missing) in done.stderr


def test_a_recipe_too_big_for_the_memory_limit_ends_as_failed_oom(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    """A 2 GiB address-space cap; one step's logits alone (8 × 64 positions × 2^20 vocab ×
    4 bytes) are 2 GiB, so the first forward pass cannot be allocated."""
    big_vocab = TINY.apply({"shape.vocab_size": 1 << 20, "steps": 1})
    path, spec = write_spec(tmp_path, corpus, big_vocab)
    done = trainer(["--spec", str(path), "--memory-limit", str(2 * GIB)], trainer_env)
    assert done.returncode == 0, done.stderr
    result = TrialResult.model_validate_json(spec.result_path.read_text())
    assert (result.status, result.reason) == ("failed", "oom")
    assert result.message is not None and result.message.startswith("out of memory")
    assert result.steps_done == 0


def test_a_trainer_launched_by_a_large_process_reports_its_own_peak_memory(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    # The process-wide peak (ru_maxrss) survives fork and exec: read naively, a trainer
    # started by a 1 GiB launcher would report at least 1 GiB of its own.
    ballast = bytearray(b"\x01" * GIB)
    path, spec = write_spec(tmp_path, corpus)

    done = trainer(["--spec", str(path)], trainer_env)

    assert done.returncode == 0, done.stderr
    result = TrialResult.model_validate_json(spec.result_path.read_text())
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes < GIB // 2
    del ballast
