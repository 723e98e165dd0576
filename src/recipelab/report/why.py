"""The report's "Why this recipe", after the verdict and the search's plot: the
recommendation explained in words.

The person booking the cloud run needs to say which changes matter and by how much, not only
that one trial scored best. This section reads the campaign's attribution result
(:mod:`recipelab.trajectory.attribution`): each kept group of the winner's edit in one sentence
with its share of the gain, what was dropped as noise, and the evidence it rests on (the
rung, its steps, the seeds). Without a result it says what is missing and how to get it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recipelab.recipe import flatten
from recipelab.report.document import Block, Bullets, Paragraph, Section, Table
from recipelab.text import compact_edit, edit_text
from recipelab.trajectory.attribution import result_json, result_of
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.noise import baseline_seed_trials
from recipelab.trajectory.record import TrialRecord

TITLE = "Why this recipe"


def baseline_knobs(records: Sequence[TrialRecord]) -> dict[str, Any]:
    """The baseline's knobs (flattened), what every edit is measured from; empty without one."""
    trials = baseline_seed_trials(records)
    return flatten(trials[0].recipe) if trials else {}


def _cost(group: Mapping[str, Any]) -> str:
    if group.get("contribution") is None:
        return "its removal made the run fail"
    if group.get("low") is None:
        return f"{group['contribution']:+.4f} (no interval)"
    return f"{group['contribution']:+.4f} [{group['low']:+.4f}, {group['high']:+.4f}]"


def _share(group: Mapping[str, Any]) -> str:
    share = group.get("share_of_gain")
    if share is None:
        return "—"
    text = f"{share:.0%}"
    return "0%" if text == "-0%" else text  # a share that rounds to nothing has no sign


def kept_sentence(group: Mapping[str, Any], gain: float | None) -> str:
    """One kept group in one sentence, with its share of the gain."""
    knobs = edit_text(group["knobs"], short_names=True)
    if group.get("contribution") is None:
        return (f"Keep the {group['group']} change ({knobs}): without it the run failed to "
                "train, so it cannot be left out.")
    share = group.get("share_of_gain")
    of_gain = (f", {share:.0%} of the winner's gain of {gain:.4f}" if share is not None
               and gain is not None else "")
    return (f"Keep the {group['group']} change ({knobs}): leaving it out costs "
            f"{group['contribution']:+.4f} val_bpb (90% interval [{group['low']:+.4f}, "
            f"{group['high']:+.4f}]){of_gain}." + (f" {group['note']}." if group.get("note") else ""))


def hurts(group: Mapping[str, Any]) -> bool:
    """Whether leaving the group out improved val_bpb beyond the noise: it was dropped because
    it made the recipe worse, not because its effect was too small to tell."""
    return group.get("high") is not None and group["high"] < 0.0


def dropped_sentence(group: Mapping[str, Any]) -> str:
    knobs = edit_text(group["knobs"], short_names=True)
    interval = f"(90% interval [{group['low']:+.4f}, {group['high']:+.4f}])"
    if hurts(group):
        return (f"Drop the {group['group']} change ({knobs}): leaving it out improves val_bpb "
                f"by {-group['contribution']:.4f} {interval}, so it makes the recipe worse.")
    return (f"Drop the {group['group']} change ({knobs}) as noise: leaving it out moves val_bpb "
            f"by {group['contribution']:+.4f} {interval}, which the seeds alone explain.")


def decision(group: Mapping[str, Any]) -> str:
    if group["kept"]:
        return "kept"
    return "dropped: it hurts" if hurts(group) else "dropped as noise"


def minimal_sentence(data: Mapping[str, Any]) -> str:
    """How the minimal edit measured against the winner, as a whole: within noise of it, or
    better beyond the noise (both keep the gain, which is all the recommendation needs)."""
    loss = data.get("minimal_loss_vs_winner")
    if not loss:
        return "Measured again as a whole, this minimal edit keeps the winner's gain within noise."
    measured = (f"{loss['value']:+.4f} val_bpb against the winner, positive being worse (90% "
                f"interval [{loss['low']:+.4f}, {loss['high']:+.4f}])")
    if loss["high"] < 0.0:
        return (f"Measured again as a whole, this minimal edit does better than the winner "
                f"beyond the noise: {measured}.")
    return (f"Measured again as a whole, this minimal edit keeps the winner's gain within "
            f"noise: {measured}.")


def why_this_recipe(ledger: Ledger) -> Section:
    records = ledger.records
    winner = ledger.winner
    if winner is None:
        return Section(TITLE, (Paragraph(f"No recipe to explain yet: {ledger.no_winner_reason}."),))
    base = baseline_knobs(records)
    full = {k: v for k, v in flatten(winner.record.recipe).items()
            if k != "seed" and base and base.get(k) != v}
    if not full:
        return Section(TITLE, (Paragraph(
            f"The baseline leads ({winner.record.trial_id}): no candidate has beaten it yet, so "
            "there is no edit to explain."),))
    result = result_of(records, winner.record.trial_id)
    if result is None:
        return Section(TITLE, (Paragraph(
            f"The winner {winner.record.trial_id} changes {len(full)} knob(s) from the baseline "
            f"({compact_edit(full, base)}). Which of them carry its gain is unknown: no "
            "attribution has run for it. The attribution runs after the winner is named, when "
            "the campaign's window leaves time for it (see the events for "
            "'attribution_skipped'); without it, treat the whole edit "
            "as one bet."),))
    data = result_json(result)
    groups: list[dict[str, Any]] = list(data.get("groups", []))
    kept = [g for g in groups if g["kept"]]
    dropped = [g for g in groups if not g["kept"]]
    gain_data = data.get("gain")
    gain = gain_data["value"] if gain_data else None
    minimal = dict(data.get("minimal_edit", {}))
    blocks: list[Block] = []
    said = "Recommended"
    if ledger.lost_one_size_up is not None:
        blocks.append(Paragraph(f"Recommended: the baseline, which the campaign keeps: "
                                f"{ledger.kept_because}. The ladder's answer, explained below, "
                                "won at the proxy's size and not one size up."))
        said = "The ladder recommended"
    if data.get("recommends_minimal"):
        blocks.append(Paragraph(
            f"{said}: the baseline plus {len(kept)} of the {len(groups)} groups of changes "
            f"in the winner {winner.record.trial_id}'s edit, {len(minimal)} of its {len(full)} "
            f"knob(s): {compact_edit(minimal, base)}. " + minimal_sentence(data)))
    elif dropped:
        blocks.append(Paragraph(
            f"{said}: the winner {winner.record.trial_id}'s whole edit. Each dropped group "
            "looked like noise on its own, but the edit without them did not keep the winner's "
            "gain within noise, so nothing is left out."))
    else:
        blocks.append(Paragraph(
            f"{said}: the winner {winner.record.trial_id}'s whole edit ("
            f"{compact_edit(full, base)}): every group of its changes carries part of the gain."))
    if kept:
        blocks.append(Bullets(tuple(kept_sentence(g, gain) for g in kept)))
    if dropped:
        blocks.append(Bullets(tuple(dropped_sentence(g) for g in dropped)))
    values = data.get("values", {})
    seeds = ", ".join(str(s) for s in data.get("seeds", []))
    blocks.append(Paragraph(
        f"Evidence: every variant was trained for {data.get('steps')} steps (the "
        f"{data.get('rung')} rung) at seeds {seeds}, paired at each seed against the winner and "
        f"the baseline; {data.get('method')}. At those steps the baseline scored "
        f"{values.get('baseline', float('nan')):.4f} val_bpb and the winner "
        f"{values.get('winner', float('nan')):.4f}"
        + (f", a gain of {gain_data['value']:+.4f} (its interval is the winner line's)"
           if gain_data else "")
        + f". Intervals (90%): {data.get('noise')}."))
    blocks.append(Table(("group", "knobs", "leaving it out costs [90%]", "share of gain",
                         "decision"),
                        tuple((g["group"], edit_text(g["knobs"], short_names=True), _cost(g),
                               _share(g), decision(g))
                              for g in groups)))
    return Section(TITLE, tuple(blocks))
