"""The long run trains exactly what a trial trains: recipes drawn from the search space
(every optimizer, schedule, stability and batch knob, and the shape knobs ``--searchable``
allows) give ``recipelab train``'s per-step losses in a 1-process ``pretrain``, and 2 gloo
processes follow 1 within 1e-4."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import optuna
import pytest

import recipelab
from recipelab.longrun.run import run_pretrain
from recipelab.proposer.space import SHAPE_KNOBS, default_space
from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from recipelab.trainer.loop import run_trial
from recipelab.trainer.spec import CorpusSpec, TrialSpec
from tests.longrun.test_run import config, launch, metrics

STEPS = 8
EVERY_KNOB_MOVED = {"stability.z_loss": 0.001, "stability.logit_softcap": 15.0,
                    "stability.init_std": 0.04, "stability.depth_scaled_init": False,
                    "optimizer.lr_embed_mult": 3.0, "optimizer.lr_hidden_mult": 0.3,
                    "steps": STEPS}


def drawn_recipes(count: int, seed: int) -> list[Recipe]:
    """``count`` recipes drawn at random from the whole search space around ``tiny``."""
    baseline = proxy_recipe("tiny")
    space = default_space(baseline, searchable=tuple(SHAPE_KNOBS), precisions=("fp32",))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    recipes: list[Recipe] = []
    while len(recipes) < count:
        point = study.ask(space.distributions()).params
        edit = space.resolve(point, baseline.knobs())
        recipe = baseline.apply({**edit, "steps": STEPS})
        if recipe.batch_size * recipe.seq_len * recipe.grad_accum <= 8192:  # keep CPU time small
            recipes.append(recipe)
    return recipes


def trial_losses(recipe: Recipe, corpus: CorpusSpec, tmp: Path) -> list[float | None]:
    spec = TrialSpec(trial_id="p0000", recipe=recipe, corpus=corpus, device="cpu",
                     out_dir=str(tmp), log_every=1, threads=1)
    result = run_trial(spec, log=(tmp / "log.txt").open("w"))
    assert result.status == "complete", result.message
    return result.losses


def pretrain_losses(recipe: Recipe, corpus: CorpusSpec, out: Path) -> list[float]:
    settings = config(out, corpus, log_every=1, eval_every=1000, checkpoint_every=0)
    run_pretrain(settings.model_copy(update={"recipe": recipe}))
    return [float(row["train_loss"]) for row in metrics(out)]


@pytest.mark.parametrize("recipe", [proxy_recipe("tiny").apply(EVERY_KNOB_MOVED),
                                    *drawn_recipes(3, seed=0)],
                         ids=["every-stability-knob-and-multiplier", "drawn-0", "drawn-1",
                              "drawn-2"])
def test_pretrain_makes_the_trials_per_step_losses(recipe: Recipe, corpus: CorpusSpec,
                                                   tmp_path: Path) -> None:
    (tmp_path / "trial").mkdir()
    trial = trial_losses(recipe, corpus, tmp_path / "trial")
    long = pretrain_losses(recipe, corpus, tmp_path / "long")
    assert len(trial) == len(long) == STEPS
    assert long == pytest.approx(trial, rel=1e-6)


def test_two_gloo_processes_follow_one_for_a_recipe_with_every_knob_moved(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = proxy_recipe("tiny").apply({**EVERY_KNOB_MOVED, "grad_accum": 2})
    path = tmp_path / "recipe.json"
    path.write_text(recipe.model_dump_json())
    single = pretrain_losses(recipe, corpus, tmp_path / "one")
    launch([sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "2", "-m", "recipelab", "pretrain", "--recipe", str(path),
            "--out", str(tmp_path / "two"), "--corpus", corpus.source, "--log-every", "1",
            "--eval-every", "1000", "--checkpoint-every", "0", "--device", "cpu"],
           {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or ""}, timeout=240)
    double = [float(row["train_loss"]) for row in metrics(tmp_path / "two")]
    assert double == pytest.approx(single, rel=1e-4)
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["world_size"] == 2


def test_the_trial_and_the_long_run_take_their_steps_in_one_loop() -> None:
    """Only the step loop sets a step's learning rate and takes the core step; the trial and
    the long run both drive it, so a change to a step reaches both."""
    src = Path(recipelab.__file__).parent
    calls: dict[str, set[str]] = {}
    for module in src.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                calls.setdefault(node.func.id, set()).add(module.relative_to(src).as_posix())
    assert calls["train_step"] == calls["set_learning_rate"] == {"trainer/step_loop.py"}
    assert calls["run_steps"] == {"trainer/loop.py", "longrun/run.py"}
