"""The live progress line (:mod:`recipelab.agent.watch.display`): on a terminal it shows the count,
the best val_bpb and what trains; anywhere else it prints nothing, so logs stay clean."""

from __future__ import annotations

import io

from rich.console import Console

from recipelab.agent.watch.display import CampaignProgress


def test_off_a_terminal_it_prints_nothing() -> None:
    out = io.StringIO()
    with CampaignProgress(Console(file=out, force_terminal=False), total=12) as progress:
        progress.update(3, 2.4512, "p0003 (proxy)")
    assert out.getvalue() == ""


def test_on_a_terminal_it_shows_the_count_the_best_and_what_trains() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with CampaignProgress(console, total=12) as progress:
        progress.update(3, 2.4512, "p0003 (proxy)")
    shown = out.getvalue()
    assert "3/12" in shown and "best val_bpb 2.4512" in shown and "now: p0003 (proxy)" in shown
