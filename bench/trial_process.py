"""Run real trainer processes for the benchmarks: ``python -m recipelab.trainer --spec``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from recipelab.recipe import Recipe
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec


def start(recipe: Recipe, out_dir: Path, trial_id: str, *, threads: int | None = None,
          compile_model: bool = False, env: dict[str, str] | None = None,
          corpus: CorpusSpec | None = None) -> tuple[subprocess.Popen[bytes], TrialSpec]:
    spec = TrialSpec(trial_id=trial_id, recipe=recipe, out_dir=str(out_dir / trial_id),
                     device="cpu", threads=threads, compile=compile_model,
                     corpus=corpus or CorpusSpec())
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    path = Path(spec.out_dir) / "spec.json"
    path.write_text(spec.model_dump_json())
    process = subprocess.Popen([sys.executable, "-m", "recipelab.trainer", "--spec", str(path)],
                               env={**os.environ, **(env or {})},
                               stdout=subprocess.DEVNULL)  # the trial's log is in trial.log
    return process, spec


def finish(process: subprocess.Popen[bytes], spec: TrialSpec) -> TrialResult:
    code = process.wait()
    if not spec.result_path.exists():
        raise RuntimeError(f"trial {spec.trial_id} exited with {code} and wrote no result; "
                           f"see {Path(spec.out_dir) / 'trial.log'}")
    result = TrialResult.model_validate_json(spec.result_path.read_text())
    if result.status != "complete":
        raise RuntimeError(f"trial {spec.trial_id} ended {result.status}: {result.message}")
    return result


def run(recipe: Recipe, out_dir: Path, trial_id: str, **kwargs: object) -> tuple[TrialResult,
                                                                                 float]:
    """One trial to the end; returns its result and its wall time from process start."""
    begin = time.perf_counter()
    process, spec = start(recipe, out_dir, trial_id, **kwargs)  # type: ignore[arg-type]
    result = finish(process, spec)
    return result, time.perf_counter() - begin
