"""calibration: prior trajectories read line by line, made relative to their own baseline,
summarised for the LLM, and never written into the campaign that learns from them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    SearchSettings,
    WindowSettings,
)
from recipelab.cli import app
from recipelab.proposer import default_space
from recipelab.targets import proxy_recipe
from recipelab.trajectory.calibration import calibration_summary, load_calibration
from recipelab.trajectory.record import TrialRecord

BASE = proxy_recipe("tiny")
SPACE = default_space(BASE)
LR = BASE.optimizer.lr


def prior(campaign: str, trial_id: str, val_bpb: float | None, *, edit: dict[str, Any] | None = None,
          proposer: str = "classical-tpe", status: str = "complete", **fields: Any) -> TrialRecord:
    recipe = BASE.apply(edit or {})
    return TrialRecord(campaign=campaign, trial_id=trial_id, status=status,
                       proposer=proposer, val_bpb=val_bpb, recipe=recipe.model_dump(mode="json"),
                       edit=edit or {}, fingerprint=recipe.fingerprint(), **fields)


def write(path: Path, lines: Sequence[TrialRecord | str | bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        for line in lines:
            if isinstance(line, TrialRecord):
                line = line.to_json_line()
            handle.write((line.encode() if isinstance(line, str) else line) + b"\n")
    return path


def high_lr_campaign(name: str, scale: float) -> list[TrialRecord]:
    """A campaign whose baseline seeds average ``scale`` and where a higher lr was better."""
    return [prior(name, "p0000", 1.00 * scale, proposer="baseline"),
            prior(name, "p0001", 1.02 * scale, edit={"seed": 1}, proposer="baseline"),
            prior(name, "p0002", 0.90 * scale, edit={"optimizer.lr": LR * 4}),
            prior(name, "p0003", 1.20 * scale, edit={"optimizer.lr": LR / 4}),
            prior(name, "p0004", None, edit={"optimizer.lr": LR * 9}, status="failed",
                  reason="diverged"),
            prior(name, "p0005", None, edit={"batch_size": 10_000}, status="rejected",
                  reasons=["memory: needs 90 GiB"]),
            prior(name, "s0000", 0.5 * scale, kind="stress", proposer="classical-tpe")]


def test_val_bpb_is_relative_to_each_campaigns_own_baseline_mean(tmp_path: Path) -> None:
    small = write(tmp_path / "a" / "trajectory.jsonl", high_lr_campaign("a", scale=2.0))
    large = write(tmp_path / "b.jsonl", high_lr_campaign("b", scale=5.0))

    calibration = load_calibration([small.parent, large])

    assert calibration.problems == ()
    assert calibration.campaigns == ("a", "b")
    by_id = {(t.campaign, t.trial_id): t for t in calibration.trials}
    assert ("a", "s0000") not in by_id  # stress runs are not proxy evidence
    for campaign in ("a", "b"):  # baseline mean (1.00 + 1.02) / 2 = 1.01 of its own scale
        assert by_id[campaign, "p0002"].relative == pytest.approx(0.90 / 1.01)
        assert by_id[campaign, "p0003"].relative == pytest.approx(1.20 / 1.01)
        assert by_id[campaign, "p0002"].edit == {"optimizer.lr": LR * 4}
        assert by_id[campaign, "p0004"].relative is None
        assert by_id[campaign, "p0004"].reason == "diverged"
        assert by_id[campaign, "p0005"].reasons == ("memory: needs 90 GiB",)
    assert calibration.counts() == {"trials": 12, "complete": 8, "failed": 2, "rejected": 2,
                                    "campaigns": 2, "problems": 0}


def test_malformed_lines_are_reported_with_file_and_line_and_skipped(tmp_path: Path) -> None:
    good = high_lr_campaign("a", scale=2.0)
    path = write(tmp_path / "trajectory.jsonl", [
        good[0], "{not json", "[1, 2]", b"\xff\xfe binary", "",
        json.dumps({"campaign": "a", "trial_id": "p0009"}),  # no status
        json.dumps({"campaign": "a", "trial_id": "p0010", "status": "exploded"}),
        *good[1:4]])

    calibration = load_calibration([path])

    problems = {p.line or 0: str(p) for p in calibration.problems}
    assert sorted(problems) == [2, 3, 4, 6, 7]
    assert problems[2].startswith(f"{path}:2: not a JSON line")
    assert "not a trial record object" in problems[3]
    assert "not a JSON line" in problems[4]
    assert "status" in problems[6] and "another tool or version" in problems[6]
    assert "status" in problems[7]
    assert {t.trial_id for t in calibration.trials} == {"p0000", "p0001", "p0002", "p0003"}


def test_missing_and_incompatible_files_are_reported_not_fatal(tmp_path: Path) -> None:
    no_baseline = write(tmp_path / "nb.jsonl", [
        prior("nb", "p0001", 0.8, edit={"optimizer.lr": LR * 2}),
        prior("nb", "p0002", None, edit={"optimizer.lr": LR * 9}, status="failed", reason="nan")])
    empty = write(tmp_path / "empty.jsonl", [])
    (tmp_path / "not-a-campaign").mkdir()
    good = write(tmp_path / "good.jsonl", high_lr_campaign("g", 2.0))

    calibration = load_calibration([tmp_path / "missing.jsonl", tmp_path / "not-a-campaign",
                                    no_baseline, empty, good, good])

    text = [str(p) for p in calibration.problems]
    assert any("missing.jsonl: no such file" in t for t in text)
    assert any("not-a-campaign: no trajectory.jsonl" in t for t in text)
    assert any("'nb' has no complete baseline" in t for t in text)
    assert any("empty.jsonl: empty" in t for t in text)
    nb = [t for t in calibration.trials if t.campaign == "nb"]
    assert [(t.trial_id, t.status) for t in nb] == [("p0002", "failed")]  # failures still teach
    assert len([t for t in calibration.trials if t.campaign == "g"]) == 6  # read once


def test_the_summary_names_important_knobs_best_edits_and_what_to_avoid(tmp_path: Path) -> None:
    records = high_lr_campaign("a", 2.0) + [
        prior("a", f"p{i:04d}", 2.0 * (1.1 - 0.04 * i), edit={"optimizer.lr": LR * (1 + i / 4)})
        for i in range(6, 12)]
    calibration = load_calibration([write(tmp_path / "t.jsonl", records)])

    summary = calibration_summary(calibration, SPACE.names())

    assert summary is not None and len(summary) <= 1_400
    assert "relative to each campaign's own baseline" in summary
    assert "Knob importance: optimizer.lr" in summary
    best_line = summary.split("Best prior edits from the baseline:\n")[1].splitlines()[0]
    assert best_line == f'- {{"optimizer.lr": {LR * 3.75}}} → 0.653x baseline (+34.7% gain)'
    assert "failed (diverged)" in summary and "memory: needs 90 GiB" in summary
    assert "seed" not in summary.split("Knob importance")[1].splitlines()[0]
    many = load_calibration([write(tmp_path / "many.jsonl", records * 200)])
    assert len(calibration_summary(many, SPACE.names()) or "") <= 1_400
    assert calibration_summary(load_calibration([]), SPACE.names()) is None


def test_prior_trials_are_never_written_to_the_new_campaign(
        tmp_path: Path, corpus: Any) -> None:
    prior_file = write(tmp_path / "old" / "trajectory.jsonl",
                       [*high_lr_campaign("old", 2.0), "{torn"])
    settings = CampaignSettings(name="new", preset="tiny", corpus=corpus,
                                window=WindowSettings(iterations=2, trial_timeout_s=120),
                                ladder=LadderSettings(promote=0),
                                search=SearchSettings(noise_seeds=1,
                                                      calibrate_from=(str(prior_file.parent),)),
                                executor=ExecutorSettings(parallel=1))
    directory = tmp_path / "new"

    summary = Campaign(settings, directory).run()

    lines = [json.loads(line) for line in (directory / "trajectory.jsonl").read_text().splitlines()]
    assert summary.proxy_trials == 2
    assert [(r["campaign"], r["trial_id"]) for r in lines] == [("new", "p0000"), ("new", "p0001")]
    events = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines()]
    loaded = [e for e in events if e["event"] == "calibration_loaded"]
    assert len(loaded) == 1 and loaded[0]["trials"] == 6 and loaded[0]["campaigns"] == 1
    skipped = [e for e in events if e["event"] == "calibration_skipped"]
    assert [e["line"] for e in skipped] == [8] and "not a JSON line" in skipped[0]["why"]
    assert "earlier campaigns" in lines[1]["hypothesis"]


def test_run_takes_calibration_sources_and_noise_seeds_from_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "old" / "trajectory.jsonl", high_lr_campaign("old", 2.0))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [
        "run", "--name", "new", "--preset", "tiny", "--iterations", "0", "--promote", "0",
        "--calibrate-from", "old", "--calibrate-from", "missing.jsonl", "--noise-seeds", "1"])

    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "campaigns" / "new" / "settings.json").read_text())
    assert saved["search"]["calibrate_from"] == [str(tmp_path / "old"), str(tmp_path / "missing.jsonl")]
    assert saved["search"]["noise_seeds"] == 1
    events = [json.loads(line) for line in
              (tmp_path / "campaigns" / "new" / "events.jsonl").read_text().splitlines()]
    loaded = next(e for e in events if e["event"] == "calibration_loaded")
    assert (loaded["trials"], loaded["problems"]) == (6, 1)
    assert any(e["event"] == "calibration_skipped" and "no such file" in e["why"] for e in events)
    trajectory = tmp_path / "campaigns" / "new" / "trajectory.jsonl"
    assert not trajectory.exists() or not trajectory.read_text().strip()


def test_an_attributed_campaign_gives_the_knobs_that_mattered(attributed_campaign: Path) -> None:
    calibration = load_calibration([attributed_campaign])
    [attributed] = calibration.attributions
    assert [k for k, _ in attributed.kept] == ["optimizer.lr"]
    assert attributed.dropped == ("optimizer.eps",)
    minimal = [t for t in calibration.trials if t.trial_id.startswith("m")]
    assert len(minimal) == 1 and minimal[0].edit == {"optimizer.lr": 0.003}
    assert minimal[0].relative is not None and minimal[0].relative < 1.0
    summary = calibration_summary(calibration)
    assert summary is not None
    assert "carried the gain: optimizer.lr" in summary
    assert "dropped as noise: optimizer.eps" in summary
