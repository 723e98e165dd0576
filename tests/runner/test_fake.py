"""The in-memory executor's own promises (:mod:`recipelab.runner.fake`; the contract it shares
with the real executors is tests/runner/test_conformance.py): a val_bpb with an optimum to
find and seeds that disagree, a planted neutral knob that changes nothing, and a trial lost
once, mid-run, as a Ray worker is."""

from __future__ import annotations

from pathlib import Path

from recipelab.runner.fake import FakeExecutor, synthetic_val_bpb
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec

RECIPE = proxy_recipe("tiny")


def test_the_val_bpb_is_best_at_its_optimum_and_a_neutral_knob_changes_nothing() -> None:
    best = RECIPE.apply({"optimizer.lr": 3e-3, "schedule.warmup_steps": 6})
    assert synthetic_val_bpb(best) < synthetic_val_bpb(best.apply({"optimizer.lr": 3e-2}))
    assert synthetic_val_bpb(best) == synthetic_val_bpb(best.apply({"optimizer.eps": 1e-10}))
    assert synthetic_val_bpb(best) != synthetic_val_bpb(best.apply({"seed": 1}))  # seeds wobble


def test_recipe_noise_is_a_recipes_own_part_of_its_seeds_effect() -> None:
    """Without it every recipe shares its seed's wobble (paired differences are exact); with
    it, two recipes at one seed differ by more than their recipes' difference."""
    a, b = RECIPE, RECIPE.apply({"optimizer.eps": 1e-10})
    assert synthetic_val_bpb(a) == synthetic_val_bpb(b)
    assert synthetic_val_bpb(a, 0.01) != synthetic_val_bpb(b, 0.01)
    assert abs(synthetic_val_bpb(a, 0.01) - synthetic_val_bpb(a)) <= 0.01


def test_a_trial_named_lost_midway_is_interrupted_once_then_completes(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    executor = FakeExecutor(lose_midway={"p0001"}, duration=lambda spec: 0.02)
    spec = TrialSpec(trial_id="p0001", recipe=RECIPE, corpus=corpus, out_dir=str(tmp_path / "p"))
    assert executor.wait(executor.submit(spec)).status == "interrupted"
    again = executor.wait(executor.submit(spec))
    assert again.status == "complete" and again.val_bpb == synthetic_val_bpb(RECIPE)
    assert [s.trial_id for s in executor.submitted] == ["p0001", "p0001"]
