"""The trial record: one row of the trajectory, the same in ``trajectory.jsonl`` and SQLite.

A record is written when a trial reaches a terminal status (``rejected``, ``complete``,
``failed``, ``interrupted``); a ``running`` row lives only in SQLite, so that a crash of the
orchestrator leaves evidence of what was in flight.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import JSON, Column, String
from sqlmodel import Field, SQLModel

Status = Literal["rejected", "queued", "running", "complete", "failed", "interrupted"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"rejected", "complete", "failed", "interrupted"})
TRAINED_STATUSES: frozenset[str] = frozenset({"complete", "failed"})


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class TrialMetrics(BaseModel):
    """What a trial measured, as typed fields: the figures every reader of ``metrics`` uses.

    ``TrialRecord.metrics`` stays a JSON object in the store (old trajectories load, and a
    newer recipelab may add figures); this is the typed reading of it, with every field
    optional because a failed or interrupted trial measured only some of them. Figures it
    does not name are kept as extra fields.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    wall_s: float | None = None  # submission to result, as the orchestrator saw it
    node: str | None = None  # the Ray node that ran it ("host/node id"); None on this machine
    setup_s: float | None = None
    train_s: float | None = None
    eval_s: float | None = None
    steps: int | None = None  # the recipe's steps
    steps_done: int | None = None
    resumed_from_step: int | None = None
    train_loss: float | None = None
    tokens_per_s: float | None = None
    step_ms: float | None = None
    tokens_per_step: int | None = None
    flops_per_token: int | None = None
    params: int | None = None
    peak_memory_bytes: int | None = None
    telemetry: dict[str, Any] | None = None
    val_bpb_stderr: float | None = None  # sampling error of val_bpb over the eval slice
    # the slice's blocks as this trial scored them (trainer.spec.EvalBlocks): a gain's error
    eval_blocks: dict[str, Any] | None = None
    losses: list[float | None] | None = None  # every step's training loss
    gain_vs_baseline: float | None = None
    gain_low: float | None = None  # its 90% interval
    gain_high: float | None = None
    within_noise: bool | None = None


class TrialRecord(SQLModel):
    """Everything known about one trial (validated; see :class:`TrialRow` for the table).

    ``reasons`` holds guardrail rejections (a person and the LLM read them); ``reason`` is
    the one-word failure cause (``oom``, ``nan``, ``diverged``, ``timeout``, ``crash``) and
    ``message`` its one-line explanation.
    ``retry_of`` names the interrupted trial this one re-runs, so a candidate is re-queued
    at most once and never counted twice.
    """

    campaign: str = Field(primary_key=True)
    trial_id: str = Field(primary_key=True)
    iteration: int = 0
    kind: str = "proxy"
    status: Status = Field(sa_type=String)
    reason: str | None = None
    message: str | None = None
    reasons: list[str] = Field(default_factory=list, sa_column=Column(JSON))
    recipe: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    edit: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    fingerprint: str | None = None
    parent: str | None = None
    proposer: str = ""
    hypothesis: str = ""
    retry_of: str | None = None
    budget: int | None = None
    """The rung the run trained at, in the baseline's steps: its budget is that many of the
    baseline's steps' tokens, trained in the recipe's own ``steps``. None on records written
    before budgets were tokens, whose recipe's steps were the budget."""
    val_bpb: float | None = None
    verdict: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    curve: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON))
    provenance: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))
    artifacts: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON))
    created_at: str = Field(default_factory=utc_now)
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def budget_steps(self) -> int:
        """The rung the run belongs to, in the baseline's steps (see ``budget``): what a
        ladder level, a horizon and a pairing with the baseline are keyed by."""
        return self.budget if self.budget is not None else self.steps

    @property
    def steps(self) -> int:
        """The run's own steps (its recipe's)."""
        return int(self.recipe.get("steps", 0))

    @property
    def tokens_per_step(self) -> int:
        recipe = self.recipe
        return (int(recipe.get("batch_size", 0)) * int(recipe.get("seq_len", 0))
                * int(recipe.get("grad_accum", 1)))

    @property
    def tokens(self) -> int:
        """The training tokens the run's recipe reads: its steps × tokens per step."""
        return self.steps * self.tokens_per_step

    @property
    def measured(self) -> TrialMetrics:
        """``metrics`` as typed fields."""
        return TrialMetrics.model_validate(self.metrics)

    @property
    def trained(self) -> bool:
        """The trial trained to an outcome, ``complete`` or ``failed``: what a budget counts
        and what a stress run done means (a rejected trial never trained, an interrupted one
        did not finish, a running one has not yet)."""
        return self.status in TRAINED_STATUSES

    def to_json_line(self) -> str:
        """The record as one compact JSON line (no trailing newline)."""
        return self.model_dump_json()

    @classmethod
    def from_json_line(cls, line: str) -> TrialRecord:
        """Parse and validate one JSONL line (raises ``ValueError`` on a bad line)."""
        return cls.model_validate_json(line)

    def to_row(self) -> TrialRow:
        return TrialRow(**self.model_dump())


def has_score(record: TrialRecord) -> bool:
    """A complete trial with a finite val_bpb."""
    return (record.status == "complete" and record.val_bpb is not None
            and math.isfinite(record.val_bpb))


class TrialRow(TrialRecord, table=True):
    """The SQLite/SQL table of records. SQLModel skips validation on table models, so
    records are always validated as :class:`TrialRecord` first and converted with
    :meth:`TrialRecord.to_row` / :meth:`TrialRow.to_record`."""

    __tablename__ = "trials"

    def to_record(self) -> TrialRecord:
        return TrialRecord.model_validate(self.model_dump())
