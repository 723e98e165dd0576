"""A long run in MLflow (``recipelab pretrain --mlflow-uri``), as the reference lab keeps it.

One MLflow run per long run, in the experiment named after the campaign: the recipe as
params, every ``--log-every`` row as metrics at its step, the spike rehearsal as a tag, the
manifest, metrics and plots as artifacts at the end. Its id is kept in the run directory's
``mlflow-run-uri.txt``, so ``--resume-from-latest`` reopens the same run. MLflow is a copy of
the metrics, never a reason to stop a billed run: a store that cannot be reached is a
warning (``mlflow_failed``) and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from recipelab.redaction import redact_url
from recipelab.tracking import MlflowRun, Status, TrackingUnavailable, read_run_id, write_run_uri

LOGGED_METRICS = ("train_loss", "val_loss", "val_bpb", "grad_norm", "param_norm", "lr",
                  "tokens_per_s", "mfu", "usd_spent")
RUN_STATUS: dict[str, Status] = {"complete": "FINISHED", "diverged": "FAILED",
                                 "preempted": "KILLED", "budget_projection": "KILLED",
                                 "budget_spent": "KILLED"}

Warn = Callable[..., None]


class LongRunTracking:
    """The long run's MLflow run; every call after a failure to start is a no-op."""

    def __init__(self, uri: str, experiment: str, out: Path, warn: Warn) -> None:
        self.uri, self.out, self.warn = uri, out, warn
        self.run: MlflowRun | None = None
        self._call("start", lambda: self._start(experiment))

    def _start(self, experiment: str) -> None:
        self.run = MlflowRun.start(self.uri, experiment, self.out.name,
                                   run_id=read_run_id(self.out))
        write_run_uri(self.out, self.run)

    def _call(self, what: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except TrackingUnavailable as error:
            self.warn("mlflow_failed", level="warning", what=what, error=str(error),
                      uri=redact_url(self.uri),
                      how="the run goes on; the metrics stay in metrics.csv")

    def params(self, params: Mapping[str, object]) -> None:
        if self.run is not None:
            run = self.run
            self._call("params", lambda: run.log_params(params))

    def row(self, row: Mapping[str, Any]) -> None:
        if self.run is not None:
            run = self.run
            metrics = {name: row.get(name) for name in LOGGED_METRICS if row.get(name) != ""}
            self._call("metrics", lambda: run.log_metrics(metrics, int(row["step"])))

    def tag(self, key: str, value: str) -> None:
        if self.run is not None:
            run = self.run
            self._call("tag", lambda: run.set_tag(key, value))

    def finish(self, stop: str, artifacts: list[Path]) -> None:
        if self.run is None:
            return
        run = self.run
        for path in artifacts:
            if path.exists():
                self._call("artifact", partial(run.log_artifact, path))
        self._call("tag", lambda: run.set_tag("recipelab.stop_reason", stop))
        self._call("end", lambda: run.end(RUN_STATUS[stop]))
