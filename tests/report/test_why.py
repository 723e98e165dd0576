"""The report's "Why this recipe" (after the verdict and the search's plot), and the compact
edit column, read from a campaign whose winner's edit was attributed (the
``attributed_campaign`` fixture)."""

from __future__ import annotations

from pathlib import Path

from recipelab.report.context import ReportContext
from recipelab.report.document import Bullets, Paragraph, Table
from recipelab.report.sections import build_document, importance, top_trials
from recipelab.report.why import decision, dropped_sentence, minimal_sentence, why_this_recipe
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.attribution import RESULT_KIND
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

from ..trajectory.test_ladder import one_size_up


def records_of(directory: Path) -> list[TrialRecord]:
    with TrajectoryStore(directory, "attributed", readonly=True) as store:
        return store.records()


def text_of(blocks: tuple[object, ...]) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, Paragraph):
            parts.append(block.text)
        elif isinstance(block, Bullets):
            parts += block.items
        elif isinstance(block, Table):
            parts += [" | ".join(row) for row in block.rows]
    return "\n".join(parts)


def test_the_report_opens_with_the_verdict_and_the_search_then_why_this_recipe(
        attributed_campaign: Path) -> None:
    records = records_of(attributed_campaign)
    document = build_document(Ledger(records), ReportContext("attributed", get_target("toy"), "tiny"))
    assert [s.title for s in document.sections[:3]] == [
        "Summary", "val_bpb by iteration", "Why this recipe"]
    summary = text_of(document.sections[0].blocks).splitlines()
    assert summary[0].startswith(("winner: ", "no winner")) and summary[1].startswith(
        "next: 'recipelab export attributed --out cloud/ --target toy'")
    first = document.sections[2]
    text = text_of(first.blocks)
    assert "Recommended: the baseline plus 1 of the 2 groups" in text
    kept = next(b for b in first.blocks if isinstance(b, Bullets)).items
    assert len(kept) == 1 and kept[0].startswith("Keep the learning rate change (lr=0.003)")
    assert "of the winner's gain" in kept[0]
    assert "Drop the optimizer betas change (eps=1e-10) as noise" in text
    assert "trained for 30 steps (the stress rung) at seeds 1000, 1001, 1002" in text
    # one gain interval in the report: the winner line's, from the top rung's own pairs
    assert "(its interval is the winner line's)" in text
    assert "learning rate | lr=0.003 |" in text and "| kept" in text
    assert "dropped as noise" in text


def test_without_an_attribution_it_says_what_is_missing(attributed_campaign: Path) -> None:
    records = [r for r in records_of(attributed_campaign) if r.kind != RESULT_KIND]
    text = text_of(why_this_recipe(Ledger(records)).blocks)
    assert "changes 2 knob(s) from the baseline" in text and "is unknown: no attribution has run" in text
    assert "attribution_skipped" in text


def test_a_winner_overruled_one_size_up_is_explained_as_the_ladders_answer_not_the_pick(
        attributed_campaign: Path) -> None:
    records = records_of(attributed_campaign)
    winner = Ledger(records).winner
    assert winner is not None
    ledger = Ledger([*records, *one_size_up(3.9, 3.3, parent=winner.record.trial_id)])
    text = text_of(why_this_recipe(ledger).blocks)
    assert text.startswith("Recommended: the baseline, which the campaign keeps: one size up the "
                           f"baseline beat the winner {winner.record.trial_id} by 0.6000")
    assert "\nThe ladder recommended: the baseline plus 1 of the 2 groups" in text


def test_while_the_baseline_leads_there_is_no_edit_to_explain() -> None:
    baseline = proxy_recipe("tiny").model_dump(mode="json")
    records = [TrialRecord(campaign="c", trial_id="p0000", status="complete", proposer="baseline",
                           recipe=baseline, val_bpb=4.25),
               TrialRecord(campaign="c", trial_id="p0001", status="running",
                           proposer="classical-tpe", recipe=baseline)]

    text = text_of(why_this_recipe(Ledger(records)).blocks)

    assert text == ("The baseline leads (p0000): no candidate has beaten it yet, so there is no "
                    "edit to explain.")


def test_edit_columns_are_compact_and_the_seed_is_no_knob(attributed_campaign: Path) -> None:
    records = records_of(attributed_campaign)
    table = next(b for b in top_trials(Ledger(records)).blocks
                 if isinstance(b, Table))
    edits = {row[1]: row[5] for row in table.rows}
    assert edits["p0003"] == "lr=0.003, eps=1e-10"  # the rate first, whatever moved most
    table = next(b for b in importance(records).blocks if isinstance(b, Table))
    assert {row[0] for row in table.rows} == {"optimizer.lr", "optimizer.eps"}  # not the seed


def group(contribution: float, low: float, high: float, kept: bool) -> dict[str, object]:
    return {"group": "regularization", "knobs": {"optimizer.weight_decay": 0.2},
            "contribution": contribution, "low": low, "high": high, "kept": kept}


def test_a_group_dropped_because_it_hurts_is_not_called_noise() -> None:
    harmful = group(-0.08, -0.12, -0.03, kept=False)
    assert dropped_sentence(harmful).startswith(
        "Drop the regularization change (weight_decay=0.2): leaving it out improves val_bpb by "
        "0.0800")
    assert "noise" not in dropped_sentence(harmful) and decision(harmful) == "dropped: it hurts"
    neutral = group(-0.01, -0.05, 0.03, kept=False)
    assert "as noise" in dropped_sentence(neutral) and "seeds alone" in dropped_sentence(neutral)
    assert decision(neutral) == "dropped as noise"
    assert decision(group(0.1, 0.05, 0.15, kept=True)) == "kept"


def test_a_minimal_edit_better_than_the_winner_says_so() -> None:
    better = {"minimal_loss_vs_winner": {"value": -0.06, "low": -0.09, "high": -0.02}}
    assert "does better than the winner beyond the noise: -0.0600" in minimal_sentence(better)
    level = {"minimal_loss_vs_winner": {"value": 0.01, "low": -0.02, "high": 0.04}}
    assert "keeps the winner's gain within noise: +0.0100" in minimal_sentence(level)
    assert "within noise" in minimal_sentence({"minimal_loss_vs_winner": None})
