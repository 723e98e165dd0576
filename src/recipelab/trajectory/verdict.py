"""What the ledger answers about a campaign's outcome: the control a gain is measured
against, the top rung's verdict, the winner with its evidence, and the counts
``status`` prints. Plain values: the :class:`~recipelab.trajectory.ledger.Ledger` decides
them, every surface prints them.

- **verdict** (:meth:`Ledger.verdict`): when the top rung holds paired seeds
  for the control and a finalist, the finalist with the largest mean paired gain over the
  control there (each at its best rate) is the winner only when its own interval, at the
  Bonferroni level for the finalists compared and the looks taken
  (:func:`~recipelab.trajectory.ladder.verdict_confidence`), excludes 0 (else there is *no
  winner beyond noise*, with the reason; one that beats only the untuned baseline is *no
  better than moving the learning rate*); a runner-up whose gap to it is inside the noise is
  recommended too, as the fallback. :meth:`Ledger.winner_line` is the one sentence every
  surface prints; :func:`close_call_target` says whether a close call is due;
- **winner** (older campaigns, or a top rung cut short): named by the highest-fidelity
  evidence there is. Among candidates whose stress run stayed stable, the lowest stress
  val_bpb wins (a 60-step lead that a long run does not keep is not a lead). Without a
  stable stress run, the candidate with the best scored rung run wins (evidence ``rung``);
  without one either, the finalist with the lowest mean val_bpb over its seeds wins, and the
  winner says its evidence is only the proxy;
- **kept baseline** (:attr:`Ledger.kept_baseline`): the campaign's answer is the baseline
  when the top rung named no winner beyond noise, when every finalist's own stress run
  diverged and the baseline's did not, or when the baseline beat the winner one size up by
  more than the noise floor (:mod:`recipelab.trajectory.width_check`); the hand-off then
  trains the baseline.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from recipelab.trajectory.ladder import PairedGain, next_family_rate
from recipelab.trajectory.record import TrialRecord

if TYPE_CHECKING:
    from recipelab.trajectory.ledger import Ledger

Evidence = Literal["stress", "rung", "proxy"]


@dataclass(frozen=True)
class Control:
    """A recipe at the top rung at ``factor`` × its rate there (the best of its learning-rate
    family), with its val_bpb by seed; ``own`` is the recipe at its own rate. The baseline's
    is what the gains are measured against (the tuned control), a finalist's what it
    competes with."""

    steps: int
    factor: float
    scores: Mapping[int, float]
    own: Mapping[int, float]
    compared: tuple[float, ...] = (1.0,)  # the rates it was chosen among
    tried: tuple[float, ...] = (1.0,)  # every rate its family trained, diverged ones too

    @property
    def tuned(self) -> bool:
        """Whether the control's rate differs from the baseline's own."""
        return self.factor != 1.0

    def gains(self, scores: Mapping[int, float], *, untuned: bool = False) -> dict[int, float]:
        """``control - candidate`` val_bpb at each seed both have (``untuned``: against the
        baseline at its own rate)."""
        at = self.own if untuned else self.scores
        return {seed: at[seed] - value for seed, value in scores.items() if seed in at}

    def next_rate(self) -> float | None:
        """The family's next rate while its best is at an edge
        (:func:`~recipelab.trajectory.ladder.next_family_rate`); None before it was compared
        at two seeds or more."""
        return next_family_rate(self.factor, self.tried) if len(self.compared) > 1 else None

    def text(self) -> str:
        """``the tuned baseline (0.5× its rate, the best of 0.5/1/2× here)``, or the
        untuned one where its family was not trained (a campaign of an older recipelab)."""
        if len(self.compared) < 2:
            return "the baseline (its learning-rate family did not train here: untuned)"
        return f"the tuned baseline ({self.rate_text()})"

    def rate_text(self) -> str:
        """``0.5× its rate, the best of 0.5/1/2× here``."""
        return (f"{self.factor:g}× its rate, the best of "
                f"{'/'.join(f'{m:g}' for m in sorted(self.compared))}× here")


@dataclass(frozen=True)
class TopRungVerdict:
    """The top rung's verdict: a winner (and a fallback when the two are inside the noise of
    each other), or why there is none. ``steps`` and ``seeds`` say where the evidence is."""

    steps: int
    seeds: int
    primary: TrialRecord | None  # the proxy trial of the winning recipe; None: no winner
    gain: PairedGain | None  # the best finalist's gain, named or not
    fallback: TrialRecord | None = None
    lead: PairedGain | None = None  # primary over the runner-up
    best: TrialRecord | None = None  # the best finalist, winner or not
    reason: str | None = None  # why there is no winner
    control: Control | None = None  # what the gains are over
    tuned: Control | None = None  # the best finalist at its best rate

    @property
    def close_call(self) -> bool:
        """No winner, though the best finalist's mean gain is positive: its interval includes 0
        from above, and more seeds of it and the baseline may settle which side it is on."""
        return self.primary is None and self.gain is not None and self.gain.value > 0.0

    def line(self) -> str:
        """The winner line: what the console, ``status``, the report and ``export`` print."""
        if self.primary is None or self.gain is None:
            return f"no winner beyond noise: {self.reason}"
        against = self.control.text() if self.control is not None else "the baseline"
        at = (f" at {self.tuned.rate_text()}," if self.tuned is not None
              and len(self.tuned.compared) > 1 else "")
        text = (f"winner: {self.primary.trial_id}, evidence: top rung at {self.steps} steps, "
                f"{self.gain.seeds} seeds,{at} gain over {against} {self.gain.text()}")
        if self.fallback is not None and self.lead is not None:
            text += (f"; fallback: {self.fallback.trial_id} (the lead over it, "
                     f"{self.lead.value:+.4f} [{self.lead.low:+.4f}, {self.lead.high:+.4f}], is "
                     "inside the noise: recommend both)")
        return text


@dataclass(frozen=True)
class Rung:
    """A rung the ladder reached: its steps and the seeds its runs trained at."""

    steps: int
    seeds: tuple[int, ...]
    kind: str  # "proxy", "rung" or "stress"


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
    top: TopRungVerdict | None = None  # the top rung's paired verdict, when that decided

    @property
    def because(self) -> str:
        if self.top is not None and self.top.gain is not None:
            return (f"the largest paired gain over the baseline at the top rung "
                    f"({self.top.steps} steps): {self.top.gain.text()}")
        if self.evidence == "stress" and self.stress is not None:
            if self.stress.val_bpb is None:
                return "the best proxy val_bpb among candidates whose stress run stayed stable"
            return (f"the lowest stress-run val_bpb ({self.stress.val_bpb:.4f} after "
                    f"{self.stress.budget_steps} steps) among candidates whose stress run "
                    "stayed stable")
        if self.evidence == "rung" and self.rung is not None:
            return (f"the best rung-run val_bpb ({self.rung.val_bpb:.4f} after "
                    f"{self.rung.budget_steps} steps) among the rung's candidates; no "
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
    interrupted_again: int = 0  # re-runs lost too: a candidate is re-run once, not twice
    proposed: int = 0  # search trials a proposer made (not the baseline's seeds, not --edit)
    llm: int = 0  # of those, the LLM's own
    fell_back: int = 0  # of those, LLM turns the sampler took (the LLM failed)

    @property
    def llm_asked(self) -> bool:
        """Whether the LLM was asked for any search trial (it proposed or fell back)."""
        return bool(self.llm or self.fell_back)

    def llm_line(self) -> str:
        """The LLM's share of the night in words (status and the report)."""
        line = f"the LLM proposed {self.llm} of {self.proposed} search trials"
        if self.fell_back:
            line += (f"; the sampler took {self.fell_back} of its turns when it failed "
                     "(each trial's fallback.txt says why)")
        return line


def close_call_target(ledger: Ledger, bought: Collection[str],
                      extra: int) -> tuple[TrialRecord, float, float] | None:
    """The finalist a close call at the top rung buys ``extra`` more seeds for, the multiple
    of its rate it trains them at (its best) and the multiple of the baseline's rate its
    control trains them at; None when no close call is
    due: no verdict yet, a winner or a clear loss, no seeds to buy, or the best finalist has
    bought its seeds already (``bought``: each finalist looks twice at most, which the
    verdict's Bonferroni count assumes). A pure function of the records, so a resumed
    campaign buys the same runs."""
    verdict = ledger.verdict()
    if (not extra or verdict is None or not verdict.close_call or verdict.best is None
            or verdict.control is None or verdict.tuned is None
            or verdict.best.trial_id in bought):
        return None
    return verdict.best, verdict.tuned.factor, verdict.control.factor
