"""The preflight as a person and a log read it (:mod:`recipelab.cli.preflight_view`): one
block per check with its fix on the console, one ``preflight`` event per check in
``events.jsonl``."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from recipelab.agent.setup.preflight import CheckResult, Preflight
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.cli.preflight_view import log_preflight, print_preflight

REPORT = Preflight([
    CheckResult("device", "ok", "cpu: AMD EPYC, 23.54 GiB"),
    CheckResult("corpus", "error", "python-docs (466,273 bytes): the top rung reads it 1.2 times",
                fix="--corpus python-source, or --repeat-text"),
])


def test_the_console_shows_the_counts_then_one_block_per_check_with_its_fix() -> None:
    out = io.StringIO()
    print_preflight(REPORT, Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    assert lines[0] == "preflight: 1 ok, 0 warning(s), 1 error(s)"
    assert lines[1].split() == ["ok", "device", "cpu:", "AMD", "EPYC,", "23.54", "GiB"]
    assert lines[2].startswith("  error   corpus")
    assert lines[3].strip() == "fix: --corpus python-source, or --repeat-text"


def test_the_log_holds_one_event_per_check(tmp_path: Path) -> None:
    log_preflight(CampaignSettings(name="night"), tmp_path, REPORT)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["check"], e["status"], e["fix"]) for e in events] == [
        ("preflight", "device", "ok", None),
        ("preflight", "corpus", "error", "--corpus python-source, or --repeat-text")]
