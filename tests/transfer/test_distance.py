"""The export's distance: how far it extrapolates from the proxy, set beside what
``bench/transfer.py`` verified, with a warning beyond it and no claim without a shipped
verification."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.transfer import distance as distance_module
from recipelab.transfer.distance import Distance, Verified, distance_lines, load_verified

BENCH = Distance(params=63.0, tokens=5.0, context=1.0)  # what a bench run of 63x reaches


def verified(reach: Distance = BENCH) -> Verified:
    return Verified(distance=reach, campaigns=3, seeds=2, held=2,
                    prediction_errors=[0.036, 0.0, 0.013],
                    baseline_prediction_errors=[0.04, 0.02, 0.01], rate_factors=[0.54, 0.79, 0.7],
                    code_version="abc1234", date="2026-11-29")


def test_a_distance_is_the_target_over_the_proxy_on_each_axis() -> None:
    found = Distance.between((100_000, 102_400, 64), (6_300_000, 512_000, 256))
    assert (found.params, found.tokens, found.context) == (63.0, 5.0, 4.0)
    assert found.text() == ("63× the proxy's non-embedding parameters, 5× the tokens of its "
                            "longest run and 4× its context")
    assert found.beyond(BENCH) == ["context"]
    assert Distance(69.0, 5.4, 1.0).beyond(BENCH) == [], "a tenth of slack"


def test_without_a_shipped_verification_the_export_claims_nothing_and_warns(
        tmp_path: Path) -> None:
    assert load_verified(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert load_verified(tmp_path / "bad.json") is None
    lines = distance_lines(BENCH, None, (2.0, 2.4))
    assert lines[0].startswith("Distance: this export extrapolates 63×")
    assert "no bench/transfer.py result ships with this install" in lines[1]
    assert lines[2].startswith("Warning: the predicted band 2.000–2.400 is the fit's alone")


def test_within_the_verified_distance_there_is_no_warning_and_beyond_it_one_naming_the_axes(
        tmp_path: Path) -> None:
    path = tmp_path / "verified.json"
    path.write_text(json.dumps(verified().to_json()))
    shipped = load_verified(path)
    assert shipped == verified()
    within = distance_lines(BENCH, shipped, (2.0, 2.4))
    assert len(within) == 2 and within[1].startswith("Verified: bench/transfer.py verified 63×")
    assert "in 2 of 3;" in within[1] and "3.6%/0.0%/1.3%" in within[1]
    kept = dataclasses.replace(verified(), kept=1)  # one night kept the baseline: no pick to beat it
    assert "in 2 of 2 (1 kept the baseline);" in distance_lines(BENCH, kept, (2.0, 2.4))[1]
    before_kept = {k: v for k, v in verified().to_json().items() if k != "kept"}
    assert Verified.from_json(before_kept) == verified(), "a file from before 'kept' still reads"
    missed = dataclasses.replace(verified(), baseline_prediction_errors=[0.02, 0.599, 0.03])
    warned = distance_lines(BENCH, missed, (2.0, 2.4))
    assert warned[-1].startswith("Warning: where it was verified the prediction missed by up "
                                 "to 60%, beyond the 5% a cloud run is held to"), (
        "inside the verified distance, a verification that missed its bar still warns")
    far = distance_lines(Distance(13_000.0, 241_000.0, 8.0), shipped, (2.0, 2.4))
    assert far[-1] == ("Warning: beyond the verified distance in parameters, tokens, context: "
                       "the predicted band 2.000–2.400 is the fit's, unmeasured this far.")


def test_a_campaign_on_other_text_than_the_bench_is_warned_that_nothing_verified_it() -> None:
    """bench/transfer.py on the standard library's prose, where its rules were written on
    python-source, found the prediction 17-24% off: a verification holds for its corpus."""
    on_source = dataclasses.replace(verified(), corpus="python-source")
    assert "verified 63× the proxy's non-embedding parameters, 5× the tokens of its longest run " \
           "and 1× its context on python-source (" in on_source.text()
    assert distance_lines(BENCH, on_source, (2.0, 2.4), "python-source") == distance_lines(
        BENCH, on_source, (2.0, 2.4))
    other = distance_lines(BENCH, on_source, (2.0, 2.4), "/data/mine.txt")
    assert other[-1] == ("Warning: verified on python-source, and this campaign trained on "
                         "/data/mine.txt: nothing measured says the prediction holds on other "
                         "text, so the band 2.000–2.400 is the fit's alone.")
    assert not any(line.startswith("Warning") for line in distance_lines(
        BENCH, verified(), (2.0, 2.4), "/data/mine.txt")), "a file from before names no corpus"
    assert Verified.from_json(on_source.to_json()) == on_source


def shipped_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reach: Distance,
               corpus: str = "") -> None:
    path = tmp_path / "verified_transfer.json"
    path.write_text(json.dumps(dataclasses.replace(verified(reach), corpus=corpus).to_json()))
    monkeypatch.setattr(distance_module, "VERIFIED_PATH", path)


def export(campaign: Path, out: Path, *target: str) -> str:
    result = CliRunner().invoke(app, ["export", str(campaign), "--out", str(out), *target])
    assert result.exit_code == 0, result.output
    return result.output


def test_export_prints_its_distance_and_warns_only_beyond_the_verified_one(
        attributed_campaign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exported to its own target at the distance the bench verified, no warning; to a 1B
    model, thousands of times further, a warning with the band."""
    near = export(attributed_campaign, tmp_path / "near")
    manifest = json.loads((tmp_path / "near" / "manifest.json").read_text())
    reach = Distance(**manifest["distance"])
    corpus = json.loads((attributed_campaign / "settings.json").read_text())["corpus"]["source"]
    shipped_at(monkeypatch, tmp_path, reach, corpus)
    near = export(attributed_campaign, tmp_path / "near")
    assert "Distance: this export extrapolates" in near and "Verified: bench/transfer.py" in near
    assert "Warning:" not in near
    shipped_at(monkeypatch, tmp_path, reach, "another-corpus")
    elsewhere = export(attributed_campaign, tmp_path / "elsewhere")
    assert f"Warning: verified on another-corpus, and this campaign trained on {corpus}" in (
        elsewhere)
    far = export(attributed_campaign, tmp_path / "far", "--target", "llama3.2-1b")
    assert "Distance: this export extrapolates" in far
    assert "Warning: beyond the verified distance in parameters, tokens, context" in far
    assert "Warning: beyond" in (tmp_path / "far" / "transfer.md").read_text()
