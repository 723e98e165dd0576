"""Calibration: what earlier campaigns teach a new one.

A user carries ``trajectory.jsonl`` files from campaign to campaign. This module reads them
(or campaign directories holding them) line by line and turns every usable trial into a
:class:`PriorTrial`: its knobs, its outcome, and its val_bpb *relative to its own campaign's
baseline* (the ratio to the mean val_bpb of that campaign's baseline seeds). Ratios are what
let campaigns on another corpus or another proxy size combine: 0.95 means "5% better than
where that campaign started", wherever it started.

Nothing here is fatal. A missing file, a line that is not a trial record, a campaign without
a complete baseline: each is reported as a :class:`CalibrationProblem` naming the file, the
line and what to do, and the rest is still used. Prior trials are only read, never written.

A campaign's attribution result (:mod:`recipelab.trajectory.attribution`) adds the knobs that
carried its winner's gain and those that were noise (:class:`PriorAttribution`, shown to the
LLM), and its minimal winning edit as one more prior trial (what the classical sampler
starts from).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from recipelab.recipe import flatten
from recipelab.text import clip, edit_json
from recipelab.trajectory.analysis import knob_importance
from recipelab.trajectory.attribution import RESULT_KIND, result_json
from recipelab.trajectory.horizon import HorizonFit, fit_alpha
from recipelab.trajectory.noise import SEED_RERUN_PROPOSER, baseline_seed_trials
from recipelab.trajectory.record import TrialRecord

TRAJECTORY_FILE = "trajectory.jsonl"
USED_STATUSES = ("complete", "failed", "rejected")
IGNORED_KNOBS = frozenset({"seed"})  # a seed is not a recipe choice to learn from

SUMMARY_BEST = 5
SUMMARY_FAILURES = 4
SUMMARY_REJECTIONS = 4
SUMMARY_IMPORTANCES = 6
SUMMARY_ATTRIBUTIONS = 3
SUMMARY_CHARS = 1_400
EDIT_CHARS = 160
REASON_CHARS = 160


@dataclass(frozen=True)
class CalibrationProblem:
    """Why (part of) a prior file was skipped; ``line`` is None for the whole file."""

    path: str
    line: int | None
    why: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.why}"


@dataclass(frozen=True)
class PriorTrial:
    """One trial of an earlier campaign, as a later campaign may learn from it.

    ``relative`` is val_bpb divided by its campaign's baseline mean (complete trials only);
    ``edit`` is the knobs that differ from that baseline (the seed left out).
    """

    source: str
    campaign: str
    trial_id: str
    status: str
    knobs: dict[str, Any]
    edit: dict[str, Any]
    relative: float | None = None
    reason: str | None = None
    reasons: tuple[str, ...] = ()
    hypothesis: str = ""


@dataclass(frozen=True)
class PriorAttribution:
    """What an earlier campaign measured of its winner's edit: the knobs of the groups that
    carried the gain (with each group's share of it) and those dropped as noise."""

    campaign: str
    kept: tuple[tuple[str, float | None], ...]  # (knob, its group's share of the gain)
    dropped: tuple[str, ...]
    rung: str = ""
    steps: int | None = None

    def describe(self) -> str:
        kept = ", ".join(f"{k}" + (f" ({share:.0%} of the gain)" if share is not None else "")
                         for k, share in self.kept) or "none"
        where = f" at {self.steps} steps" if self.steps else ""
        return (f"- {self.campaign}{where}: carried the gain: {kept}; dropped as noise: "
                f"{', '.join(self.dropped) or 'none'}")


@dataclass(frozen=True)
class Calibration:
    trials: tuple[PriorTrial, ...] = ()
    problems: tuple[CalibrationProblem, ...] = ()
    campaigns: tuple[str, ...] = field(default=())
    horizon_fits: tuple[HorizonFit, ...] = ()  # each campaign's fit (trajectory.horizon)
    attributions: tuple[PriorAttribution, ...] = ()  # each attributed winner's edit

    def counts(self) -> dict[str, int]:
        """Trials by status, plus the campaigns and problems: the figures a log line needs."""
        counts = {status: sum(t.status == status for t in self.trials) for status in USED_STATUSES}
        return {"trials": len(self.trials), **counts, "campaigns": len(self.campaigns),
                "problems": len(self.problems)}


def trajectory_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[CalibrationProblem]]:
    """The trajectory files behind ``paths`` (a file, or a campaign directory), each once."""
    files: list[Path] = []
    problems: list[CalibrationProblem] = []
    for given in paths:
        path = Path(given)
        candidate = path / TRAJECTORY_FILE if path.is_dir() else path
        if not candidate.is_file():
            why = (f"no {TRAJECTORY_FILE} in this directory; give a campaign directory or its "
                   f"{TRAJECTORY_FILE}" if path.is_dir()
                   else "no such file; give a campaign directory or its trajectory.jsonl")
            problems.append(CalibrationProblem(str(path), None, why))
        elif candidate.resolve() not in {f.resolve() for f in files}:
            files.append(candidate)
    return files, problems


def _read_records(path: Path) -> tuple[list[TrialRecord], list[CalibrationProblem]]:
    """Every valid record of a JSONL file; each bad line becomes a problem, never an error."""
    records: list[TrialRecord] = []
    problems: list[CalibrationProblem] = []
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as error:
        return [], [CalibrationProblem(str(path), None, f"cannot read it: {error.strerror}")]
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            problems.append(CalibrationProblem(str(path), number, f"not a JSON line ({error})"))
            continue
        if not isinstance(data, dict):
            problems.append(CalibrationProblem(
                str(path), number, f"a JSON {type(data).__name__}, not a trial record object"))
            continue
        try:
            records.append(TrialRecord.model_validate(data))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "record"
            problems.append(CalibrationProblem(
                str(path), number, f"not a recipelab trial record ({where}: {first['msg']}); "
                "is this a trajectory.jsonl from another tool or version?"))
    return records, problems


def _prior(record: TrialRecord, source: str, base_knobs: dict[str, Any],
           base_mean: float | None) -> PriorTrial | None:
    knobs = {k: v for k, v in flatten(record.recipe).items() if k not in IGNORED_KNOBS}
    relative = None
    if record.status == "complete":
        if base_mean is None or record.val_bpb is None or not math.isfinite(record.val_bpb):
            return None
        relative = record.val_bpb / base_mean
    edit = {k: v for k, v in knobs.items() if base_knobs.get(k) != v}
    return PriorTrial(source=source, campaign=record.campaign, trial_id=record.trial_id,
                      status=record.status, knobs=knobs, edit=edit, relative=relative,
                      reason=record.reason, reasons=tuple(record.reasons),
                      hypothesis=record.hypothesis)


def _campaign_priors(source: str, campaign: str, records: list[TrialRecord]
                     ) -> tuple[list[PriorTrial], list[CalibrationProblem]]:
    """The usable trials of one campaign, relative to the mean of its baseline seeds."""
    proxies = [r for r in records if r.kind == "proxy" and r.status in USED_STATUSES
               and r.proposer != SEED_RERUN_PROPOSER]
    baselines = baseline_seed_trials(proxies)
    problems = []
    base_mean: float | None = None
    base_knobs: dict[str, Any] = {}
    if baselines:
        base_mean = statistics.fmean(float(r.val_bpb) for r in baselines if r.val_bpb is not None)
        base_knobs = flatten(baselines[0].recipe)
        if not (math.isfinite(base_mean) and base_mean > 0):
            base_mean = None
    if base_mean is None:
        problems.append(CalibrationProblem(
            source, None, f"campaign {campaign!r} has no complete baseline trial with a positive "
            "val_bpb, so its results cannot be made relative; only its failures and rejections "
            "are used"))
    priors = [p for r in proxies if (p := _prior(r, source, base_knobs, base_mean)) is not None]
    return priors, problems


def _attribution_priors(source: str, records: Sequence[TrialRecord]
                        ) -> tuple[list[PriorTrial], list[PriorAttribution]]:
    """A campaign's attribution results: each minimal winning edit as a prior trial (its
    val_bpb relative to the baseline's at the same steps and seeds, so the classical
    sampler starts from the edit that carried the gain) and the knobs that mattered."""
    trials: list[PriorTrial] = []
    found: list[PriorAttribution] = []
    for record in records:
        if record.kind != RESULT_KIND or record.status != "complete":
            continue
        data = result_json(record)
        groups = data.get("groups") or []
        kept = tuple((knob, g.get("share_of_gain")) for g in groups if g.get("kept")
                     for knob in g.get("knobs", {}))
        dropped = tuple(knob for g in groups if not g.get("kept") for knob in g.get("knobs", {}))
        found.append(PriorAttribution(record.campaign, kept, dropped, str(data.get("rung", "")),
                                      data.get("steps")))
        values = data.get("values") or {}
        base, minimal = values.get("baseline"), values.get("minimal")
        if isinstance(base, (int, float)) and isinstance(minimal, (int, float)) and base > 0:
            knobs = {k: v for k, v in flatten(record.recipe).items() if k not in IGNORED_KNOBS}
            trials.append(PriorTrial(
                source=source, campaign=record.campaign, trial_id=record.trial_id,
                status="complete", knobs=knobs, edit=dict(record.edit),
                relative=float(minimal) / float(base), hypothesis=record.hypothesis))
    return trials, found


def load_calibration(paths: Iterable[str | Path]) -> Calibration:
    """Prior trials from trajectory files or campaign directories, and every problem met."""
    files, problems = trajectory_files(paths)
    trials: list[PriorTrial] = []
    campaigns: list[str] = []
    horizon_fits: list[HorizonFit] = []
    attributions: list[PriorAttribution] = []
    for path in files:
        records, bad_lines = _read_records(path)
        problems += bad_lines
        if not records and not bad_lines:
            problems.append(CalibrationProblem(str(path), None, "empty: it holds no trials"))
        by_campaign: dict[str, list[TrialRecord]] = {}
        for record in records:
            by_campaign.setdefault(record.campaign, []).append(record)
        for campaign, members in by_campaign.items():
            priors, campaign_problems = _campaign_priors(str(path), campaign, members)
            minimal, attributed = _attribution_priors(str(path), members)
            trials += priors + minimal
            attributions += attributed
            problems += campaign_problems
            campaigns.append(campaign)
            if (alpha := fit_alpha(members)) is not None:
                horizon_fits.append(alpha)
    return Calibration(tuple(trials), tuple(problems), tuple(campaigns), tuple(horizon_fits),
                       tuple(attributions))


# -- the summary an LLM proposer reads ---------------------------------------------------------


def relative_importance(trials: Sequence[PriorTrial],
                        knobs: Collection[str] | None = None) -> dict[str, float]:
    """Knob importance over the prior trials' relative val_bpb, restricted to ``knobs``."""
    records = [TrialRecord(campaign=t.campaign, trial_id=f"{t.source}:{t.trial_id}",
                           status="complete", recipe=t.knobs, val_bpb=t.relative)
               for t in trials if t.status == "complete" and t.relative is not None]
    importance = knob_importance(records)
    if knobs is not None:
        importance = {k: v for k, v in importance.items() if k in knobs}
        total = sum(importance.values())
        importance = {k: v / total for k, v in importance.items()} if total > 0 else {}
    return importance


def calibration_summary(calibration: Calibration, knobs: Collection[str] | None = None,
                        *, limit: int = SUMMARY_CHARS) -> str | None:
    """A bounded text for the LLM prompt: which knobs mattered, the best prior edits with
    their relative gains, and the failures and rejections to avoid. None when there are no
    prior trials."""
    trials = calibration.trials
    if not trials:
        return None
    complete = sorted((t for t in trials if t.status == "complete" and t.relative is not None),
                      key=lambda t: (t.relative, t.campaign, t.trial_id))
    lines = [f"{len(trials)} trials from {len(calibration.campaigns)} earlier campaign(s); "
             "val_bpb is given relative to each campaign's own baseline (0.95 = 5% lower)."]
    importance = relative_importance(trials, knobs)
    if importance:
        shown = list(importance.items())[:SUMMARY_IMPORTANCES]
        lines.append("Knob importance: " + ", ".join(f"{k} {v:.2f}" for k, v in shown))
    if calibration.attributions:
        lines.append("Measured attribution of earlier winners' edits (which changes carried "
                     "the gain, which were noise):")
        lines += [a.describe() for a in calibration.attributions[-SUMMARY_ATTRIBUTIONS:]]
    best = [t for t in complete if t.edit][:SUMMARY_BEST]
    if best:
        lines.append("Best prior edits from the baseline:")
        lines += [f"- {edit_json(t.edit, EDIT_CHARS)} → {t.relative:.3f}x baseline "
                  f"({100 * (1 - (t.relative or 1.0)):+.1f}% gain)" for t in best]
    failed = [t for t in trials if t.status == "failed"][-SUMMARY_FAILURES:]
    if failed:
        lines.append("Prior failures to avoid:")
        lines += [f"- {edit_json(t.edit, EDIT_CHARS)} → failed ({t.reason or 'no reason given'})"
                  for t in failed]
    rejected = [t for t in trials if t.status == "rejected"][-SUMMARY_REJECTIONS:]
    if rejected:
        lines.append("Prior edits the guardrails rejected:")
        lines += [f"- {edit_json(t.edit, EDIT_CHARS)} → "
                  + clip("; ".join(t.reasons) or "no reason given", REASON_CHARS)
                  for t in rejected]
    return clip("\n".join(lines), limit)
