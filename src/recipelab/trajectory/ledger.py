"""The Ledger: the one reading of a campaign's records.

Every question the campaign, ``status``, the report and the hand-off ask of a trajectory is
answered here, once, from the records and the campaign's ladder rules (``promote``,
``fidelity``, ``rung_size``, ``eta``; each command builds its ledger with
:meth:`~recipelab.agent.setup.settings_components.LadderSettings.ledger`), so a resumed campaign
makes the same decisions and none of them disagree:

- **trained**: a trial that reached ``complete`` or ``failed`` (:attr:`TrialRecord.trained`);
- **search trials**: the trained proxy trials that count toward ``--iterations``: the
  baseline's seeds and every proposal, but not a finalist's seed re-run (part of promotion,
  like the stress runs); an interrupted trial is not trained, its one re-run is what counts;
- **extra seeds**: a baseline seed after the first, or a seed re-run: evidence about noise,
  never candidates;
- **candidates**: complete proxy trials with a finite val_bpb that are not extra seeds;
  **contenders** are the candidates but the baseline. Each ranking's name says where its
  evidence comes from:
  - :attr:`Ledger.ranked_at_proxy`: every candidate by its proxy val_bpb at the campaign's
    seed (**best** is the first; the **proxy finalists**, the first ``promote``, get seed
    re-runs when their lead is within the noise);
  - :attr:`Ledger.ranked_for_first_rung`: the contenders by the better of their proxy trial
    and their *probe*; its best, with their ties, are the **first climbers**;
  - :meth:`Ledger.ranked_at`: the contenders by their paired gain over the baseline at one
    rung; :meth:`Ledger.ranked_below` and :attr:`Ledger.ranked_at_highest_rung` read it at
    the highest rung below a given one, or below the top;
  - :attr:`Ledger.top_rung_climbers`: the ``promote`` best below the top rung, then
    ``fidelity`` trials spread over the rest of the proxy ranking, so proxy-to-stress
    agreement is measured on more than the top few;
- **retries**: interrupted trials not yet re-run (a candidate is re-run once);
- **ladder** (see :mod:`recipelab.trajectory.ladder`): rung runs (kind ``rung``) at
  successively longer steps, then the top rung (kind ``stress``, at ``--stress-steps``) at
  two or more seeds; the candidates climbing to a rung are the best of the highest rung
  below it with scored runs (the first climbers when none); the baseline's learning-rate
  family runs (proposer ``lr-family``) feed the horizon rule and rank nothing;
- **tuned** (:meth:`Ledger.tuned`): at the top rung, a recipe at the best of its family's
  rates (× ½, 1, × 2, and beyond while the best is an edge) by their mean over the seeds all
  trained (a rate that diverged anywhere is out); the **control** is the tuned baseline, and
  each finalist competes at its own best rate, so a gain is the recipe's, not its rate's;
- **verdict**, **winner**, **kept baseline**: see :mod:`recipelab.trajectory.verdict`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from functools import cached_property
from typing import TypeVar

from recipelab.recipe import (
    BASELINE_PROPOSER,
    FALLBACK_ARTIFACT,
    LLM_PROPOSER_PREFIX,
    PERSON_PROPOSER,
)
from recipelab.trajectory.ladder import (
    DEFAULT_ETA,
    PROMOTE,
    climbers,
    top_interval,
    verdict_confidence,
)
from recipelab.trajectory.noise import (
    SEED_RERUN_PROPOSER,
    Gain,
    NoiseFloor,
    noise_floor,
    paired_gain,
    seed_family,
)
from recipelab.trajectory.record import TrialRecord, has_score
from recipelab.trajectory.rung import rung_score
from recipelab.trajectory.verdict import Control, Counts, Evidence, Rung, TopRungVerdict, Winner
from recipelab.trajectory.width_check import WidthCheck, width_check

LR_FAMILY_PROPOSER = "lr-family"
"""A rung run of a recipe at a multiple of its rate (``edit["lr_family"]``): the baseline's
family, data for the horizon rule, or a candidate's probe at the proxy's steps."""
T = TypeVar("T")


def is_extra_seed(record: TrialRecord) -> bool:
    """A trial that only repeats another with a new seed: a baseline seed after the first,
    or a finalist's seed re-run."""
    if record.proposer == SEED_RERUN_PROPOSER:
        return True
    return record.proposer == BASELINE_PROPOSER and set(record.edit) == {"seed"}


def mid_ranked(ranked: Sequence[T], k: int) -> list[T]:
    """``k`` items spread evenly over ``ranked`` (the centre of each of ``k`` equal slices),
    or all of them when there are no more than ``k``."""
    if k >= len(ranked):
        return list(ranked)
    return [ranked[math.floor((i + 0.5) * len(ranked) / k)] for i in range(k)]


class Ledger:
    """The records of one campaign and every definition read from them (see the module)."""

    def __init__(self, records: Sequence[TrialRecord], *, promote: int = PROMOTE,
                 fidelity: int = 0, rung_size: int = 10, eta: int = DEFAULT_ETA,
                 looks: int = 2) -> None:
        """``looks``: how often the top rung's verdict may look at its seeds, 2 when a close
        call can buy more (the Bonferroni count's second factor), else 1."""
        self.records = list(records)
        self.promote = promote
        self.fidelity = fidelity
        self.rung_size = rung_size
        self.eta = eta
        self.looks = looks
        self._gains: dict[str, Gain | None] = {}

    def of_kind(self, kind: str) -> list[TrialRecord]:
        return [r for r in self.records if r.kind == kind]

    @cached_property
    def proxies(self) -> list[TrialRecord]:
        return self.of_kind("proxy")

    @cached_property
    def stress(self) -> list[TrialRecord]:
        return self.of_kind("stress")

    @cached_property
    def rung(self) -> list[TrialRecord]:
        return self.of_kind("rung")

    @cached_property
    def search_trials(self) -> list[TrialRecord]:
        return [r for r in self.proxies if r.trained and r.proposer != SEED_RERUN_PROPOSER]

    @cached_property
    def ranked_at_proxy(self) -> list[TrialRecord]:
        """Every candidate, the baseline included, by its proxy val_bpb at the campaign's
        seed, best first."""
        candidates = [r for r in self.proxies if has_score(r) and not is_extra_seed(r)]
        return sorted(candidates, key=lambda r: (r.val_bpb, r.trial_id))

    @property
    def best(self) -> TrialRecord | None:
        return self.ranked_at_proxy[0] if self.ranked_at_proxy else None

    @property
    def proxy_finalists(self) -> list[TrialRecord]:
        """The first ``promote`` of :attr:`ranked_at_proxy`: re-run at more seeds when their
        lead is within the noise, and the evidence of a campaign whose ladder never ran."""
        return self.ranked_at_proxy[:self.promote]

    @cached_property
    def contenders(self) -> list[TrialRecord]:
        """The candidates other than the baseline (the control), best first."""
        return [r for r in self.ranked_at_proxy if r.proposer != BASELINE_PROPOSER]

    @property
    def baseline(self) -> TrialRecord | None:
        """The baseline's first complete proxy trial: the control that climbs every rung."""
        return next((r for r in self.ranked_at_proxy if r.proposer == BASELINE_PROPOSER), None)

    @property
    def first_climbers(self) -> list[TrialRecord]:
        """The best :func:`~recipelab.trajectory.ladder.climbers` of :attr:`ranked_for_first_rung`, and
        those tied with the last of them: within the proxy's noise floor of its score (the
        floor is measured at the proxy's steps, so only this cut has one), ``rung_size`` at
        most. In ``bench/search_quality.py``'s campaigns, a long run's best lost at this cut
        to a candidate 0.008 val_bpb ahead, a third of the floor."""
        ranked = self.ranked_for_first_rung
        n = climbers(len(ranked), self.eta, self.promote, self.rung_size)
        floor = self.noise.paired_spread or self.noise.spread if self.noise is not None else 0.0
        if 0 < n < len(ranked) and floor > 0:
            cut = self.at_proxy_steps(ranked[n - 1])[0] + floor
            while (n < min(len(ranked), self.rung_size)
                   and self.at_proxy_steps(ranked[n])[0] <= cut):
                n += 1
        return ranked[:n]

    @cached_property
    def probes(self) -> list[TrialRecord]:
        """Candidates' family runs at the proxy's steps (not the baseline's family, nor a
        finalist's at the top rung)."""
        base = self.baseline
        steps = self.proxies[0].budget_steps if self.proxies else 0
        return [r for r in self.rung if r.proposer == LR_FAMILY_PROPOSER
                and r.budget_steps == steps and (base is None or r.parent != base.trial_id)]

    def at_proxy_steps(self, candidate: TrialRecord) -> tuple[float, float]:
        """The candidate's best score at the proxy's steps and the multiple of its rate that
        reached it: its own trial's (× 1) or its probe's, at the same seed."""
        best = (float(candidate.val_bpb) if candidate.val_bpb is not None else math.inf, 1.0)
        for probe in self.probes:
            if (probe.parent == candidate.trial_id
                    and probe.recipe.get("seed") == candidate.recipe.get("seed")
                    and (score := rung_score(probe)) is not None and score < best[0]):
                best = (score, float(probe.edit["lr_family"]))
        return best

    @cached_property
    def ranked_for_first_rung(self) -> list[TrialRecord]:
        """The contenders by their best score at the proxy's steps (:meth:`at_proxy_steps`):
        the ranking the first rung's climbers are taken from."""
        return sorted(self.contenders, key=lambda c: (self.at_proxy_steps(c)[0], c.trial_id))

    def climbing_to(self, steps: int, *, top: bool = False) -> list[TrialRecord]:
        """The candidates that train at the rung of ``steps``: the best of the highest rung
        below it with scored runs (:attr:`ranked_for_first_rung` when none), ``promote`` of them at
        the top rung, else :func:`~recipelab.trajectory.ladder.climbers` of them."""
        below = self.ranked_below(steps)
        if top:
            return below[:self.promote]
        if below is self.ranked_for_first_rung:
            return self.first_climbers
        return below[:climbers(len(below), self.eta, self.promote)]

    @property
    def ranking_runs(self) -> list[TrialRecord]:
        """The rung runs that rank candidates (not learning-rate family runs or probes)."""
        return [r for r in self.rung if r.proposer != LR_FAMILY_PROPOSER]

    def rung_runs_of(self, proxy_id: str) -> list[TrialRecord]:
        return [r for r in self.ranking_runs if r.parent == proxy_id]

    def runs_at(self, proxy_id: str, steps: int) -> list[TrialRecord]:
        """``proxy_id``'s rung or top-rung runs (not family runs) of ``steps``."""
        return [r for r in (*self.ranking_runs, *self.stress)
                if r.parent == proxy_id and r.budget_steps == steps]

    def longest_run(self, record: TrialRecord) -> TrialRecord:
        """``record``'s recipe as it trained the most tokens: its completed top-rung or rung
        run (the first, by trial id, of those at the most tokens: the top rung trains fresh
        seeds), else the trial itself. Its rate and batch are what the campaign measured at
        the largest scale, where the export anchors its law."""
        runs = [r for r in (*self.ranking_runs, *self.stress) if r.parent == record.trial_id
                and r.status == "complete"]
        return min(runs, key=lambda r: (-r.tokens, r.trial_id), default=record)

    def best_rung_run(self, proxy_id: str) -> tuple[float, TrialRecord] | None:
        """The candidate's scored run at its highest rung below the top, with its score."""
        scored = [(score, r) for r in self.rung_runs_of(proxy_id)
                  if (score := rung_score(r)) is not None]
        if not scored:
            return None
        return min(scored, key=lambda sr: (-sr[1].budget_steps, sr[0],
                                           sr[1].trial_id))

    def scores_at(self, proxy_id: str, steps: int) -> dict[int, float]:
        """``proxy_id``'s scored runs at ``steps``, by seed (a diverging curve, a failed run or
        a diverged stress verdict scores nothing)."""
        found: dict[int, float] = {}
        for run in self.runs_at(proxy_id, steps):
            score = rung_score(run)
            if score is not None and run.verdict != "diverged":
                found.setdefault(int(run.recipe.get("seed", 0)), score)
        return found

    def gains_at(self, proxy_id: str, steps: int) -> dict[int, float]:
        """``baseline - candidate`` val_bpb at ``steps``, at each seed both have scored."""
        base = self.baseline
        at = self.scores_at(base.trial_id, steps) if base is not None else {}
        return {seed: at[seed] - value for seed, value in self.scores_at(proxy_id, steps).items()
                if seed in at}

    @cached_property
    def rung_levels(self) -> list[int]:
        """The steps of every rung with a scored run, lowest first (the top rung included)."""
        steps = {r.budget_steps for r in (*self.ranking_runs, *self.stress)
                 if rung_score(r) is not None}
        return sorted(steps)

    def ranked_at(self, steps: int) -> list[TrialRecord]:
        """The contenders scored at ``steps``, by paired gain over the baseline at the same
        steps (mean over shared seeds), else by mean val_bpb when the baseline has no run
        there; then trial id."""
        keyed: list[tuple[float, str, TrialRecord]] = []
        for c in self.contenders:
            gains, scores = self.gains_at(c.trial_id, steps), self.scores_at(c.trial_id, steps)
            if scores:
                key = -statistics.fmean(gains.values()) if gains else statistics.fmean(scores.values())
                keyed.append((key, c.trial_id, c))
        return [c for *_, c in sorted(keyed, key=lambda k: (k[0], k[1]))]

    def ranked_below(self, steps: int) -> list[TrialRecord]:
        """The contenders ranked by the highest rung below ``steps`` with scored runs
        (:attr:`ranked_for_first_rung` when there is none)."""
        for level in reversed(self.rung_levels):
            if level < steps and (ranked := self.ranked_at(level)):
                return ranked
        return self.ranked_for_first_rung

    @cached_property
    def ranked_at_highest_rung(self) -> list[TrialRecord]:
        """The contenders ranked by the highest rung below the top that has scored runs."""
        levels = {r.budget_steps for r in self.ranking_runs if rung_score(r) is not None}
        return self.ranked_at(max(levels)) if levels else []

    def top_rung(self) -> Rung:
        """The highest rung the ladder reached (scored runs of the baseline or a candidate):
        its steps and seeds; the proxy's when nothing above it has scored."""
        if self.rung_levels:
            steps = self.rung_levels[-1]
            runs = [r for r in (*self.ranking_runs, *self.stress)
                    if r.budget_steps == steps and rung_score(r) is not None]
            return Rung(steps, tuple(sorted({int(r.recipe.get("seed", 0)) for r in runs})),
                        runs[0].kind)
        seeds = tuple(sorted({int(r.recipe.get("seed", 0)) for r in self.proxies if has_score(r)}))
        steps = self.proxies[0].budget_steps if self.proxies else 0
        return Rung(steps, seeds, "proxy")

    @property
    def top_rung_climbers(self) -> list[TrialRecord]:
        """The finalists that climb to the top rung (see :meth:`climbing_to`); then the
        ``fidelity`` mid-ranked trials of the proxy ranking not already chosen."""
        top = [r.budget_steps for r in self.stress]
        chosen = self.climbing_to(max(top) if top else math.inf, top=True)  # type: ignore[arg-type]
        taken = {r.trial_id for r in chosen}
        extras = mid_ranked(self.contenders[self.promote:], self.fidelity)
        return chosen + [r for r in extras if r.trial_id not in taken]

    def tuned(self, record: TrialRecord, steps: int) -> Control:
        """``record``'s recipe at ``steps`` at the best rate of its learning-rate family there
        (its own rate alone without one). The rate is chosen on the seeds every rate of the
        family trained, so the seeds a close call adds to the chosen rate alone never change
        the choice; a rate that diverged anywhere is out."""
        rates: dict[float, dict[int, float]] = {1.0: self.scores_at(record.trial_id, steps)}
        failed: set[float] = set()
        for run in self.rung:
            if (run.proposer != LR_FAMILY_PROPOSER or run.parent != record.trial_id
                    or run.budget_steps != steps or not run.trained):
                continue
            factor = float(run.edit.get("lr_family", 1.0))
            score = rung_score(run)
            if score is None or run.verdict == "diverged":
                failed.add(factor)
            else:
                rates.setdefault(factor, {}).setdefault(int(run.recipe.get("seed", 0)), score)
        compared = {m: v for m, v in rates.items() if m not in failed and v}
        shared = set.intersection(*(set(v) for v in compared.values())) if compared else set()
        factor = 1.0
        if len(compared) > 1 and len(shared) >= 2:
            factor = min(compared, key=lambda m: (statistics.fmean(compared[m][s]
                                                                   for s in shared), m))
        compared_rates = tuple(sorted(compared)) if len(shared) >= 2 else (1.0,)
        tried = tuple(sorted({*rates, *failed}))
        return Control(steps, factor, rates[factor], rates[1.0], compared_rates, tried)

    def control(self, steps: int) -> Control | None:
        """The tuned baseline at ``steps`` (:meth:`tuned`, the control); None without one."""
        base = self.baseline
        return None if base is None else self.tuned(base, steps)

    def verdict(self) -> TopRungVerdict | None:
        """The top rung's verdict (see the module), or None when no top-rung run of a
        finalist pairs with the control's at two or more seeds."""
        steps = max((r.budget_steps for r in self.stress), default=0)
        control = self.control(steps)
        if control is None:
            return None
        tuned = {c.trial_id: self.tuned(c, steps) for c in self.contenders}
        gains = {i: g for i, t in tuned.items() if len(g := control.gains(t.scores)) >= 2}
        if not gains:
            return None
        tests = len(gains) * self.looks
        level = verdict_confidence(len(gains), self.looks)
        by_id = {c.trial_id: c for c in self.contenders}
        ranked = sorted(gains, key=lambda i: (-statistics.fmean(gains[i].values()), i))
        best = by_id[ranked[0]]
        gain = top_interval(list(gains[best.trial_id].values()), level, tests)
        seeds = max(len(g) for g in gains.values())
        if gain.is_noise:
            untuned = top_interval(list(control.gains(tuned[best.trial_id].scores,
                                                      untuned=True).values()), level, tests)
            if control.tuned and not untuned.is_noise:
                moved = "lowering" if control.factor < 1.0 else "raising"
                why = (f"no better than {moved} the learning rate: it beats the baseline "
                       f"at its own rate by {untuned.text()}, not the baseline at "
                       f"{control.factor:g}× its rate; train the baseline at that rate, or "
                       "search again")
            elif gain.high < 0.0:
                why = ("the whole interval is below 0, so every finalist is worse than the "
                       "baseline there: keep the baseline")
            else:
                why = ("the interval includes 0, so the seeds alone could explain it: keep the "
                       f"baseline, or buy more evidence at the top rung (--top-seeds {seeds + 2}) "
                       "or a longer one (--stress-steps)")
            return TopRungVerdict(
                steps, seeds, None, gain, best=best, control=control, tuned=tuned[best.trial_id],
                reason=(f"the best finalist {best.trial_id} gains {gain.text()} over "
                        f"{control.text()} at the top rung ({steps} steps); {why}"))
        fallback = lead = None
        if len(ranked) > 1:
            runner = ranked[1]
            shared = [gains[best.trial_id][s] - gains[runner][s]
                      for s in gains[best.trial_id] if s in gains[runner]]
            if len(shared) >= 2:
                lead = top_interval(shared)
                if lead.low <= 0.0:
                    fallback = by_id[runner]
        return TopRungVerdict(steps, seeds, best, gain, fallback=fallback,
                              lead=lead if fallback is not None else None, best=best,
                              control=control, tuned=tuned[best.trial_id])

    def winner_line(self) -> str:
        """The one sentence naming the winner (or why there is none) with its evidence, seeds
        and gain, and whether the check one size up overruled it: the campaign, ``status``,
        the report and ``export`` all print it."""
        line = self._ladder_line()
        if self.lost_one_size_up is not None:
            line += f"; but {self.kept_because}: keep the baseline"
        return line

    def _ladder_line(self) -> str:
        top = self.verdict()
        if top is not None:
            return top.line()
        winner = self.winner
        if winner is None:
            return f"no winner: {self.no_winner_reason}"
        gain = self.proxy_gain(winner.record)
        run = {"stress": winner.stress, "rung": winner.rung}.get(winner.evidence) or winner.record
        if run is winner.record:
            seeds = gain.seeds if gain is not None else winner.seeds
        else:  # the seeds of the level the evidence comes from, not the proxy's
            seeds = len({r.recipe.get("seed") for r in self.runs_at(winner.record.trial_id,
                                                                     run.budget_steps)})
        evidence_text = (f"evidence: {winner.evidence if run is not winner.record else 'proxy'} "
                         f"at {run.budget_steps} steps, {seeds} seed{'s' if seeds != 1 else ''}")
        if winner.record.proposer == BASELINE_PROPOSER:  # nothing trained beside it beat it
            return f"no winner: the baseline {winner.record.trial_id} leads ({evidence_text})"
        gain_text = (f", proxy gain over the baseline {gain.interval_text()} val_bpb"
                     if gain is not None else "")
        return (f"winner (provisional): {winner.record.trial_id}, {evidence_text}{gain_text}; "
                "no paired top rung confirms it")

    @cached_property
    def noise(self) -> NoiseFloor | None:
        return noise_floor(self.proxies)

    @property
    def baseline_id(self) -> str | None:
        return next((r.trial_id for r in self.proxies
                     if r.proposer == BASELINE_PROPOSER and r.status == "complete"), None)

    def next_id(self, prefix: str) -> str:
        """The next free trial id with ``prefix`` (``p0007``, ``s0002``)."""
        taken = [int(r.trial_id[1:]) for r in self.records
                 if r.trial_id[:1] == prefix and r.trial_id[1:].isdigit()]
        return f"{prefix}{max(taken, default=-1) + 1:04d}"

    def pending_retries(self, kind: str) -> list[TrialRecord]:
        """Interrupted trials of ``kind`` not yet re-run (a candidate is re-run once)."""
        records = self.of_kind(kind)
        retried = {r.retry_of for r in records if r.retry_of}
        return [r for r in records if r.status == "interrupted" and not r.retry_of
                and r.trial_id not in retried]

    def proposed_fingerprints(self) -> frozenset[str]:
        """Recipes already proposed: an interrupted candidate never got a result, so
        proposing it again is no duplicate, and a rejected one never trained."""
        return frozenset(r.fingerprint for r in self.proxies if r.fingerprint
                         and r.status not in ("rejected", "interrupted"))

    def stress_runs_of(self, proxy_id: str) -> list[TrialRecord]:
        return [r for r in self.stress if r.parent == proxy_id]

    def refuted(self, proxy_id: str) -> bool:
        """Whether a stress run of ``proxy_id`` diverged: a provisional winner must not be a
        recipe its own long run has already blown up. A flat tail or a gradient spike is a
        warning the report shows, not a refutation (a converged run is flat), and a run that
        failed without a verdict (a crash, a timeout) says nothing about the recipe."""
        return any(s.verdict == "diverged" for s in self.stress_runs_of(proxy_id))

    def proxy_gain(self, record: TrialRecord) -> Gain | None:
        """``record``'s gain over the baseline at the proxy's steps, over every seed of its
        recipe, with its 90% interval (:func:`paired_gain`); None for the baseline's own seeds
        (the control) and before the noise floor is measured. Computed once per trial:
        ``status``, the report and the winner line show this one number, labelled with its
        seeds (:meth:`Gain.describe`)."""
        if record.trial_id not in self._gains:
            floor = self.noise
            self._gains[record.trial_id] = (
                None if floor is None or record.proposer == BASELINE_PROPOSER
                else paired_gain(record, self.proxies, floor))
        return self._gains[record.trial_id]

    def seed_mean(self, record: TrialRecord) -> float | None:
        values = [r.val_bpb for r in seed_family(record, self.proxies) if r.val_bpb is not None]
        return statistics.fmean(values) if values else None

    @property
    def winner(self) -> Winner | None:
        top = self.verdict()
        if top is not None:
            if top.primary is None:
                return None
            stress = min(self.runs_at(top.primary.trial_id, top.steps), key=lambda r: r.trial_id)
            return dataclasses.replace(self._winner(top.primary, "stress", stress), top=top,
                                       within_noise=False)
        stable = [(s, f) for f in self.ranked_at_proxy for s in self.stress_runs_of(f.trial_id)
                  if s.verdict == "stable"]
        if stable:  # a stable run without a val_bpb (an older record) ranks after those with one
            stress, pick = min(stable, key=lambda sf: (
                sf[0].val_bpb if has_score(sf[0]) else math.inf, sf[1].val_bpb, sf[1].trial_id))
            return self._winner(pick, "stress", stress)
        standing = [r for r in self.ranked_at_highest_rung if not self.refuted(r.trial_id)]
        if standing:
            pick = standing[0]
            best = self.best_rung_run(pick.trial_id)
            assert best is not None
            return self._winner(pick, "rung", None, rung=best[1])
        scored = [(mean, f) for f in self.proxy_finalists
                  if not self.refuted(f.trial_id) and (mean := self.seed_mean(f)) is not None]
        if not scored:
            return None
        _, pick = min(scored, key=lambda mf: (mf[0], mf[1].trial_id))
        return self._winner(pick, "proxy", None)

    @property
    def recommended(self) -> tuple[TrialRecord, str] | None:
        """What the campaign recommends training, and why: the baseline it keeps
        (:attr:`kept_baseline`), else the winner, so the hand-off trains what the night
        concluded. None before either."""
        kept = self.kept_baseline
        if kept is not None:
            return kept, f"the baseline the campaign keeps: {self.kept_because}"
        winner = self.winner
        return None if winner is None else (winner.record, winner.because)

    @property
    def ladder_recommended(self) -> tuple[TrialRecord, str] | None:
        """What the ladder recommends, before the check one size up can overrule it: the
        recipe the width rung trains."""
        winner = self.winner
        return (winner.record, winner.because) if winner is not None else self.recommended

    @cached_property
    def lost_one_size_up(self) -> WidthCheck | None:
        """The check one size up (:mod:`recipelab.trajectory.width_check`) when the baseline
        beat the winner there by more than the noise floor; None otherwise."""
        winner = self.winner
        if winner is None:
            return None
        check = width_check(self.records, winner.record.trial_id)
        return check if check is not None and check.lost else None

    @property
    def kept_baseline(self) -> TrialRecord | None:
        """The baseline when the campaign's answer is "keep the baseline": the top rung
        measured every finalist against it and named none better beyond the noise, every
        finalist's own stress run diverged where the baseline's did not, or the baseline beat
        the winner one size up (:attr:`lost_one_size_up`). The baseline is then what the
        hand-off trains. None otherwise."""
        if self.kept_because is None:
            return None
        return next((r for r in self.proxies if r.trial_id == self.baseline_id), None)

    @cached_property
    def kept_because(self) -> str | None:
        """Why the campaign keeps the baseline, or None; read once (it asks for the top
        rung's verdict and the winner, and the ledger's records never change)."""
        lost, winner = self.lost_one_size_up, self.winner
        if lost is not None and winner is not None:
            return (f"one size up the baseline beat the winner {winner.record.trial_id} by "
                    f"{-lost.gain:.4f}, more than the noise floor (±{lost.floor:.4f})")
        top = self.verdict()
        if top is not None:
            return (None if top.primary is not None else
                    "the top rung named no finalist better than it beyond the noise")
        baseline_id = self.baseline_id
        finalists = [f for f in self.proxy_finalists if f.trial_id != baseline_id]
        if (self.winner is None and finalists and baseline_id is not None
                and all(self.refuted(f.trial_id) for f in finalists)
                and self.stress_runs_of(baseline_id) and not self.refuted(baseline_id)):
            return "every finalist's own stress run diverged and the baseline's did not"
        return None

    @property
    def no_winner_reason(self) -> str:
        """Why :attr:`winner` is None, in words for the report and the commands."""
        top = self.verdict()
        if top is not None and top.primary is None:
            return f"no winner beyond noise: {top.reason}"
        if any(self.seed_mean(f) is not None for f in self.proxy_finalists):
            if self.kept_baseline is not None:
                return ("every finalist's own stress run diverged and the baseline's did not: "
                        "keep the baseline, or search again with a wider --promote or lower "
                        "learning rates")
            return ("every finalist's own stress run diverged, so no recipe is recommended: "
                    "see the stress runs, then search again with a wider --promote or lower "
                    "learning rates")
        if self.promote == 0 and self.ranked_at_proxy:
            return ("--promote is 0, so no finalist climbed the ladder that names a winner; "
                    "export a proxy trial with --trial pN ('recipelab status' ranks them)")
        return "no proxy trial has completed yet"

    def _winner(self, pick: TrialRecord, evidence: Evidence, stress: TrialRecord | None, *,
                rung: TrialRecord | None = None) -> Winner:
        mean = self.seed_mean(pick)
        assert mean is not None
        gain = self.proxy_gain(pick)
        return Winner(record=pick, mean_val_bpb=mean, seeds=len(seed_family(pick, self.proxies)),
                      within_noise=gain.is_noise if gain is not None else None,
                      evidence=evidence, stress=stress, rung=rung)

    def counts(self) -> Counts:
        retried = {r.retry_of for r in self.records if r.retry_of}
        lost = [r for r in self.proxies if r.status == "interrupted"]
        requeued = sum(r.trial_id in retried for r in lost)
        again = sum(r.retry_of is not None for r in lost)
        return Counts(
            trained=len(self.search_trials),
            failed=sum(r.status == "failed" for r in self.search_trials),
            seed_reruns=sum(r.proposer == SEED_RERUN_PROPOSER and r.trained for r in self.proxies),
            interrupted_rerun=requeued, interrupted_pending=len(lost) - requeued - again,
            interrupted_again=again,
            rejected=sum(r.status == "rejected" for r in self.proxies),
            stress_trained=sum(r.trained for r in self.stress), stress_total=len(self.stress),
            running=sum(r.status == "running" for r in self.records),
            rung_trained=sum(r.trained for r in self.rung),
            proposed=sum(r.proposer not in (BASELINE_PROPOSER, PERSON_PROPOSER)
                         for r in self.search_trials),
            llm=sum(r.proposer.startswith(LLM_PROPOSER_PREFIX) for r in self.search_trials),
            fell_back=sum(FALLBACK_ARTIFACT in r.artifacts for r in self.search_trials))
