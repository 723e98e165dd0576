"""A person's own edits (``--edit``): tried in order after the noise floor, before the
proposer's.

A person often has a hypothesis before the night starts ("half the learning rate", "WSD
instead of cosine"). Each edit becomes one proxy trial of the baseline with that edit,
judged by the guardrails like any proposal, so a mistaken edit is rejected with its reason
rather than trained. The sampler then sees those trials as it sees its own.

Which edits are still to try is a pure function of the records (the trials whose proposer is
:data:`PERSON_PROPOSER`, re-runs not counted), so a resumed campaign neither repeats nor
skips one, and edits added on resume are tried next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipelab.proposer import Proposal
from recipelab.recipe import PERSON_PROPOSER, Recipe
from recipelab.trajectory.record import TrialRecord


def person_proposals(baseline: Recipe, baseline_id: str | None, records: Sequence[TrialRecord],
                     edits: Sequence[dict[str, Any]], n: int = 1) -> list[Proposal]:
    """Up to ``n`` of ``edits`` not yet tried (started, finished or rejected), in order."""
    tried = sum(1 for r in records
                if r.kind == "proxy" and r.proposer == PERSON_PROPOSER and r.retry_of is None)
    return [Proposal.from_edit(baseline, baseline_id, dict(edit),
                               f"your edit {index + 1}/{len(edits)} (--edit)", PERSON_PROPOSER)
            for index, edit in enumerate(edits[tried:tried + n], start=tried)]
