"""Attribution of the winner's edit: which groups of knobs carry its gain, and the minimal edit.

A winner usually changes many knobs at once, and a cloud run is booked on a recipe someone can
defend. So after the winner is named, its edit (relative to the baseline) is cut into groups
of knobs that act together (:data:`GROUPS`), and the recipe is measured with each group taken
out again, paired against the winner and the baseline at the same seeds:

- **leave one group out**: for every group ``g``, the winner without ``g``. Its *cost* is
  ``val_bpb(winner without g, s) - val_bpb(winner, s)`` averaged over the seeds ``s``: how much
  worse the recipe gets without the group, i.e. what the group contributes.
- The cost's 90% interval is paired noise (:mod:`recipelab.trajectory.noise`): the
  deviations of each variant's paired differences from their own mean, pooled and
  bootstrapped (:func:`~recipelab.trajectory.noise.pooled_deviations`), here with the winner as
  the reference and at the fidelity the variants were measured at. They are pooled **by
  distance** from the winner: a comparison's interval comes from the variants at most as many
  groups away from the winner as the one compared, farther ones added only while the pool has
  fewer than :data:`MIN_POOLED_DEGREES` degrees of freedom. A recipe near the winner moves
  with it from seed to seed, the baseline often does not (a baseline whose val_bpb spreads
  by 0.7 over three seeds would otherwise widen every group's interval and call a steady
  cost noise). With a single seed there is nothing to pool, and the campaign's own (proxy)
  noise floor is used instead.
- A group whose cost interval reaches 0 (its removal costs nothing outside the noise) is
  **dropped**; the others are **kept**.
- With many groups (more than :data:`LEAVE_ONE_OUT_MAX_GROUPS`), dropping every such group at
  once assumes they do not interact, which is less likely with many; so a **greedy backward
  elimination** follows: the droppable groups are removed one at a time, cheapest first, and
  each removal stands only if the recipe without all groups removed so far is still within
  noise of the winner.

The **minimal winning edit** is the baseline plus the kept groups. It is measured once more as
a whole (in the greedy elimination its last accepted step is that measurement) to show that it
keeps the winner's gain within noise; when it does not, the full edit stays the recommendation.

Everything here is a pure function of measurements keyed by the groups a variant keeps, so
the campaign can resume after a crash and decide exactly as it would have (the agent's
:mod:`recipelab.agent.phases.attribution_phase` phase runs what :func:`attribute` asks for).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from recipelab.trajectory.noise import Gain, NoiseFloor, pooled_deviations
from recipelab.trajectory.record import TrialRecord

ATTRIBUTION_KIND = "attribution"
"""Trial kind of the runs that measure the groups (each a training run of one variant)."""
RESULT_KIND = "attribution-result"
"""Record kind of an attribution's result: the minimal edit and every group's contribution, so
that a later campaign's calibration reads which knobs mattered."""
ATTRIBUTION_PROPOSER = "attribution"

MIN_POOLED_DEGREES = 6
"""Fewest degrees of freedom (a variant measured at n seeds gives n - 1) an interval's pooled
deviations come from; below it, variants farther from the winner are pooled too."""

LEAVE_ONE_OUT_MAX_GROUPS = 4
"""Up to this many groups, leave-one-group-out decides alone; past it, the greedy backward
elimination checks the groups' removals together."""

NOT_ATTRIBUTED = frozenset({"seed", "steps", "eval_bytes"})
"""Knobs never attributed: the seed is noise, not a choice; the steps are set by the rung the
variants are measured at; the evaluation slice does not change training."""

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("learning rate", ("optimizer.lr", "optimizer.lr_embed_mult", "optimizer.lr_output_mult",
                       "optimizer.lr_hidden_mult")),
    ("optimizer betas", ("optimizer.beta1", "optimizer.beta2", "optimizer.eps")),
    ("weight decay", ("optimizer.weight_decay", "optimizer.decay_embeddings",
                      "optimizer.decay_norms")),
    ("schedule", ("schedule.",)),
    ("stability", ("stability.", "optimizer.grad_clip")),
    ("batch geometry", ("batch_size", "seq_len", "grad_accum")),
    ("precision", ("precision",)),
    ("shape", ("shape.", "tokenizer")),
)
"""Knobs that act together, by exact name or by a dotted prefix ending in ``.``.

``optimizer.eps`` is with the betas: Adam divides by ``sqrt(v) + eps``, where ``v`` is the
second-moment average ``beta2`` sets, so eps and beta2 jointly decide the size of an update
where gradients are small; taking one away while keeping the other measures neither.
Gradient clipping is a stability knob (it bounds a spike, it does not set the step size), the
tokenizer goes with the shape (it sets the vocabulary). A knob no group names is its own group
(``other``)."""

OTHER_GROUP = "other"

GroupKey = tuple[str, ...]
"""A variant: the names of the groups of the winner's edit it keeps, sorted. ``()`` is the
baseline; every group is the winner."""

Measured = Mapping[GroupKey, Mapping[int, float | None]]
"""val_bpb of each variant at each seed; None for a run that failed (diverged, crashed)."""

Method = Literal["leave-one-group-out", "greedy backward elimination"]


def group_of(knob: str) -> str | None:
    """The group ``knob`` belongs to, or None for a knob never attributed (the seed)."""
    if knob in NOT_ATTRIBUTED:
        return None
    for name, members in GROUPS:
        if any(knob == m or (m.endswith(".") and knob.startswith(m)) for m in members):
            return name
    return OTHER_GROUP


def group_edit(edit: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``edit`` cut into its groups, in :data:`GROUPS` order (``other`` last); knobs never
    attributed are left out."""
    found: dict[str, dict[str, Any]] = {}
    for knob, value in edit.items():
        group = group_of(knob)
        if group is not None:
            found.setdefault(group, {})[knob] = value
    order = [name for name, _ in GROUPS] + [OTHER_GROUP]
    return {name: found[name] for name in order if name in found}


def variant_key(edit: Mapping[str, Any]) -> GroupKey:
    """The variant an edit (relative to the baseline) is: the groups it holds."""
    return tuple(sorted(group_edit(edit)))


def variant_edit(groups: Mapping[str, Mapping[str, Any]], keep: Sequence[str]) -> dict[str, Any]:
    """The edit of the variant keeping the groups ``keep``."""
    return {knob: value for name in groups if name in keep for knob, value in groups[name].items()}


def _without(key: GroupKey, group: str) -> GroupKey:
    return tuple(g for g in key if g != group)


@dataclass(frozen=True)
class Contribution:
    """One group of the winner's edit and what removing it cost (positive: it carries gain).
    ``cost`` is None when the recipe without it failed to train (then the group is kept)."""

    group: str
    knobs: dict[str, Any]
    cost: Gain | None
    kept: bool
    note: str = ""

    def share(self, gain: float) -> float | None:
        """The group's share of the winner's gain (its cost over the gain), when both are
        measured and the gain is positive."""
        if self.cost is None or gain <= 0:
            return None
        return self.cost.value / gain

    def to_json(self, gain: float) -> dict[str, Any]:
        cost = self.cost
        return {"group": self.group, "knobs": self.knobs, "kept": self.kept,
                "contribution": None if cost is None else cost.value,
                "low": None if cost is None else cost.low,
                "high": None if cost is None else cost.high,
                "share_of_gain": self.share(gain), "note": self.note}


@dataclass(frozen=True)
class Attribution:
    """The decision: every group's contribution, and the minimal winning edit.

    ``gain`` is the winner's gain over the baseline at the attribution's fidelity;
    ``minimal_loss`` is how much worse than the winner the minimal edit measured (None when it
    is the winner's edit); ``keeps_gain`` whether that is within noise.
    """

    method: Method
    seeds: tuple[int, ...]
    gain: Gain | None
    contributions: tuple[Contribution, ...]
    minimal_edit: dict[str, Any]
    minimal_loss: Gain | None
    keeps_gain: bool
    noise: str
    values: dict[str, float] = field(default_factory=dict)  # mean val_bpb of baseline, winner, minimal

    @property
    def kept(self) -> list[Contribution]:
        return [c for c in self.contributions if c.kept]

    @property
    def dropped(self) -> list[Contribution]:
        return [c for c in self.contributions if not c.kept]

    @property
    def recommends_minimal(self) -> bool:
        """Whether the minimal edit is the recommendation: it drops something and keeps the
        winner's gain within noise."""
        return bool(self.dropped) and self.keeps_gain

    def to_json(self) -> dict[str, Any]:
        gain = self.gain.value if self.gain is not None else 0.0
        loss = self.minimal_loss
        return {"method": self.method, "seeds": list(self.seeds), "noise": self.noise,
                "gain": None if self.gain is None else {
                    "value": self.gain.value, "low": self.gain.low, "high": self.gain.high},
                "groups": [c.to_json(gain) for c in self.contributions],
                "minimal_edit": self.minimal_edit,
                "minimal_loss_vs_winner": None if loss is None else {
                    "value": loss.value, "low": loss.low, "high": loss.high},
                "keeps_gain": self.keeps_gain, "recommends_minimal": self.recommends_minimal,
                "values": self.values}


@dataclass(frozen=True)
class Pending:
    """The runs the decision still needs: (variant, seed) pairs."""

    runs: tuple[tuple[GroupKey, int], ...]


@dataclass(frozen=True)
class Abandoned:
    """No decision can be made, and why."""

    reason: str


class _Intervals:
    """Paired intervals of differences against the winner, from deviations pooled by distance
    (see the module), or from the fallback floor when a single seed gives nothing to pool."""

    def __init__(self, measured: Measured, winner: GroupKey, seeds: Sequence[int],
                 fallback: NoiseFloor | None) -> None:
        self.measured, self.winner, self.seeds = measured, winner, seeds
        self.fallback = fallback
        self.paired = len(seeds) >= 2
        if self.paired:
            self.source = ("paired: bootstrapped from the paired differences against the winner "
                           "at the same seeds of the variants at most as far from the winner as "
                           f"the one compared (at least {MIN_POOLED_DEGREES} degrees of freedom)")
        elif fallback is not None:
            self.source = ("the campaign's proxy noise floor (" + fallback.kind + "; one seed "
                           "at this fidelity gives nothing to pool)")
        else:
            self.source = ("none: one seed and no noise floor, so no group can be called noise "
                           "and none is dropped")

    def distance(self, key: GroupKey) -> int:
        """How many of the winner's groups ``key`` leaves out."""
        return len(self.winner) - len(key)

    def floor(self, key: GroupKey, known: Sequence[GroupKey]) -> NoiseFloor | None:
        """The noise of ``key``'s comparison: deviations of the ``known`` variants nearest the
        winner, out to ``key``'s distance and beyond it only while too few."""
        if not self.paired:
            return self.fallback
        by_distance: dict[int, dict[str, dict[int, float]]] = {}
        for other in dict.fromkeys(known):
            diffs = _diffs(self.measured, other, self.winner, self.seeds)
            if other != self.winner and diffs is not None:
                by_distance.setdefault(self.distance(other), {})[",".join(other)] = dict(
                    zip(self.seeds, diffs, strict=True))
        pool: dict[str, dict[int, float]] = {}
        for distance in sorted(by_distance):
            degrees = sum(len(d) - 1 for d in pool.values())
            if distance > self.distance(key) and degrees >= MIN_POOLED_DEGREES:
                break
            pool.update(by_distance[distance])
        deviations, pairs, _ = pooled_deviations(pool)
        if len(deviations) < 2:
            return self.fallback
        return NoiseFloor(mean=0.0, spread=0.0, seeds=(), kind="paired",
                          deviations=tuple(deviations), pairs=pairs)

    def of(self, key: GroupKey, known: Sequence[GroupKey]) -> Gain | None:
        """``key - winner``'s mean over the seeds with its 90% interval; None when a run of it
        failed or there is no noise measure."""
        differences = _diffs(self.measured, key, self.winner, self.seeds)
        floor = self.floor(key, known)
        if differences is None or floor is None:
            return None
        value = statistics.fmean(differences)
        low, high = floor.noise_quantiles(len(differences))
        return Gain(value=value, low=value - high, high=value - low, seeds=len(differences))


def _missing(measured: Measured, keys: Sequence[GroupKey],
             seeds: Sequence[int]) -> tuple[tuple[GroupKey, int], ...]:
    wanted: list[tuple[GroupKey, int]] = []
    for key in keys:
        for seed in seeds:
            if seed not in measured.get(key, {}) and (key, seed) not in wanted:
                wanted.append((key, seed))
    return tuple(wanted)


def _diffs(measured: Measured, key: GroupKey, reference: GroupKey,
           seeds: Sequence[int]) -> list[float] | None:
    """``key - reference`` at each seed; None when either failed at a seed."""
    out = []
    for seed in seeds:
        a, b = measured[key][seed], measured[reference][seed]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            return None
        out.append(a - b)
    return out


def attribute(groups: Mapping[str, Mapping[str, Any]], measured: Measured, seeds: Sequence[int],
              fallback: NoiseFloor | None = None) -> Attribution | Pending | Abandoned:
    """Decide which groups of the winner's edit carry its gain, or say which runs are needed
    first (see the module). ``groups`` is :func:`group_edit` of the winner's edit;
    ``measured`` every variant's val_bpb by seed; ``fallback`` the noise floor used when a
    single seed leaves nothing to pool."""
    names = tuple(groups)
    if not names:
        return Abandoned("the winner's edit changes no knob that can be attributed")
    if not seeds:
        return Abandoned("no seed to measure the variants at")
    winner, baseline = tuple(sorted(names)), ()
    round_keys = [baseline, winner, *(_without(winner, g) for g in names)]
    missing = _missing(measured, round_keys, seeds)
    if missing:
        return Pending(missing)
    for key, what in ((winner, "the winner"), (baseline, "the baseline")):
        if any(measured[key][s] is None for s in seeds):
            return Abandoned(f"{what} failed to train at this fidelity, so there is no gain to "
                             "attribute")
    intervals = _Intervals(measured, winner, seeds, fallback)
    gain = intervals.of(baseline, round_keys)
    costs = {g: intervals.of(_without(winner, g), round_keys) for g in names}
    cheap = {g: c.value for g in names if (c := costs[g]) is not None and c.low <= 0.0}
    droppable = sorted(cheap, key=lambda g: (cheap[g], g))
    greedy = len(names) > LEAVE_ONE_OUT_MAX_GROUPS
    notes: dict[str, str] = {g: "its removal made the run fail" for g in names if costs[g] is None}
    known = list(round_keys)
    if not greedy:
        current = tuple(g for g in winner if g not in droppable)
        if current != winner:
            missing = _missing(measured, [current], seeds)
            if missing:
                return Pending(missing)
            known.append(current)
        dropped = list(droppable)
    else:
        current, dropped = winner, []
        for g in droppable:
            candidate = _without(current, g)
            missing = _missing(measured, [candidate], seeds)
            if missing:
                return Pending(missing)
            known.append(candidate)
            loss = intervals.of(candidate, known)
            if loss is not None and loss.low <= 0.0:
                current, dropped = candidate, [*dropped, g]
            else:
                notes[g] = ("within noise alone, but not together with the groups dropped "
                            "before it")
    minimal_loss = None
    keeps = True
    if current != winner:
        minimal_loss = intervals.of(current, known)
        failed = _diffs(measured, current, winner, seeds) is None
        keeps = not failed and minimal_loss is not None and minimal_loss.low <= 0.0
    contributions = tuple(Contribution(g, dict(groups[g]), costs[g], g not in dropped,
                                       notes.get(g, "")) for g in names)
    means = {"baseline": _mean(measured, baseline, seeds), "winner": _mean(measured, winner, seeds),
             "minimal": _mean(measured, current, seeds)}
    return Attribution(
        method="greedy backward elimination" if greedy else "leave-one-group-out",
        seeds=tuple(seeds), gain=gain, contributions=contributions,
        minimal_edit=variant_edit(groups, current), minimal_loss=minimal_loss, keeps_gain=keeps,
        noise=intervals.source, values={k: v for k, v in means.items() if v is not None})


def _mean(measured: Measured, key: GroupKey, seeds: Sequence[int]) -> float | None:
    values = [v for s in seeds if (v := measured.get(key, {}).get(s)) is not None]
    return statistics.fmean(values) if values else None


def result_of(records: Sequence[TrialRecord], winner_id: str | None = None) -> TrialRecord | None:
    """The latest attribution result (of ``winner_id``'s edit, when given)."""
    found = [r for r in records if r.kind == RESULT_KIND and r.status == "complete"
             and (winner_id is None or r.parent == winner_id)]
    return found[-1] if found else None


def recommendation_line(record: TrialRecord) -> str:
    """An attribution result in one line: what to book and what was left out, on what
    evidence. The campaign prints it after the winner line; the report explains it."""
    data = result_json(record)
    groups = data.get("groups", [])
    kept = [g["group"] for g in groups if g["kept"]]
    dropped = [g["group"] for g in groups if not g["kept"]]
    evidence = (f"attribution at {data.get('steps')} steps, {len(data.get('seeds', []))} "
                f"seed(s), {data.get('method')}")
    if not data.get("recommends_minimal"):
        return (f"recommended: the winner {data.get('winner')}'s whole edit; no group of it "
                f"could be left out within noise ({evidence})")
    return (f"recommended: the baseline plus the winner {data.get('winner')}'s "
            f"{', '.join(kept)} change(s), {len(data.get('minimal_edit', {}))} of its "
            f"{len(data.get('full_edit', {}))} knob(s); dropped: {', '.join(dropped)} "
            f"({evidence}; 'recipelab export' writes it, the report says why)")


def result_json(record: TrialRecord) -> dict[str, Any]:
    """What an attribution result record holds: :meth:`Attribution.to_json` plus the fidelity
    it was measured at (``rung``, ``steps``) and the winner (``winner``)."""
    found = record.metrics.get("attribution")
    return dict(found) if isinstance(found, dict) else {}
