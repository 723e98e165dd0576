"""A campaign in MLflow (``recipelab run --mlflow-uri``): one parent run, one child run per trial.

The parent run lives in the experiment named after the campaign; its id is kept in the
campaign directory's ``mlflow-run-uri.txt``, so a campaign resumed after a crash or a
restart reopens it rather than starting another. Each trial the agent records as ended
(complete, failed, rejected or interrupted) becomes one child run: its recipe as params
(flattened), val_bpb and its curve as metrics with their steps, its status, failure reason,
kind and proposer as tags.

MLflow is a copy of the trajectory, never a dependency of it: when the store cannot be
reached, the failure is a warning event and the trial stays pending; the next record tries
again and catches up on everything pending. A trial is never logged twice: each child run
carries its trial id as a tag, and the children already in the store are read back when the
parent run is opened (a child left half-logged by a crash is deleted and logged again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from recipelab.agent.setup.settings import FLAT_KEYS, CampaignSettings
from recipelab.redaction import redact_url
from recipelab.tracking import (
    MlflowRun,
    RunNotFound,
    Status,
    TrackingUnavailable,
    check_tracking_uri,
    read_run_location,
    write_run_uri,
)
from recipelab.trajectory.record import TrialRecord

TRIAL_ID_TAG = "recipelab.trial_id"
PARENT_TAG = "mlflow.parentRunId"
RUN_STATUS: dict[str, Status] = {"complete": "FINISHED", "failed": "FAILED",
                                 "rejected": "KILLED", "interrupted": "KILLED"}
"""MLflow's status for each terminal trial status (a rejected trial never ran; an
interrupted one was stopped): the recipelab status itself is the ``recipelab.status`` tag."""
SCALAR_METRICS = ("train_loss", "tokens_per_s", "step_ms", "peak_memory_bytes", "params",
                  "wall_s", "setup_s", "train_s", "eval_s", "val_bpb_stderr", "gain_vs_baseline",
                  "gain_low", "gain_high")
SETTINGS_NOT_LOGGED = ("mlflow_uri", "llm_base_url", "db")  # URLs that may hold credentials


def logged_settings(settings: CampaignSettings) -> dict[str, Any]:
    """The settings as the parent run's params (``ladder.promote``, ...), less the URLs of
    :data:`SETTINGS_NOT_LOGGED`, found in whichever component holds them."""
    exclude: dict[str, Any] = {}
    for key in SETTINGS_NOT_LOGGED:
        component, field = FLAT_KEYS[key]
        exclude.setdefault(component, set()).add(field)
    return settings.model_dump(mode="json", exclude=exclude)


def trial_tags(record: TrialRecord) -> dict[str, str]:
    """What a person filters trials by in MLflow: status, failure reason, kind, proposer."""
    tags = {TRIAL_ID_TAG: record.trial_id, "recipelab.status": record.status,
            "recipelab.kind": record.kind, "recipelab.proposer": record.proposer,
            "recipelab.reason": record.reason, "recipelab.message": record.message,
            "recipelab.hypothesis": record.hypothesis or None,
            "recipelab.parent": record.parent, "recipelab.retry_of": record.retry_of,
            "recipelab.verdict": record.verdict, "recipelab.fingerprint": record.fingerprint,
            "recipelab.edit": json.dumps(record.edit) if record.edit else None,
            "recipelab.rejected_because": "; ".join(record.reasons) or None}
    return {key: value for key, value in tags.items() if value}


def trial_history(record: TrialRecord) -> dict[str, list[tuple[int, float | int | None]]]:
    """A trial's figures as metric series: every step's training loss (the curve's when the
    trial kept no per-step losses), the curve's grad norm and learning rate, and val_bpb and
    the scalar figures at the last step trained."""
    curve = record.curve
    measured = record.measured
    losses = measured.losses
    history: dict[str, list[tuple[int, float | int | None]]] = {
        "train_loss": (list(enumerate(losses)) if losses
                       else [(int(p["step"]), p.get("loss")) for p in curve]),
        "grad_norm": [(int(p["step"]), p.get("grad_norm")) for p in curve],
        "lr": [(int(p["step"]), p.get("lr")) for p in curve],
    }
    last = measured.steps_done or measured.steps or (int(curve[-1]["step"]) if curve else 0)
    history["val_bpb"] = [(last, record.val_bpb)]
    for name in SCALAR_METRICS:
        if name == "train_loss" and history["train_loss"]:
            continue  # the series already ends with it
        value = getattr(measured, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            history[name] = [(last, value)]
    return history


class CampaignTracking:
    """The campaign's parent run and its children (see the module). Never raises for
    MLflow: :meth:`record` and :meth:`close` turn every failure into a warning event."""

    def __init__(self, settings: CampaignSettings, directory: Path, log: Any) -> None:
        if settings.store.mlflow_uri is None:
            raise ValueError("CampaignTracking needs settings.mlflow_uri")
        self.settings = settings
        self.uri = settings.store.mlflow_uri
        self.shown_uri = redact_url(self.uri)
        self.directory = directory
        self.log = log
        self.parent: MlflowRun | None = None
        self.logged: set[str] = set()  # trial ids with a complete child run in the store
        self.pending: dict[str, TrialRecord] = {}

    # -- the parent run -------------------------------------------------------------------------

    def _open_parent(self) -> MlflowRun:
        """The campaign's run: reopened from ``mlflow-run-uri.txt`` when it names a run of
        this store, else a new one (whose params are the campaign's settings)."""
        if self.parent is not None:
            return self.parent
        name = self.settings.name
        location = read_run_location(self.directory)
        parent = None
        if location is not None and location.tracking_uri == redact_url(check_tracking_uri(self.uri)):
            try:
                parent = MlflowRun.start(self.uri, name, name, run_id=location.run_id)
            except RunNotFound as error:
                self.log.warning("mlflow_parent_missing", uri=self.shown_uri, error=str(error),
                                 hint="a new parent run is started")
        if parent is None:
            parent = MlflowRun.start(self.uri, name, name, tags={
                "recipelab.campaign": name, "recipelab.directory": str(self.directory.resolve())})
            write_run_uri(self.directory, parent)
            parent.log_params(logged_settings(self.settings))
        self.logged = self._children_logged(parent)
        self.parent = parent
        self.log.info("mlflow_run", uri=self.shown_uri, run=parent.run_uri(),
                      trials_logged=len(self.logged))
        return parent

    def _children_logged(self, parent: MlflowRun) -> set[str]:
        """The trial ids already logged under ``parent``; a child a crash left running (half
        logged) is deleted, so its trial is logged again, whole."""
        logged: set[str] = set()
        token = None
        while True:
            page = parent.client.search_runs(
                [parent.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.run_id}'",
                max_results=1000, page_token=token)
            for run in page:
                trial_id = run.data.tags.get(TRIAL_ID_TAG)
                if run.info.status == "RUNNING" or trial_id is None or trial_id in logged:
                    parent.client.delete_run(run.info.run_id)
                else:
                    logged.add(trial_id)
            token = page.token
            if not token:
                return logged

    # -- the trials -----------------------------------------------------------------------------

    def record(self, records: Iterable[TrialRecord]) -> None:
        """Log every ended trial in ``records`` not yet in MLflow, and any still pending from
        an earlier failure. A failure is a warning event; the trials stay pending."""
        for record in records:
            if record.is_terminal and record.trial_id not in self.logged:
                self.pending[record.trial_id] = record
        if not self.pending:
            return
        try:
            parent = self._open_parent()
            for trial_id, record in list(self.pending.items()):
                if trial_id not in self.logged:
                    self._log_trial(parent, record)
                    self.logged.add(trial_id)
                del self.pending[trial_id]
        except TrackingUnavailable as error:
            self.parent = None  # read the children back when the store answers again
            self.log.warning("mlflow_failed", uri=self.shown_uri, error=str(error),
                             pending=sorted(self.pending),
                             hint="the trials are in the trajectory; the next record tries again")

    def _log_trial(self, parent: MlflowRun, record: TrialRecord) -> None:
        child = MlflowRun.start(self.uri, self.settings.name, record.trial_id, parent=parent,
                                tags=trial_tags(record))
        child.log_params(record.recipe)
        child.log_history(trial_history(record))
        child.end(RUN_STATUS[record.status])

    def close(self, stopped_early: bool) -> None:
        """End the parent run (KILLED when the campaign stopped early; a resume reopens it)."""
        if self.parent is None:
            return
        try:
            self.parent.end("KILLED" if stopped_early else "FINISHED")
        except TrackingUnavailable as error:
            self.log.warning("mlflow_failed", uri=self.shown_uri, error=str(error),
                             hint="the campaign's run stays open in MLflow")

