"""The campaign report (Markdown + self-contained HTML with plots) and the cost arithmetic.

Importing this package is cheap: matplotlib is loaded only when a report is drawn.
"""

from __future__ import annotations

from pathlib import Path

from recipelab.report.context import CloudRates, ReportContext
from recipelab.trajectory.ledger import Ledger

REPORT_DIR = "report"


def write_report(directory: Path, ledger: Ledger, context: ReportContext) -> tuple[Path, Path]:
    """Write ``report/report.md`` (PNGs beside it) and ``report/report.html`` in ``directory``,
    from the campaign's ``ledger`` (its ``--promote``, its rungs)."""
    from recipelab.report.render import write_document
    from recipelab.report.sections import build_document

    return write_document(build_document(ledger, context), directory / REPORT_DIR)


__all__ = ["REPORT_DIR", "CloudRates", "ReportContext", "write_report"]
