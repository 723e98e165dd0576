"""The morning report on a real finished tiny campaign, and on unfinished ones."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.recipe import BASELINE_PROPOSER
from recipelab.report import ReportContext, write_report
from recipelab.targets import get_target
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger, is_extra_seed
from recipelab.trajectory.record import TrialRecord

SECTIONS = ("Why this recipe", "Summary", "val_bpb by iteration", "Top 10 proxy trials",
            "Stress runs", "Knob importance", "Rejections by reason", "Failures by reason",
            "Throughput and peak memory", "Energy",
            "Proxy-to-stress rank agreement", "Recommendation for the cloud run")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The first test here sets up the session's campaign: about a dozen real trial subprocesses on
# a small shared machine, so it gets twice the suite's per-test bound.
pytestmark = pytest.mark.timeout(600)


def records_of(directory: Path) -> list[TrialRecord]:
    with TrajectoryStore(directory, directory.name, readonly=True) as store:
        return store.records()


def context() -> ReportContext:
    return ReportContext("nightly", get_target("toy"), "tiny")


class Resources(HTMLParser):
    """Every URL an HTML page would load or link to."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data", "poster", "action") and value is not None:
                self.urls.append((tag, name, value))


def test_the_campaign_writes_its_report_when_it_finishes(finished_campaign: Path) -> None:
    report = finished_campaign / "report"
    assert (report / "report.md").exists() and (report / "report.html").exists()
    assert not any('"report_failed"' in line
                   for line in (finished_campaign / "events.jsonl").read_text().splitlines())


def test_the_report_of_a_finished_campaign_has_every_section(finished_campaign: Path) -> None:
    markdown, page = write_report(finished_campaign, Ledger(records_of(finished_campaign)), context())
    text, html = markdown.read_text(), page.read_text()
    for title in SECTIONS:
        assert f"## {title}\n" in text
        assert f"<h2>{title}</h2>" in html
    assert "within noise" in text  # the noise floor marks gains the seeds could explain
    assert "| s0000 | p0" in text and "stable" in text
    # two finalists, one mid-ranked trial and the baseline (the control) were stress-run
    assert "over 4 trials" in text
    assert "Chinchilla-optimal budget: 20 tokens per parameter = 117,396,480 tokens" in text
    assert "GPU-hours" in text and "L(t) = " in text
    assert "shape.activation is 'gelu'" in text  # the rejection, by its reason


def test_every_plot_is_a_real_png_referenced_by_the_markdown(finished_campaign: Path) -> None:
    markdown, _ = write_report(finished_campaign, Ledger(records_of(finished_campaign)), context())
    pngs = sorted(markdown.parent.glob("*.png"))
    names = {p.name for p in pngs}
    assert {"val_bpb.png", "stress_curves.png", "knob_importance.png", "rejections.png",
            "throughput_memory.png", "rank_agreement.png"} <= names
    text = markdown.read_text()
    for png in pngs:
        assert f"]({png.name})" in text
        assert png.read_bytes()[:8] == PNG_MAGIC
        pixels = imread(png)
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
        assert len(colours) > 20  # axes, text and data, not a blank canvas


def test_the_html_opens_with_no_external_resources(finished_campaign: Path) -> None:
    _, page = write_report(finished_campaign, Ledger(records_of(finished_campaign)), context())
    html = page.read_text()
    parser = Resources()
    parser.feed(html)
    images = [url for tag, _, url in parser.urls if tag == "img"]
    assert len(images) >= 6 and all(url.startswith("data:image/png;base64,") for url in images)
    assert all(url.startswith(("data:", "#")) for _, _, url in parser.urls)
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "http://" not in html and "https://" not in html and "url(" not in html


def test_an_unfinished_campaign_gets_a_report_that_says_what_is_missing(
        finished_campaign: Path, tmp_path: Path) -> None:
    proxies_only = [r for r in records_of(finished_campaign) if r.kind == "proxy"][:3]
    markdown, _ = write_report(tmp_path, Ledger(proxies_only), context())
    text = markdown.read_text()
    for title in SECTIONS:
        assert f"## {title}\n" in text
    assert "No stress runs yet" in text
    assert "Only 0 stress-run trial(s) with a result: rank agreement needs at least 3" in text
    assert "Not enough evidence yet" in text  # importance with three trials
    assert "Energy: not measured" in text
    assert "no stress run has confirmed it as stable yet" in text
    assert not (tmp_path / "report" / "stress_curves.png").exists()


def test_a_campaign_with_no_trials_yet_still_gets_a_report(tmp_path: Path) -> None:
    markdown, page = write_report(tmp_path, Ledger([]), context())
    text = markdown.read_text()
    assert "Nothing to recommend: no proxy trial has completed yet" in text
    assert page.exists() and not list(markdown.parent.glob("*.png"))


def test_recipelab_report_writes_the_report_from_the_command_line(finished_campaign: Path) -> None:
    report = finished_campaign / "report"
    for old in report.iterdir():
        old.unlink()
    done = subprocess.run([sys.executable, "-m", "recipelab", "report", str(finished_campaign),
                           "--usd-per-gpu-hour", "4", "--mfu", "0.5"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "report.html" in done.stdout
    text = (report / "report.md").read_text()
    assert "50% MFU" in text and "$4.00 per GPU-hour" in text


@pytest.mark.parametrize(("flag", "value", "named"), [("--mfu", "1.5", "mfu"), ("--gpus", "0", "gpus")])
def test_recipelab_report_refuses_impossible_rates_and_names_them(
        finished_campaign: Path, flag: str, value: str, named: str) -> None:
    done = CliRunner().invoke(app, ["report", str(finished_campaign), flag, value])
    assert done.exit_code == 2 and named in done.output and "invalid cloud rates" in done.output


def test_the_fidelity_option_stress_runs_a_mid_ranked_trial(finished_campaign: Path) -> None:
    records = records_of(finished_campaign)
    ranked = sorted((r for r in records if r.kind == "proxy" and r.status == "complete"
                     and not is_extra_seed(r) and r.val_bpb is not None
                     and r.proposer != BASELINE_PROPOSER),
                    key=lambda r: (r.val_bpb, r.trial_id))
    baseline = next(r.trial_id for r in records if r.proposer == BASELINE_PROPOSER)
    stressed = {r.parent for r in records if r.kind == "stress"} - {baseline}  # the control
    assert len(stressed) == 3
    assert {ranked[0].trial_id, ranked[1].trial_id} < stressed
    (extra,) = stressed - {ranked[0].trial_id, ranked[1].trial_id}
    assert extra in {r.trial_id for r in ranked[2:]}
    assert json.loads((finished_campaign / "settings.json").read_text())["ladder"]["fidelity"] == 1

