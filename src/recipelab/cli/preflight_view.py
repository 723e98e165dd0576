"""The preflight on the console (one block per check) and in the campaign's event log."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from recipelab.agent.setup.preflight import CheckResult, Preflight
    from recipelab.agent.setup.settings import CampaignSettings


STATUS_STYLES = {"ok": "green", "warning": "yellow", "error": "bold red"}


def print_preflight(report: Preflight, out: Console) -> None:
    """One block per check: status, name, what was found, and the fix when there is one."""
    counts = {s: sum(r.status == s for r in report.results) for s in STATUS_STYLES}
    out.print(f"preflight: {counts['ok']} ok, {counts['warning']} warning(s), "
              f"{counts['error']} error(s)", markup=False, highlight=False)
    for result in report.results:
        out.print(check_line(result), soft_wrap=True, highlight=False)
        if result.fix:
            out.print(Text(f"{'':20}fix: {result.fix}"), soft_wrap=True, highlight=False)


def check_line(result: CheckResult) -> Text:
    line = Text(f"  {result.status:<8}", style=STATUS_STYLES[result.status])
    line.append(f"{result.name:<10}  {result.what}")
    return line


def log_preflight(settings: CampaignSettings, directory: Path, report: Preflight) -> None:
    """Record the preflight in ``events.jsonl`` (the console already showed its table)."""
    from recipelab.eventlog import campaign_logger

    log, sink = campaign_logger(settings.name, directory, Console(file=io.StringIO()))
    try:
        for result in report.results:
            method = {"ok": log.info, "warning": log.warning, "error": log.error}[result.status]
            method("preflight", check=result.name, status=result.status, what=result.what,
                   fix=result.fix or None)
    finally:
        sink.close()
