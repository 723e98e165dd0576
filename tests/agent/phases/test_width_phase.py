"""The width rung on the in-memory fake executor: after the ladder, the recommendation (the
winner's, or the baseline a campaign without one keeps) trains at the proxy's width and at
twice it by the export's rules, once each, beside a winner the baseline once at twice the
width, and ``recipelab export`` predicts the target with the gap they measured and says
whether the gain held one size up.

The fake's val_bpb (recipelab.runner.fake.synthetic_val_bpb) knows no model size, so the
outcome here takes :data:`SIZE_BONUS` off per doubling of ``d_model``: a wider model
scores lower, as a real one does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.phases import width_phase
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.cli import app
from recipelab.recipe import Recipe, non_embedding_params
from recipelab.runner.fake import synthetic_outcome
from recipelab.targets import get_target
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.store import TrajectoryStore
from recipelab.trajectory.width_check import (
    WIDTH_KIND,
    WIDTH_RATES,
    WIDTH_SEEDS,
    is_control,
    rate_multiple,
)
from recipelab.transfer.size_exponent import measured_exponent, size_exponent
from recipelab.transfer.steplaw import law_learning_rate
from recipelab.transfer.width import MAX_CONTEXT, measured_gap

from ..conftest import ScriptedProposer, events, fake_executor, read_jsonl

SIZE_BONUS = 0.4
PROXY_WIDTH = 64


def sized_outcome(spec: TrialSpec) -> TrialResult:
    result = synthetic_outcome(spec)
    assert result.val_bpb is not None
    doublings = math.log2(spec.recipe.shape.d_model / PROXY_WIDTH)
    return result.model_copy(update={"val_bpb": result.val_bpb - SIZE_BONUS * doublings})


def worse_one_size_up(spec: TrialSpec) -> TrialResult:
    """:func:`sized_outcome`, but the recommendation's first run at twice the width (``w0001``)
    scores 1.0 worse: the baseline beats it there."""
    result = sized_outcome(spec)
    assert result.val_bpb is not None
    return result.model_copy(update={"val_bpb": result.val_bpb + 1.0 * (spec.trial_id == "w0001")})


@pytest.fixture
def settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    return tiny_settings.model_copy(update={"iterations": 3, "noise_seeds": 2,
                                            "width_rung": True})


def run(settings: CampaignSettings, directory: Path, **executor: object) -> None:
    save(settings, directory)  # what 'recipelab export' reads the campaign's name from
    proposer = ScriptedProposer(settings.baseline(), [{"optimizer.lr": 3e-3}])
    Campaign(settings, directory, proposer=proposer,
             executor=fake_executor(**{"outcome": sized_outcome, **executor})).run()


def width_runs(directory: Path, control: bool = False, seed: int | None = 0, *,
               family: bool = False) -> list[TrialRecord]:
    """The width runs in record order, the control's or the recommendation's, at ``seed``
    (the campaign's; None for every seed), at the export's rate (``family``: at the rate
    family's other rates)."""
    return [record for r in read_jsonl(directory / "trajectory.jsonl") if r["kind"] == WIDTH_KIND
            if is_control(record := TrialRecord.model_validate(r)) == control
            and seed in (None, record.recipe["seed"])
            and (rate_multiple(record) != 1.0) == family]


def at_twice_the_width(runs: list[TrialRecord]) -> list[TrialRecord]:
    return [r for r in runs if r.edit["width_multiple"] == 2]


def mean(runs: list[TrialRecord]) -> float:
    return sum(r.val_bpb for r in runs if r.val_bpb is not None) / len(runs)


def test_the_winner_trains_at_two_widths_by_the_exports_rules(
        settings: CampaignSettings, tmp_path: Path) -> None:
    run(settings, tmp_path)
    narrow, wide = width_runs(tmp_path)
    assert (narrow.parent, wide.parent) == ("p0002", "p0002")  # the winner
    assert (narrow.edit, wide.edit) == ({"width_multiple": 1}, {"width_multiple": 2})
    a, b = Recipe.model_validate(narrow.recipe), Recipe.model_validate(wide.recipe)
    proxy = settings.baseline()
    assert a.shape == proxy.shape and b.shape.d_model == 2 * proxy.shape.d_model
    assert a.seq_len == b.seq_len == min(get_target("toy").context, MAX_CONTEXT)  # the target's
    assert a.seed == b.seed == settings.seed
    tokens = settings.ladder.stress_steps * proxy.tokens_per_step  # the top rung's
    assert abs(a.tokens - tokens) <= a.tokens_per_step and abs(b.tokens - tokens) <= b.tokens_per_step
    # Step Law moves the rate with the size at equal tokens, as the export does
    law = law_learning_rate(non_embedding_params(b.shape), tokens) / law_learning_rate(
        non_embedding_params(a.shape), tokens)
    assert b.optimizer.lr == pytest.approx(a.optimizer.lr * law, rel=1e-4)
    again = width_runs(tmp_path, seed=settings.seed + 1)  # the same two runs at the next seed
    assert [r.edit for r in again] == [narrow.edit, wide.edit]
    assert [Recipe.model_validate(r.recipe) for r in again] == [
        a.apply({"seed": settings.seed + 1}), b.apply({"seed": settings.seed + 1})]
    assert len(width_runs(tmp_path, seed=None)) == 2 * WIDTH_SEEDS
    measured = events(tmp_path, "width_measured")[-1]  # the gap from the means over the seeds
    assert measured["narrow"] == pytest.approx(mean([narrow, again[0]]))
    assert measured["wide"] == pytest.approx(mean([wide, again[1]]))
    assert measured["slope"] > 0 and measured["target_lowering"] > 0


def test_the_baseline_trains_at_both_widths_beside_it_as_the_control(
        settings: CampaignSettings, tmp_path: Path) -> None:
    """The baseline moved by the same export rules onto both models (its own rate, the
    winner's lr edit not carried), at the same tokens and seeds. At twice the width its score
    less the recommendation's is the gain one size up, in the event, the export and the
    report; its two sizes are its own size term, which ``export --trial p0000`` predicts with."""
    run(settings, tmp_path)
    _, wide = width_runs(tmp_path)
    narrow_control, control = width_runs(tmp_path, control=True)
    assert control.parent == narrow_control.parent == "p0000"
    assert (narrow_control.edit, control.edit) == ({"width_multiple": 1, "arm": "baseline"},
                                                   {"width_multiple": 2, "arm": "baseline"})
    ours, theirs = Recipe.model_validate(wide.recipe), Recipe.model_validate(control.recipe)
    assert ours.shape == theirs.shape and ours.seed == theirs.seed and ours.steps == theirs.steps
    proxy = settings.baseline()
    assert theirs.optimizer.lr / ours.optimizer.lr == pytest.approx(
        proxy.optimizer.lr / 3e-3, rel=1e-4), "each keeps its own rate, moved by the same law"
    controls, wides = (at_twice_the_width(width_runs(tmp_path, control=arm, seed=None))
                       for arm in (True, False))
    assert len(controls) == WIDTH_SEEDS and [r.recipe["seed"] for r in controls] == [
        r.recipe["seed"] for r in wides]
    gain = mean(controls) - mean(wides)
    assert events(tmp_path, "width_measured")[-1]["gain_at_twice_width"] == pytest.approx(gain)
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out), "--device",
                                      "cpu"])
    assert result.exit_code == 0, result.output
    check = json.loads((out / "manifest.json").read_text())["width_check"]
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        floor = noise_floor(store.records())
    assert floor is not None and check["floor"] == (floor.paired_spread or floor.spread) > 0
    assert check["gain"] == pytest.approx(gain) and check["held"] == (gain > check["floor"])
    assert check["recommended"]["trial"] == "+".join(r.trial_id for r in wides)
    assert check["baseline"]["trial"] == "+".join(r.trial_id for r in controls)
    assert check["seeds"] == WIDTH_SEEDS
    assert "One size up: at twice the proxy's width" in (out / "transfer.md").read_text()
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"gain {gain:+.4f}" in (tmp_path / "report" / "report.md").read_text()
    control_arm = tmp_path / "control"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(control_arm),
                                      "--device", "cpu", "--trial", "p0000"])
    assert result.exit_code == 0, result.output
    size = json.loads((control_arm / "prediction.json").read_text())["measured_size"]
    narrows = [r for r in width_runs(tmp_path, control=True, seed=None) if r not in controls]
    assert (size["narrow"]["trial"], size["wide"]["trial"]) == (
        "+".join(r.trial_id for r in narrows), "+".join(r.trial_id for r in controls))


def test_the_export_predicts_the_target_with_the_measured_gap(
        settings: CampaignSettings, tmp_path: Path) -> None:
    run(settings, tmp_path)
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out), "--device",
                                      "cpu"])
    assert result.exit_code == 0, result.output
    prediction = json.loads((out / "prediction.json").read_text())
    exported = json.loads((out / "manifest.json").read_text())["winner"]
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        gap = measured_gap(store.records(), exported)  # the exported recipe's own
    assert gap is not None and prediction["measured_size"] == json.loads(json.dumps(gap.to_json()))
    assert "from the width rung" in (out / "transfer.md").read_text()


def test_the_recommendations_rate_families_give_the_export_its_size_exponent(
        settings: CampaignSettings, tmp_path: Path) -> None:
    """At the campaign's seed the recommendation also trains at lr × ½ and × 2 at both widths,
    and one step beyond a family's edge while its best lies there. The export carries its rate
    with the law's exponent pooled with the one those families measure, and says both."""
    run(settings, tmp_path)
    at_rate = {r.edit["width_multiple"]: Recipe.model_validate(r.recipe) for r in width_runs(tmp_path)}
    family = width_runs(tmp_path, family=True)
    assert width_runs(tmp_path, seed=settings.seed + 1, family=True) == []
    assert width_runs(tmp_path, control=True, seed=None, family=True) == []
    # the wide family's best lies above its rates: it trains × 4, then × 8, and places it
    assert sorted((r.edit["width_multiple"], r.edit["lr_family"]) for r in family) == sorted(
        [(m, x) for m in (1, 2) for x in WIDTH_RATES] + [(2, 4.0), (2, 8.0)])
    every = width_runs(tmp_path, seed=None) + width_runs(tmp_path, control=True, seed=None) + family
    assert len({r.artifacts["dir"] for r in every}) == len(every), (
        "each run its own checkpoint folder: a finished run's is never resumed by another")
    for r in family:
        own = at_rate[r.edit["width_multiple"]]
        assert r.parent == "p0002" and Recipe.model_validate(r.recipe) == own.apply(
            {"optimizer.lr": own.optimizer.lr * r.edit["lr_family"]})
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        records = store.records()
    measured, exponent = measured_exponent(records), size_exponent(records)
    assert measured is not None and exponent.measured == measured
    # the fake's best rate is 3e-3 at every width
    assert measured.narrow.lr == pytest.approx(3e-3, rel=0.01) and not measured.narrow.edge
    assert measured.wide.lr == pytest.approx(3e-3, rel=0.01) and not measured.wide.edge
    assert measured.value == pytest.approx(0.0, abs=0.01)
    assert events(tmp_path, "width_measured")[-1]["lr_size_exponent"] == pytest.approx(measured.value)
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["size_exponent"] == json.loads(json.dumps(exponent.to_json()))
    assert -0.713 < exponent.value < measured.value  # pooled between the prior and the measurement
    law = manifest["law"]  # the law's own exponent would export its rate × the anchor
    at_law = law["target"]["law_lr"] * law["lr_anchor"]
    sizes = law["target"]["params"] / law["proxy"]["params"]
    lr = json.loads((out / "recipe.json").read_text())["optimizer"]["lr"]
    assert lr == pytest.approx(at_law * sizes ** (exponent.value + 0.713), rel=1e-6)
    text = (out / "transfer.md").read_text()
    assert f"The rate's size exponent: N^{exponent.value:.3f} ± {exponent.sd:.3f}" in text
    assert f"| the campaign's size exponent, N^{exponent.value:.3f} | | | × " in text


def test_a_lost_width_run_resumes_and_nothing_trains_twice(
        settings: CampaignSettings, tmp_path: Path) -> None:
    run(settings, tmp_path, lose_midway={"w0000"})
    runs = width_runs(tmp_path)
    assert [r.status for r in runs] == ["interrupted", "complete", "complete"]
    assert [r.status for r in width_runs(tmp_path, control=True)] == ["complete", "complete"]
    assert runs[1].retry_of == "w0000" and runs[1].artifacts["dir"] == runs[0].artifacts["dir"]
    before = read_jsonl(tmp_path / "trajectory.jsonl")
    run(settings, tmp_path)  # resumed after the end: nothing is run or written twice
    assert read_jsonl(tmp_path / "trajectory.jsonl") == before


def test_a_rung_of_fewer_seeds_resumes_with_only_the_missing_seeds(
        settings: CampaignSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign whose rung trained one seed (an older release's) trains, resumed, the next
    seed's four runs and nothing else; its gap and check become the means over both."""
    with monkeypatch.context() as older:
        older.setattr(width_phase, "WIDTH_SEEDS", 1)
        run(settings, tmp_path)
    first = width_runs(tmp_path, seed=None) + width_runs(tmp_path, control=True, seed=None)
    assert len(first) == 4
    run(settings, tmp_path)
    runs = width_runs(tmp_path, seed=None) + width_runs(tmp_path, control=True, seed=None)
    assert [r for r in runs if r.trial_id in {f.trial_id for f in first}] == first
    assert sorted(r.recipe["seed"] for r in runs if r not in first) == [settings.seed + 1] * 4
    assert events(tmp_path, "width_measured")[-1]["gain_at_twice_width"] == pytest.approx(
        mean(at_twice_the_width(width_runs(tmp_path, control=True, seed=None)))
        - mean(at_twice_the_width(width_runs(tmp_path, seed=None))))


def test_turned_off_it_trains_nothing_and_says_so(
        settings: CampaignSettings, tmp_path: Path) -> None:
    run(settings.model_copy(update={"width_rung": False}), tmp_path)
    assert width_runs(tmp_path) == []
    assert events(tmp_path, "width_skipped")[-1]["reason"] == "turned off (--no-width-rung)"


def test_out_of_time_it_says_it_skipped_the_width_rung(
        settings: CampaignSettings, tmp_path: Path) -> None:
    # a 25-second window: the search and the top rung fit, but the top rung's four runs take
    # 3 s each where the planner expected the proxy's pace, so what is left after them is
    # the report's reserve: the width rung's two runs do not fit
    settings = settings.model_copy(update={"hours": 25 / 3600})
    run(settings, tmp_path, duration=lambda spec: 3.0 if spec.kind == "stress" else 0.05)
    skipped = events(tmp_path, "width_skipped")
    assert skipped and skipped[-1]["reason"].startswith("out of time")
    assert width_runs(tmp_path) == []


def test_without_a_winner_it_measures_the_baseline_the_campaign_keeps(
        settings: CampaignSettings, tmp_path: Path) -> None:
    """A top rung that names no finalist better than the baseline beyond the noise concludes
    "keep the baseline": the rung measures the baseline's own size term, with no control, and
    ``recipelab export`` hands off the baseline predicted with it."""
    save(settings, tmp_path)
    proposer = ScriptedProposer(settings.baseline(), [{"optimizer.lr": 3e-5}])  # far worse
    Campaign(settings, tmp_path, proposer=proposer,
             executor=fake_executor(outcome=sized_outcome)).run()
    assert "keep the baseline" in events(tmp_path, "campaign_finished")[-1]["winner_line"]
    narrow, wide = width_runs(tmp_path)
    assert (narrow.parent, wide.parent) == ("p0000", "p0000")
    assert width_runs(tmp_path, control=True) == []  # the baseline is no control for itself
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out), "--device",
                                      "cpu"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["winner"] == "p0000"
    assert manifest["chosen_because"].startswith("the baseline the campaign keeps")
    assert manifest["width_check"] is None
    assert not (out / "fallback-recipe.json").exists()  # no finalist beat it: nothing to fall back on
    assert ("Fallback: none (the campaign keeps the baseline: the top rung named no finalist "
            "better than it beyond the noise).") in (out / "transfer.md").read_text()
    prediction = json.loads((out / "prediction.json").read_text())
    with TrajectoryStore(tmp_path, settings.name, readonly=True) as store:
        gap = measured_gap(store.records())
    again = width_runs(tmp_path, seed=settings.seed + 1)
    assert gap is not None and gap.runs == (f"{narrow.trial_id}+{again[0].trial_id}",
                                            f"{wide.trial_id}+{again[1].trial_id}")
    assert prediction["measured_size"] == json.loads(json.dumps(gap.to_json()))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report" / "report.md").read_text()
    assert "recommended: p0000" in report and "The baseline moved onto the target" in report


def test_a_winner_the_baseline_beats_one_size_up_hands_off_the_baseline(
        settings: CampaignSettings, tmp_path: Path) -> None:
    """The winner's run at twice the width scores far worse than the baseline's there: the
    campaign keeps the baseline, says so in its winner line, and ``recipelab export`` hands
    the baseline off; resumed, the rung still reads the ladder's winner and trains nothing."""
    run(settings, tmp_path, outcome=worse_one_size_up)
    _, wide = width_runs(tmp_path)
    assert wide.trial_id == "w0001" and wide.parent != "p0000"
    line = events(tmp_path, "campaign_finished")[-1]["winner_line"]
    assert line.startswith(f"winner: {wide.parent}")
    assert f"; but one size up the baseline beat the winner {wide.parent} by " in line
    assert events(tmp_path, "width_measured")[-1]["baseline_kept"] is True
    assert events(tmp_path, "campaign_finished")[-1]["recommendation_line"].startswith(
        "recommended: the baseline, which the campaign keeps")
    assert line.endswith(": keep the baseline")
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(tmp_path), "--out", str(out), "--device",
                                      "cpu"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["winner"] == "p0000" and manifest["kept_baseline"] is True
    assert manifest["width_check"]["lost"] is True
    assert not (out / "fallback-recipe.json").exists()
    before = read_jsonl(tmp_path / "trajectory.jsonl")
    run(settings, tmp_path, outcome=worse_one_size_up)
    assert read_jsonl(tmp_path / "trajectory.jsonl") == before


def test_resumed_after_a_check_that_lost_the_rung_still_trains_the_ladders_recommendation(
        settings: CampaignSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rung stopped after one seed, whose check lost (the campaign keeps the baseline):
    resumed, the next seed's runs are still the winner's recipe, not the baseline's."""
    with monkeypatch.context() as older:
        older.setattr(width_phase, "WIDTH_SEEDS", 1)
        run(settings, tmp_path, outcome=worse_one_size_up)
    assert "keep the baseline" in events(tmp_path, "campaign_finished")[-1]["winner_line"]
    run(settings, tmp_path, outcome=worse_one_size_up)
    first, again = width_runs(tmp_path), width_runs(tmp_path, seed=settings.seed + 1)
    assert [r.parent for r in again] == [r.parent for r in first] != ["p0000", "p0000"]
    assert [Recipe.model_validate(r.recipe) for r in again] == [
        Recipe.model_validate(r.recipe).apply({"seed": settings.seed + 1}) for r in first]


def test_a_night_without_a_candidate_skips_it_and_says_why(
        settings: CampaignSettings, tmp_path: Path) -> None:
    """A search that trained only the baseline's seeds (the bare two-iteration run) has
    nothing to hand off: the rung's wide run, most of such a night's time, is skipped."""
    save(settings, tmp_path)
    proposer = ScriptedProposer(settings.baseline(), [])
    Campaign(settings.model_copy(update={"iterations": 2}), tmp_path, proposer=proposer,
             executor=fake_executor(outcome=sized_outcome)).run()
    assert width_runs(tmp_path) == []
    assert events(tmp_path, "width_skipped")[-1]["reason"].startswith("no candidate beside")
