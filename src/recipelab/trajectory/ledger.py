"""The Ledger: the one reading of a campaign's records.

Every question the campaign, ``status`` and the report ask of a trajectory is answered here,
once, from the records alone, so a resumed campaign makes the same decisions and the three
never disagree:

- **trained**: a trial that reached ``complete`` or ``failed`` (:attr:`TrialRecord.trained`);
- **search trials**: the trained proxy trials that count toward ``--iterations``: the
  baseline's seeds and every proposal, but not a finalist's seed re-run (part of promotion,
  like the stress runs); an interrupted trial is not trained, its one re-run is what counts;
- **extra seeds**: a baseline seed after the first, or a seed re-run: evidence about noise,
  never candidates;
- **candidates**: complete proxy trials with a finite val_bpb that are not extra seeds,
  ranked by (val_bpb, trial id); **best** is the first, **finalists** the first ``promote``;
- **rung candidates**: the first ``rung_size`` candidates, each trained once more for the
  rung's steps (a **rung run**, kind ``rung``); **rung ranked**: the candidates with a
  scored rung run (:func:`~recipelab.trajectory.rung.rung_score`: complete, finite, not
  diverged), by that score then trial id;
- **stress candidates**: the first ``promote`` of the rung ranking when the rung ran (at
  least one scored rung run), else the finalists; then ``fidelity`` trials spread over the
  rest of the proxy ranking, so proxy-to-stress agreement is measured on more than the top
  few;
- **retries**: interrupted trials not yet re-run (a candidate is re-run once);
- **winner**: named by the highest-fidelity evidence there is. Among candidates whose stress
  run stayed stable, the lowest stress val_bpb wins (a 60-step lead that a long run does not
  keep is not a lead). Without a stable stress run, the candidate with the best scored rung
  run wins (evidence ``rung``); without one either, the finalist with the lowest mean
  val_bpb over its seeds wins, and the winner says its evidence is only the proxy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, TypeVar

from recipelab.recipe import BASELINE_PROPOSER
from recipelab.trajectory.noise import (
    SEED_RERUN_PROPOSER,
    NoiseFloor,
    noise_floor,
    paired_gain,
    seed_family,
)
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.rung import rung_score

T = TypeVar("T")
Evidence = Literal["stress", "rung", "proxy"]


def is_extra_seed(record: TrialRecord) -> bool:
    """A trial that only repeats another with a new seed: a baseline seed after the first,
    or a finalist's seed re-run."""
    if record.proposer == SEED_RERUN_PROPOSER:
        return True
    return record.proposer == BASELINE_PROPOSER and set(record.edit) == {"seed"}


def has_score(record: TrialRecord) -> bool:
    """A complete trial with a finite val_bpb."""
    return (record.status == "complete" and record.val_bpb is not None
            and math.isfinite(record.val_bpb))


def mid_ranked(ranked: Sequence[T], k: int) -> list[T]:
    """``k`` items spread evenly over ``ranked`` (the centre of each of ``k`` equal slices),
    or all of them when there are no more than ``k``."""
    if k >= len(ranked):
        return list(ranked)
    return [ranked[math.floor((i + 0.5) * len(ranked) / k)] for i in range(k)]


@dataclass(frozen=True)
class Winner:
    """The campaign's pick, with the evidence it rests on."""

    record: TrialRecord  # the proxy trial of the winning recipe
    mean_val_bpb: float  # its proxy val_bpb, averaged over its seeds
    seeds: int
    within_noise: bool | None  # None without a noise floor
    evidence: Evidence = "proxy"
    stress: TrialRecord | None = None  # its stable stress run, when that decided
    rung: TrialRecord | None = None  # its best rung run, when that decided

    @property
    def because(self) -> str:
        if self.evidence == "stress" and self.stress is not None:
            if self.stress.val_bpb is None:
                return "the best proxy val_bpb among candidates whose stress run stayed stable"
            return (f"the lowest stress-run val_bpb ({self.stress.val_bpb:.4f} after "
                    f"{self.stress.recipe.get('steps')} steps) among candidates whose stress run "
                    "stayed stable")
        if self.evidence == "rung" and self.rung is not None:
            return (f"the best rung-run val_bpb ({self.rung.val_bpb:.4f} after "
                    f"{self.rung.recipe.get('steps')} steps) among the rung's candidates; no "
                    "stress run has confirmed it as stable yet, so treat it as provisional")
        return ("the lowest proxy val_bpb over its seeds; no stress run has confirmed it as "
                "stable yet, so treat it as provisional")


@dataclass(frozen=True)
class Counts:
    """How many trials are where, each counted once (what ``status`` prints)."""

    trained: int  # search trials, against --iterations
    failed: int  # of those
    seed_reruns: int
    interrupted_rerun: int
    interrupted_pending: int
    rejected: int
    stress_trained: int
    stress_total: int
    running: int
    rung_trained: int = 0


class Ledger:
    """The records of one campaign and every definition read from them (see the module)."""

    def __init__(self, records: Sequence[TrialRecord], *, promote: int = 3,
                 fidelity: int = 0, rung_size: int = 10) -> None:
        self.records = list(records)
        self.promote = promote
        self.fidelity = fidelity
        self.rung_size = rung_size

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
    def ranked(self) -> list[TrialRecord]:
        """The candidates, best first."""
        candidates = [r for r in self.proxies if has_score(r) and not is_extra_seed(r)]
        return sorted(candidates, key=lambda r: (r.val_bpb, r.trial_id))

    @property
    def best(self) -> TrialRecord | None:
        return self.ranked[0] if self.ranked else None

    @property
    def finalists(self) -> list[TrialRecord]:
        return self.ranked[:self.promote]

    @property
    def rung_candidates(self) -> list[TrialRecord]:
        return self.ranked[:self.rung_size]

    def rung_runs_of(self, proxy_id: str) -> list[TrialRecord]:
        return [r for r in self.rung if r.parent == proxy_id]

    def best_rung_run(self, proxy_id: str) -> tuple[float, TrialRecord] | None:
        """The candidate's best scored rung run, with its score."""
        scored = [(score, r) for r in self.rung_runs_of(proxy_id)
                  if (score := rung_score(r)) is not None]
        return min(scored, key=lambda sr: (sr[0], sr[1].trial_id)) if scored else None

    @cached_property
    def rung_ranked(self) -> list[TrialRecord]:
        """The candidates with a scored rung run, best first (whatever ``rung_size`` was
        when they ran: the records are the truth)."""
        scored = [(best[0], c) for c in self.ranked
                  if (best := self.best_rung_run(c.trial_id)) is not None]
        return [c for _, c in sorted(scored, key=lambda sc: (sc[0], sc[1].trial_id))]

    @property
    def stress_candidates(self) -> list[TrialRecord]:
        """The rung's first ``promote`` when the rung ran, else the finalists; then the
        ``fidelity`` mid-ranked trials of the proxy ranking not already chosen."""
        chosen = self.rung_ranked[:self.promote] if self.rung_ranked else self.finalists
        taken = {r.trial_id for r in chosen}
        extras = mid_ranked(self.ranked[self.promote:], self.fidelity)
        return chosen + [r for r in extras if r.trial_id not in taken]

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

    def seed_mean(self, record: TrialRecord) -> float | None:
        values = [r.val_bpb for r in seed_family(record, self.proxies) if r.val_bpb is not None]
        return statistics.fmean(values) if values else None

    @property
    def winner(self) -> Winner | None:
        stable = [(s, f) for f in self.ranked for s in self.stress_runs_of(f.trial_id)
                  if s.verdict == "stable"]
        if stable:  # a stable run without a val_bpb (an older record) ranks after those with one
            stress, pick = min(stable, key=lambda sf: (
                sf[0].val_bpb if has_score(sf[0]) else math.inf, sf[1].val_bpb, sf[1].trial_id))
            return self._winner(pick, "stress", stress)
        standing = [r for r in self.rung_ranked if not self.refuted(r.trial_id)]
        if standing:
            pick = standing[0]
            best = self.best_rung_run(pick.trial_id)
            assert best is not None
            return self._winner(pick, "rung", None, rung=best[1])
        scored = [(mean, f) for f in self.finalists
                  if not self.refuted(f.trial_id) and (mean := self.seed_mean(f)) is not None]
        if not scored:
            return None
        _, pick = min(scored, key=lambda mf: (mf[0], mf[1].trial_id))
        return self._winner(pick, "proxy", None)

    @property
    def no_winner_reason(self) -> str:
        """Why :attr:`winner` is None, in words for the report and the commands."""
        if any(self.seed_mean(f) is not None for f in self.finalists):
            return ("every finalist's own stress run diverged, so no recipe is recommended: "
                    "see the stress runs, then search again with a wider --promote or lower "
                    "learning rates")
        return "no proxy trial has completed yet"

    def _winner(self, pick: TrialRecord, evidence: Evidence, stress: TrialRecord | None, *,
                rung: TrialRecord | None = None) -> Winner:
        mean = self.seed_mean(pick)
        assert mean is not None
        gain = paired_gain(pick, self.proxies, self.noise) if self.noise else None
        return Winner(record=pick, mean_val_bpb=mean, seeds=len(seed_family(pick, self.proxies)),
                      within_noise=gain.is_noise if gain is not None else None,
                      evidence=evidence, stress=stress, rung=rung)

    def counts(self) -> Counts:
        retried = {r.retry_of for r in self.records if r.retry_of}
        lost = [r for r in self.proxies if r.status == "interrupted"]
        requeued = sum(r.trial_id in retried for r in lost)
        return Counts(
            trained=len(self.search_trials),
            failed=sum(r.status == "failed" for r in self.search_trials),
            seed_reruns=sum(r.proposer == SEED_RERUN_PROPOSER and r.trained for r in self.proxies),
            interrupted_rerun=requeued, interrupted_pending=len(lost) - requeued,
            rejected=sum(r.status == "rejected" for r in self.proxies),
            stress_trained=sum(r.trained for r in self.stress), stress_total=len(self.stress),
            running=sum(r.status == "running" for r in self.records),
            rung_trained=sum(r.trained for r in self.rung))
